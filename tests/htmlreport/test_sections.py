"""The data each section shows: hand-made results whose figures are known, and the real H100
bench and optimize results checked against the figures their own tools computed."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from reportdata import (
    BENCH_FP32_FPROP,
    BENCH_H200,
    EXTRA,
    H100,
    OPT_RESNET,
    OWN,
    cand,
    env_report,
    optimize_payload,
    tuned,
)

from convdoctor.htmlreport import sec_bench, sec_machine, sec_optimize, sec_roofline, sec_tuning
from convdoctor.htmlreport.build import choose_peaks
from convdoctor.htmlreport.inputs import load_bench, tuned_from_bench
from convdoctor.htmlreport.model import DevicePeaks, EnvDoc, Inputs
from convdoctor.htmlreport.optdata import load_optimize, run_of_cli
from convdoctor.tune.result import median_ci


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


# ------------------------------------------------------------------------------------ tuning
def _busy_problem():
    fast = [cand(f"cudnn:eng{i}", samples=tuple(1e-4 * (1.05 + i / 100) for _ in range(5)))
            for i in range(15)]
    return tuned(
        [cand("cudnn:win", samples=tuple(1e-4 + j * 1e-7 for j in range(40)), discarded=3),
         *fast,
         cand("torch:heuristic", samples=(1.5e-4,) * 5),
         cand("torch:benchmark", samples=(1.2e-4,) * 5, clock=1755.0),
         cand("cudnn:slow1", "screened-out", (4e-4, 4.1e-4)),
         cand("cudnn:slow2", "screened-out", (5e-4,)),
         cand("cudnn:slow3", "screened-out", (6e-4,)),
         cand("triton:fp_x", "disqualified", reason="max relative error 3e-2 above 1e-2"),
         cand("cudnn:eng99", "failed", reason="CUDNN_STATUS_EXECUTION_FAILED")],
        chosen="cudnn:win", chosen_s=1e-4, heuristic_s=1.5e-4, benchmark_s=1.2e-4)


def test_tuning_rows_mark_choice_and_pytorch_paths_and_fold_the_rest() -> None:
    tp = _busy_problem()
    rows, untimed = sec_tuning.strip_rows(tp)
    by_key = {r.key: r for r in rows if r.key}
    assert by_key["cudnn:win"].roles == ("chosen",)
    assert by_key["torch:heuristic"].roles == ("heuristic",)
    assert by_key["torch:heuristic"].label == "PyTorch heuristic"
    assert by_key["torch:benchmark"].label == "benchmark=True"
    # the 12 fastest measured rows, plus the PyTorch paths that rank below them
    assert len(by_key) == sec_tuning.MAX_ROWS + 2
    # 18 timed: the winner and 11 others are the 12 fastest; 4 fold into one row
    more = [r for r in rows if r.label.startswith("4 more measured")]
    assert len(more) == 1 and more[0].n == 4
    screened = [r for r in rows if r.status == "screened-out"]
    assert len(screened) == 1 and screened[0].n == 3
    assert sorted(screened[0].points) == [4.05e-4, 5e-4, 6e-4]     # each one's median
    assert {(c.key, c.status) for c in untimed} == {("triton:fp_x", "disqualified"),
                                                    ("cudnn:eng99", "failed")}
    assert by_key["cudnn:win"].discarded == 3


def test_tuning_plot_shows_box_for_many_samples_and_clock_when_it_differs() -> None:
    tp = _busy_problem()
    rows, untimed = sec_tuning.strip_rows(tp)
    svg = sec_tuning.plot(tp, rows)
    assert 'class="box"' in svg                      # the 40-sample winner gets a box
    win_dots = svg.split('class="pt chosen" d="')[1].split('"')[0]
    assert win_dots.count("h0") == sec_tuning.STRIP_POINTS
    assert "clock MHz" in svg and ">1755<" in svg    # two clocks in one problem: a column
    html = sec_tuning.block(tp, open_=True)
    assert "CUDNN_STATUS_EXECUTION_FAILED" in html and "disqualified" in html
    assert "3 samples discarded" in html


def test_tuning_summary_line_speedups() -> None:
    line = sec_tuning.summary_line(_busy_problem())
    assert "1.50x vs PyTorch heuristic" in line
    assert "1.20x vs benchmark=True" in line


def test_bench_rows_become_tuned_problems_with_each_runs_median_and_referee_times() -> None:
    raw = _raw(BENCH_FP32_FPROP)
    tps = tuned_from_bench(load_bench(str(BENCH_FP32_FPROP)))
    assert len(tps) == len(raw["rows"]) == 101
    for tp, row in zip(tps, raw["rows"], strict=True):
        assert tp.chosen == tuple(dict.fromkeys(w for w in row["winners"] if w))
        assert tp.chosen_s == row["tuned_s"]
        cands = {c.key: c for c in tp.candidates}
        for run in row["tune_candidates"]:
            for key, _status, us, _reason in run:
                if us:
                    assert any(math.isclose(s, us * 1e-6) for s in cands[key].samples)
        for ref in row["referee_runs_s"]:
            for key, s in ref.items():
                if not key.startswith("twin:"):
                    assert s in cands[key].referee
    disagree = [tp for tp in tps if len(tp.chosen) == 2]
    assert disagree, "the pass has rows whose two tuning runs chose differently"


# ---------------------------------------------------------------------------------- roofline
PEAKS = DevicePeaks(H100, {"float32/tf32": 4.947e14}, 3.35e12, "measured, test", True)


def test_roofline_point_is_flops_over_time_at_flops_over_bytes() -> None:
    tp = tuned([cand("a", samples=(1e-5,))], chosen="a", chosen_s=1e-5, flops=2e9,
               min_bytes=1e7)
    pt = sec_roofline.point_of(tp, PEAKS)
    assert pt is not None
    assert pt.intensity == pytest.approx(200.0)
    assert pt.achieved == pytest.approx(2e14)
    # the roof at 200 FLOP/B is the compute peak (200 x 3.35e12 > 4.947e14)
    assert pt.bound == "compute"
    assert pt.percent == pytest.approx(100 * 2e14 / 4.947e14)
    low = tuned([cand("a", samples=(1e-5,))], chosen="a", chosen_s=1e-5, flops=2e7,
                min_bytes=1e7)
    lp = sec_roofline.point_of(low, PEAKS)
    assert lp is not None and lp.bound == "memory"
    assert lp.percent == pytest.approx(100 * 2e12 / (2.0 * 3.35e12))
    assert sec_roofline.point_of(tp, None).percent is None       # no peaks: a point, no roof


def test_roofline_groups_by_device_and_math_dedups_and_ranks_headroom() -> None:
    a = tuned([], chosen="a", chosen_s=1e-5, flops=2e9, label="a")
    b = tuned([], chosen="b", chosen_s=1e-4, flops=2e9, label="b")
    inp = Inputs(tuned=(a, b, a), peaks=(PEAKS,))
    (plot,) = sec_roofline.plots(inp)
    assert (plot.device, plot.math) == (H100, "float32/tf32")
    assert [p.label for p in plot.points] == ["a", "b"]
    assert [p.label for p in sec_roofline.headroom(plot)] == ["b", "a"]
    html = sec_roofline.render(inp)
    assert html is not None and 'class="ceil"' in html


def test_peaks_measured_first_then_datasheet_then_none() -> None:
    h100 = tuned([], chosen="a", chosen_s=1e-5)
    other = tuned([], chosen="a", chosen_s=1e-5, device="Some GPU")
    peaks, notes = choose_peaks([h100, other], [])
    assert [p.device for p in peaks] == [H100] and not peaks[0].measured
    assert peaks[0].flops["float32/tf32"] == pytest.approx(494.7e12)
    assert any("Some GPU" in n for n in notes)
    peaks, _ = choose_peaks([h100], [PEAKS])
    assert peaks == [PEAKS]


# ------------------------------------------------------------------------------------- bench
@pytest.mark.parametrize("path", [BENCH_FP32_FPROP, BENCH_H200])
def test_bench_distributions_agree_with_the_bench_summary(path: Path) -> None:
    raw = _raw(path)
    b = load_bench(str(path))
    vb, vh = sec_bench.distributions([b])
    s = raw["summary"]
    assert vb.versus == "benchmark=True" and vh.versus == "heuristic"
    assert len(vb.values) == s["measured_vs_benchmark"]
    assert vb.geomean == pytest.approx(s["geomean_speedup_vs_benchmark"])
    assert vh.geomean == pytest.approx(s["geomean_speedup_vs_heuristic"])
    assert vb.share_110 == pytest.approx(s["share_at_1_10x_vs_benchmark"])
    assert len(sec_bench.slow_rows(b)) == s["slower_than_best_pytorch_by_2pct"]
    stab = [r["stability"] for r in raw["rows"] if r["stability"] is not None]
    assert len(sec_bench.unstable_rows(b)) == round((1 - s["stable_within_3pct"]) * len(stab))


def test_bench_slow_and_unstable_rows_are_listed_worst_first() -> None:
    b = load_bench(str(BENCH_FP32_FPROP))
    rows = [dict(r) for r in b.rows[:4]]
    rows[0].update(speedup_vs_best=0.90, stability=0.0)
    rows[1].update(speedup_vs_best=0.97, stability=0.10)
    rows[2].update(speedup_vs_best=0.99, stability=0.05)
    rows[3].update(speedup_vs_best=1.20, stability=0.02)
    from dataclasses import replace

    small = replace(b, rows=tuple(rows))
    assert [r["speedup_vs_best"] for r in sec_bench.slow_rows(small)] == [0.90, 0.97]
    assert [r["stability"] for r in sec_bench.unstable_rows(small)] == [0.10, 0.05]


# ---------------------------------------------------------------------------------- optimize
def test_optimize_decisions_and_where_the_step_goes() -> None:
    run = run_of_cli(optimize_payload(3), "test")
    d = {x.name: x for x in run.decisions}
    assert (d["layout"].chosen, d["layout"].baseline) == ("channels_last_graphed",
                                                          "as_given_graphed")
    assert d["layout"].margin == 0.05
    assert d["routing"].chosen == "unrouted" and d["graphs"].chosen == "graphed"
    assert "eager_host_cpu" not in dict(d["graphs"].options)
    b = sec_optimize.breakdown(run)
    assert b.pytorch == {"fprop": 3.0, "dgrad": 6.0, "wgrad": 3.0}
    assert b.chosen == {"fprop": 1.5, "dgrad": 6.0, "wgrad": 4.5}
    assert b.untimed == 1
    steps = sec_optimize.waterfall_steps(b, n=2)
    assert len(steps) == 3 and steps[-1][0] == "7 others"
    assert sum(v for _, v in steps) == pytest.approx(sum(b.chosen.values())
                                                     - sum(b.pytorch.values()))
    html = sec_optimize.run_block(run)
    assert "Routing is off" in html         # the bars are the routes; the model runs PyTorch


def test_optimize_end_to_end_uncertainty_from_samples() -> None:
    doc = optimize_payload(1)
    py = [10.0 + 0.1 * (i % 7) for i in range(30)]
    cd = [6.0 + 0.05 * (i % 5) for i in range(30)]
    doc["step_samples_ms"] = {"pytorch": py, "convdoctor": cd}
    run = run_of_cli(doc, "test")
    rows = {r.label: r for r in sec_optimize.end_to_end(run)}
    _, lo, hi = median_ci(cd)
    assert rows["convdoctor"].interval == (lo, hi)
    assert rows["convdoctor"].interval_kind == "95% CI"
    lo_s, hi_s = sec_optimize.speedup_interval(run)
    assert lo_s <= 10.0 / 6.0 <= hi_s
    assert "No step samples" not in sec_optimize.run_block(run)
    assert "No step samples" in sec_optimize.run_block(run_of_cli(optimize_payload(1), "t"))


def test_bench_optimize_result_pools_processes() -> None:
    raw = _raw(OPT_RESNET)
    runs = {r.name: r for r in load_optimize(str(OPT_RESNET))}
    cfg = raw["configs"]["resnet50_fp32"]["train"]
    run = runs["resnet50_fp32 train"]
    cd = run.variants["convdoctor"]
    assert cd.ms == cfg["convdoctor"]["ms"]
    assert cd.runs == tuple(cfg["convdoctor"]["runs_ms"])
    n = len(cfg["convdoctor"]["samples_ms"]) + sum(len(r["samples_ms"])
                                                    for r in cfg["convdoctor"]["repeats"])
    assert len(cd.samples) == n
    rows = {r.label: r for r in sec_optimize.end_to_end(run)}
    assert rows["convdoctor"].interval == (min(cd.runs), max(cd.runs))
    d = {x.name: x for x in run.decisions}
    assert d["routing"].chosen == "unrouted" and d["graphs"].chosen == "graphed"
    assert d["graphs"].margin == cfg["convdoctor"]["report"]["margins"]["graphs"]
    assert not run.layers


# ----------------------------------------------------------------------------------- machine
def test_library_grid_names_the_winner_and_its_rule(tmp_path: Path) -> None:
    g = sec_machine.library_grid(env_report(tmp_path, broken=True))
    assert g is not None
    rows = {r.name: r for r in g.rows}
    graph = rows["libcudnn_graph.so.9"]
    assert graph.winner == f"{EXTRA}/libcudnn_graph.so.9"
    assert "LD_LIBRARY_PATH BEFORE DT_RUNPATH" in graph.rule and graph.predicted
    assert graph.loaded == (f"{EXTRA}/libcudnn_graph.so.9",) and not graph.mismatch
    assert [c.win for c in graph.cells] == [True, False]
    # libcudnn.so.9: the LD_LIBRARY_PATH copy is searched first, yet torch's RPATH copy wins
    main = rows["libcudnn.so.9"]
    assert main.winner == f"{OWN}/libcudnn.so.9" and "DT_RPATH" in main.rule
    assert [g.dirs[c.col][0] for c in main.cells] == [EXTRA, OWN]
    assert [c.win for c in main.cells] == [False, True]
    assert rows["libcudart.so.13"].predicted is False


def test_machines_side_by_side_highlight_differences(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    envs = (EnvDoc("good", env_report(tmp_path / "a", broken=False)),
            EnvDoc("bad", env_report(tmp_path / "b", broken=True)))
    rows = {label: (vals, d) for label, vals, d in sec_machine.compare_rows(envs)}
    assert rows["LD_LIBRARY_PATH"] == (["-", EXTRA], True)
    assert rows["driver"][1] is False
    assert rows["findings"][1] is True and "cudnn-shadowed" in rows["findings"][0][1]
    html = sec_machine.render(Inputs(envs=envs))
    assert html is not None and html.count('class="diff"') == sum(d for _, d in rows.values())


def test_findings_errors_first_fix_kept_and_only_web_links() -> None:
    doc = {"kind": "env", "facts": {}, "findings": [
        {"id": "b-info", "severity": "info", "title": "fine"},
        {"id": "a-error", "severity": "error", "title": "broken",
         "fix": "unset LD_LIBRARY_PATH\nexport X=1",
         "sources": ["https://example.org/doc", "javascript:alert(1)"]}]}
    html = sec_machine.findings_html(doc)
    assert html.index("a-error") < html.index("b-info")
    assert "<pre>unset LD_LIBRARY_PATH\nexport X=1</pre>" in html
    assert '<a href="https://example.org/doc">' in html
    assert 'href="javascript' not in html
