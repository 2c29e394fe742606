"""bench --shard splits a suite into parts that cover it exactly once; --merge joins the results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tune_fakes import importable_in_workers

from convdoctor.bench.referee import spread
from convdoctor.bench.suites import parse_shard, shard_of
from convdoctor.bench.summary import summarize
from convdoctor.cli import main
from convdoctor.errors import UsageError


@pytest.mark.parametrize("n_items,n", [(101, 4), (7, 3), (3, 5), (10, 1)])
def test_shards_cover_every_item_once(n_items: int, n: int) -> None:
    items = list(range(n_items))
    parts = [shard_of(items, (k, n)) for k in range(1, n + 1)]
    assert [x for p in parts for x in p] == items
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.parametrize("bad", ["0/3", "4/3", "x", "1/0", "1-2"])
def test_bad_shard_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_shard(bad)


def _row(key: str, h: float, b: float, t: float, stab: float | None = 0.0) -> dict[str, Any]:
    best = min(h, b)
    return {"group": "g", "name": key, "problem": key, "problem_key": key, "heuristic_s": h,
            "benchmark_s": b, "tuned_s": t, "referee_s": {}, "benchmark_picks": [],
            "winners": ["w", "w"], "speedup_vs_heuristic": h / t, "speedup_vs_benchmark": b / t,
            "speedup_vs_best": best / t, "stability": stab, "benchmark_spread": None,
            "tuning_s": [1.0, 2.0], "benchmark_cost_s": [0.05], "degraded": False}


def test_summary_figures() -> None:
    s = summarize([_row("a", 2.0, 2.2, 1.0), _row("b", 1.0, 1.0, 1.05, stab=0.1)])
    assert s["share_at_1_10x_vs_benchmark"] == 0.5
    assert s["share_at_1_10x_vs_best_pytorch"] == 0.5   # row a: 2.0 / 1.0 vs the heuristic
    s2 = summarize([_row("a", 1.05, 1.3, 1.0)])         # benchmark=True slow: 1.30x vs it, 1.05x
    assert (s2["share_at_1_10x_vs_benchmark"], s2["share_at_1_10x_vs_best_pytorch"]) == (1.0, 0.0)
    assert s["slower_than_best_pytorch_by_2pct"] == 1
    assert s["stable_within_3pct"] == 0.5
    assert s["geomean_speedup_vs_benchmark"] == pytest.approx((2.2 * (1 / 1.05)) ** 0.5)


def test_summary_counts_problems_tuned_from_the_short_list() -> None:
    rows = [_row("a", 1.0, 1.0, 1.0), _row("b", 1.0, 1.0, 1.0), _row("c", 1.0, 1.0, 1.0)]
    rows[0]["short_list_runs"] = 1
    rows[1]["short_list_runs"] = 0                      # rows[2]: an older row without the field
    assert summarize(rows)["short_list_problems"] == 1
    assert summarize(rows[1:])["short_list_problems"] == 0
    assert summarize(rows)["left_out_problems"] == 0
    rows[1]["left_out_runs"] = 2                        # listed in full, without a hung engine
    assert summarize(rows)["left_out_problems"] == 1


def test_heuristic_path_spread_between_processes() -> None:
    # H100: PyTorch's heuristic path ran 285 us in five processes, 342 us in one
    assert spread([285e-6, 285.5e-6, 342e-6]) == pytest.approx(57 / 285)
    assert spread([1e-3]) is None and spread([]) is None and spread([0.0, 1e-3]) is None
    rows = [_row("a", 1.0, 1.0, 1.0), _row("b", 1.0, 1.0, 1.0), _row("c", 1.0, 1.0, 1.0)]
    rows[0]["heuristic_process_spread"] = 0.2
    rows[1]["heuristic_process_spread"] = 0.01          # rows[2]: an older row without the field
    assert summarize(rows)["heuristic_path_differs_over_5pct"] == 0.5
    assert summarize(rows[2:])["heuristic_path_differs_over_5pct"] is None


def _doc(rows: list[dict[str, Any]], config: str = "fp32-nchw") -> dict[str, Any]:
    return {"kind": "bench", "suite": "s", "config": config, "direction": "fprop",
            "backend": "cuda", "pytorch_runs": 2, "tune_runs": 2, "batch_override": None,
            "summary": {"wall_s": 10.0, "tuning_s_total_per_run": [3.0, 4.0]}, "rows": rows}


def test_merge_joins_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_doc([_row("p1", 2.0, 2.0, 1.0)])))
    b.write_text(json.dumps(_doc([_row("p2", 1.0, 1.0, 1.0), _row("p1", 2.0, 2.0, 1.0)])))
    out = tmp_path / "m.json"
    assert main(["bench", "--merge", str(a), str(b), "--json", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["problem_key"] for r in doc["rows"]] == ["p1", "p2"]   # p1 counted once
    assert doc["summary"]["problems"] == 2 and doc["summary"]["wall_s"] == 20.0
    assert doc["summary"]["tuning_s_total_per_run"] == [6.0, 8.0]
    assert json.loads(out.read_text())["summary"]["problems"] == 2


def test_merge_reads_gzipped_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # raw results are kept compressed as FILE.json.gz (benchmarks/results/bench)
    import gzip

    a, b = tmp_path / "a.json.gz", tmp_path / "b.json"
    with gzip.open(a, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(_doc([_row("p1", 2.0, 2.0, 1.0)])))
    b.write_text(json.dumps(_doc([_row("p2", 1.0, 1.0, 1.0)])))
    assert main(["bench", "--merge", str(a), str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["problems"] == 2
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip at all")
    assert main(["bench", "--merge", str(bad)]) == 2
    assert "cannot read bench result" in capsys.readouterr().err
    with gzip.open(bad, "wb") as gz:
        gz.write(b"\xff\xfe{")                       # gzip, but not UTF-8 JSON
    assert main(["bench", "--merge", str(bad)]) == 2
    assert main(["bench", "--referee-only", str(bad)]) == 2


def test_merge_refuses_mixed_configs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_doc([_row("p1", 2.0, 2.0, 1.0)])))
    b.write_text(json.dumps(_doc([_row("p2", 1.0, 1.0, 1.0)], config="fp16-nhwc")))
    assert main(["bench", "--merge", str(a), str(b)]) == 2
    assert "differs" in capsys.readouterr().err


def test_merge_rejects_non_bench_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "a.json"
    a.write_text("{}")
    assert main(["bench", "--merge", str(a)]) == 2
    assert main(["bench"]) == 2


def test_match_selects_the_1x1_layers() -> None:
    from convdoctor.bench.suites import load_suite, matching

    entries = list(load_suite("cnn-layers").entries)
    got = matching(entries, r" r=1 s=1 \S+ pad_pre=0,0 pad_post=0,0 .*groups=1 ", "fprop",
                    "float32", "nchw", "tf32")
    assert 20 < len(got) < len(entries)
    assert all(e.problem().kernel == (1, 1) for e in got)
    assert [e.name for e in matching(entries, "^vgg16 ", "fprop", "float32", "nchw",
                                      "tf32")] == [e.name for e in entries if e.group == "vgg16"]


@pytest.mark.parametrize("bad", ["(", "no-such-problem-anywhere"])
def test_bad_match_is_a_usage_error(bad: str) -> None:
    from convdoctor.bench.suites import load_suite, matching

    with pytest.raises(UsageError, match="--match"):
        matching(list(load_suite("cnn-layers").entries), bad, "fprop", "float32", "nchw", "tf32")


def test_failure_summary_counts_reasons() -> None:
    from convdoctor.bench.arms import failure_summary
    from convdoctor.problem import ConvProblem
    from convdoctor.tune.backend import Candidate
    from convdoctor.tune.result import CandidateStats, TuneResult

    def st(key: str, status: str, reason: str = "") -> CandidateStats:
        s = CandidateStats(candidate=Candidate(key, "cuda"))
        s.status, s.reason = status, reason
        return s

    oom = "prepare failed: RuntimeError: CUDA out of memory.\n Tried to allocate 128 MiB"
    r = TuneResult(problem=ConvProblem.parse("fprop n=1 c=1 h=4 w=4 k=1 r=1 s=1"), env={},
                   backend="cuda", winner=None,
                   candidates=[st("a", "failed", oom), st("b", "failed", oom),
                               st("c", "disqualified", "wrong output"), st("d", "ok"),
                               st("e", "screened-out", "slow")])
    out = failure_summary(r)
    assert out[0] == ("2 x failed: prepare failed: RuntimeError: CUDA out of memory. Tried to "
                      "allocate 128 MiB")
    assert out[1] == "1 x disqualified: wrong output"
    assert len(out) == 2


def test_candidate_digest_keeps_fastest_and_unexplained() -> None:
    from convdoctor.bench.arms import candidate_digest
    from convdoctor.problem import ConvProblem
    from convdoctor.tune.backend import Candidate
    from convdoctor.tune.result import CandidateStats, TuneResult

    def st(key: str, status: str, med: float | None = None, reason: str = "") -> CandidateStats:
        s = CandidateStats(candidate=Candidate(key, "cuda"))
        s.status, s.reason = status, reason
        if med is not None:
            s.samples = [med]
        return s

    r = TuneResult(problem=ConvProblem.parse("fprop n=1 c=1 h=4 w=4 k=1 r=1 s=1"), env={},
                   backend="cuda", winner=None,
                   candidates=[st("slow", "ok", 3e-6), st("fast", "ok", 1e-6),
                               st("gone", "screened-out", None, "screen: 2x"),
                               st("near", "screened-out", None, "screen: 1.4x"),
                               st("far", "screened-out", None, "screen: 9x"),
                               st("torch:gemm", "unsupported", None, "torch:gemm failed:\n OOM")])
    r.candidates[3].screen_samples = [1.4e-6, 1.5e-6, 1.3e-6]
    r.candidates[4].screen_samples = [9e-6]
    d = candidate_digest(r, fastest=1, screened=1)
    # the fastest measured one, the fastest screened-out one that has screen samples, the failure
    assert d == [["fast", "ok", 1.0, ""], ["near", "screened-out", 1.4, "screen: 1.4x"],
                 ["torch:gemm", "unsupported", None, "torch:gemm failed: OOM"]]


def test_rows_whose_runs_disagree_say_whether_their_walks_shared_seeds() -> None:
    from convdoctor.bench.report import disagreement_lines

    def row(stab: float | None, seeds1: list[str], seeds2: list[str]) -> dict:
        rec = [{"refinement": {"seeds": [[k, 1.0] for k in s]}} if s else {}
               for s in (seeds1, seeds2)]
        return {"problem": "fprop 32x64x35x35 k96", "stability": stab,
                "winners": ["cudnn:a", "cudnn:b"], "tune_listing": rec}

    assert disagreement_lines([row(0.0, ["x"], ["y"]), row(0.02, ["x"], ["y"]),
                               row(None, [], [])]) == []
    diff = disagreement_lines([row(0.112, ["cudnn:s1", "cudnn:s2"], ["cudnn:s1", "cudnn:s3"])])
    assert diff == ["runs disagree on fprop 32x64x35x35 k96: cudnn:a vs cudnn:b (11.2% apart in "
                    "the referee); the knob walks started from different seeds (1 of 3 shared)"]
    same = disagreement_lines([row(0.054, ["cudnn:s1"], ["cudnn:s1"])])
    assert same[0].endswith("the knob walks started from the same seeds")
    # rows from before the record (or a CPU backend): the choices only
    old = row(0.05, [], [])
    del old["tune_listing"]
    assert disagreement_lines([old]) == ["runs disagree on fprop 32x64x35x35 k96: cudnn:a vs "
                                         "cudnn:b (5.0% apart in the referee)"]


def test_rows_slower_than_pytorch_say_what_each_tuning_run_measured() -> None:
    from convdoctor.bench.report import slower_lines

    def row(vs_best: float | None, digests: list[list[list]]) -> dict:
        return {"problem": "fprop 32x2048x8x8 k320", "speedup_vs_best": vs_best,
                "winners": ["cudnn:a", "cudnn:a"], "tune_candidates": digests}

    # H100 fp32, the Mixed_7c.branch1x1 shape: the runs timed PyTorch's path faster and chose
    # the plan anyway; and the encoder.conv2 shape: the run saw its winner faster
    saw_torch = [["torch:gemm", "ok", 28.7, ""], ["torch:heuristic", "ok", 28.89, ""],
                 ["cudnn:a", "ok", 29.95, ""], ["torch:benchmark", "ok", 30.78, ""]]
    saw_win = [["cudnn:a", "ok", 97.0, ""], ["torch:benchmark", "ok", 97.79, ""]]
    assert slower_lines([row(1.0, [saw_torch]), row(0.981, [saw_torch]),
                         row(None, [])]) == []
    lines = slower_lines([row(0.969, [saw_torch, saw_win])])
    assert lines == ["slower than PyTorch on fprop 32x2048x8x8 k320: 0.969x; "
                     "run 1 cudnn:a 29.95 us vs torch:heuristic 28.89 us (measured "
                     "torch:heuristic 3.7% faster); run 2 cudnn:a 97.00 us vs torch:benchmark "
                     "97.79 us (measured the winner faster)"]
    # a heuristic-path winner whose path ran another kernel in other processes says so
    heur = row(0.92, [[["torch:benchmark", "ok", 112.1, ""], ["torch:heuristic", "ok", 113.41, ""]]])
    heur.update(winners=["torch:heuristic"], heuristic_process_spread=0.0707)
    assert slower_lines([heur])[0].endswith("measured torch:benchmark 1.2% faster); PyTorch's "
                                            "heuristic path was timed 7.1% apart across "
                                            "processes (its cuDNN engine is picked per process)")
    heur.update(heuristic_process_spread=0.02)
    assert "apart across processes" not in slower_lines([heur])[0]
    # no digest (older rows, or a run without PyTorch's paths): the winners only
    assert slower_lines([row(0.95, [])]) == ["slower than PyTorch on fprop 32x2048x8x8 k320: "
                                             "0.950x; run 1 cudnn:a; run 2 cudnn:a"]


def test_pytorch_paths_outside_the_tolerance_are_counted_and_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an H100 fp32 TF32 wgrad row had no benchmark=True time (its pick missed our tolerance):
    # the vs-benchmark figures covered 62 of 63 rows, which the output must say
    timed = _row("p1", 2.0, 1.5, 1.0)
    timed["pytorch_outside_tolerance"] = {"torch:benchmark": 2.09e-3}
    missing = _row("p2", 1.0, 1.0, 1.0)
    missing.update(benchmark_s=None, speedup_vs_benchmark=None)
    s = summarize([timed, missing, _row("p3", 1.0, 1.0, 1.0)])
    assert (s["measured"], s["measured_vs_benchmark"]) == (3, 2)
    assert s["pytorch_outside_tolerance_problems"] == 1
    a = tmp_path / "a.json"
    a.write_text(json.dumps(_doc([timed, missing])))
    assert main(["bench", "--merge", str(a)]) == 0
    out = capsys.readouterr().out
    assert "the figures vs benchmark=True cover 1 of 2 rows" in out
    assert "PyTorch's torch:benchmark misses our tolerance on p1 (error 0.00209)" in out


def test_the_pytorch_arm_times_its_paths_outside_the_tolerance() -> None:
    from tune_fakes import SimBackend, SimCandidate, SimWorld

    from convdoctor.bench.arms import ArmSpec, pytorch_arm
    from convdoctor.problem import ConvProblem
    from convdoctor.settings import Settings

    class Fresh(SimBackend):
        def __enter__(self) -> Fresh:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    class Bar:
        def update(self, n: int, text: str) -> None:
            pass

    w = SimWorld(seed=3, candidates=[
        SimCandidate("torch:heuristic", 2e-4, pinned=False),
        SimCandidate("torch:benchmark", 1e-4, wrong=True, wrong_err=2.09e-3, pinned=False)],
        noise_sigma=0.01, outlier_p=0.0)
    p = ConvProblem.parse("fprop n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1")
    spec = ArmSpec("sim", 0.2, 10.0, Settings())
    out = pytorch_arm([p], spec, Bar(), fresh=Fresh(w))[p.key()]
    assert out["benchmark_s"] == pytest.approx(1e-4, rel=0.1)
    assert out["heuristic_s"] == pytest.approx(2e-4, rel=0.1)
    assert out["outside_tolerance"] == {"torch:benchmark": 2.09e-3}


def test_the_referee_times_pytorch_paths_outside_the_tolerance(
        monkeypatch: pytest.MonkeyPatch) -> None:

    from convdoctor.bench.arms import ArmSpec
    from convdoctor.bench.referee import OUTSIDE_KEY, referee_arm
    from convdoctor.problem import ConvProblem
    from convdoctor.settings import Settings

    class Bar:
        def update(self, n: int, text: str) -> None:
            pass

    importable_in_workers(monkeypatch)       # the worker process imports tune_fakes
    p = ConvProblem.parse("fprop n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1")
    keys = {p.key(): ["torch:heuristic", "torch:benchmark", "eng:x", "eng:bad", "eng:pick"]}
    spec = ArmSpec("tune_fakes:make_outside_tolerance_backend", 0.2, 30.0, Settings())
    out = referee_arm([p], keys, spec, Bar())
    # PyTorch's own paths are timed; a plan that misses the tolerance is not (it is no path of
    # PyTorch's: the tuner would have disqualified it)
    assert set(out[p.key()]) == {"torch:heuristic", "torch:benchmark", "eng:x"}
    assert out[p.key()]["torch:benchmark"] == pytest.approx(1e-4, rel=0.1)
    assert out[OUTSIDE_KEY] == {p.key(): {"torch:benchmark": 2.09e-3}}
    # benchmark=True's pick on the CPU is a candidate key: the bench names it per problem
    out = referee_arm([p], keys, spec, Bar(),
                      pytorch_for={p.key(): {"torch:heuristic", "eng:pick"}})
    assert set(out[p.key()]) == {"torch:heuristic", "eng:x", "eng:pick"}
    assert out[OUTSIDE_KEY] == {p.key(): {"eng:pick": 2.2e-3}}


@pytest.mark.slow
def test_a_bench_row_names_pytorch_paths_timed_outside_the_tolerance(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # end to end on the sim backend in real worker processes: both PyTorch arms and the referee
    # time benchmark=True's pick that misses the tolerance; the tuner never takes it
    import argparse

    from convdoctor.cli import bench as cmd_bench

    importable_in_workers(monkeypatch)
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"name": "tiny", "problems": [
        {"group": "g", "name": "a", "problem": "n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1"}]}))
    ap = argparse.ArgumentParser()
    cmd_bench.add_arguments(ap)
    args = ap.parse_args([str(suite), "--budget", "0.1", "--pytorch-runs", "2", "--tune-runs",
                          "1"])
    args.backend, args.json = "tune_fakes:make_outside_tolerance_backend", True
    assert cmd_bench.run(args) == 0
    doc = json.loads(capsys.readouterr().out)
    row = doc["rows"][0]
    assert row["pytorch_outside_tolerance"] == {"torch:benchmark": 2.09e-3}
    assert len(row["arm_benchmark_s"]) == 2 and row["benchmark_s"]     # timed in every process
    assert row["winners"] == ["eng:x"]                                 # never the tuner's pick
    assert row["speedup_vs_benchmark"] is not None
    assert doc["summary"]["pytorch_outside_tolerance_problems"] == 1
    assert doc["summary"]["measured_vs_benchmark"] == 1
