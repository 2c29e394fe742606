"""The benchmark method of benchmarks/bench_optimize.py (fair comparisons): core pinning spec,
interleaved timing rounds, run order over repeats, merging repeated runs, the ratios and the table.
Pure helpers on the CPU with fake step functions; one real subprocess checks the pinning."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_optimize_under_test",
                                                  ROOT / "benchmarks" / "bench_optimize.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


B = _load()


def test_parse_cpus_count_list_off_and_errors() -> None:
    avail = [3, 0, 2, 1, 5]
    assert B.parse_cpus("4", avail) == [0, 1, 2, 3]
    assert B.parse_cpus("9", avail) == [0, 1, 2, 3, 5]
    assert B.parse_cpus("0-2,5", avail) == [0, 1, 2, 5]
    assert B.parse_cpus("4-7", avail) == [5]          # cores not available are dropped
    assert B.parse_cpus("0-0", avail) == [0]
    for off in ("off", "", "none", "all", None):
        assert B.parse_cpus(off, avail) is None
    assert B.parse_cpus("4", None) is None            # platform without affinity: skip silently
    for bad in ("0", "a", "1-", "3-1", "8-9"):
        with pytest.raises(ValueError, match="RT_CPUS"):
            B.parse_cpus(bad, avail)


def test_round_sizes_split_all_steps() -> None:
    assert B.round_sizes(20, 5) == [4, 4, 4, 4, 4]
    assert B.round_sizes(6, 5) == [2, 1, 1, 1, 1]
    assert B.round_sizes(3, 5) == [1, 1, 1]
    assert B.round_sizes(7, 1) == [7]
    for steps in range(1, 30):
        for rounds in range(1, 8):
            sizes = B.round_sizes(steps, rounds)
            assert sum(sizes) == steps and max(sizes) - min(sizes) <= 1


def test_time_rounds_interleaves_and_reverses_order() -> None:
    calls: list[str] = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    t = B.time_rounds(fns, "cpu", warmup=2, steps=6, rounds=3)
    assert calls[:4] == ["a", "a", "b", "b"]                  # warm-up of each
    assert calls[4:] == ["a", "a", "b", "b", "b", "b", "a", "a", "a", "a", "b", "b"]
    for k in ("a", "b"):
        assert len(t[k]["samples_ms"]) == 6
        assert t[k]["ms"] >= 0 and "issue_cpu_ms" in t[k]


def test_time_rounds_measures_the_slower_step_slower() -> None:
    import time

    t = B.time_rounds({"fast": lambda: None, "slow": lambda: time.sleep(0.004)}, "cpu",
                      warmup=0, steps=4, rounds=2)
    assert t["slow"]["ms"] > t["fast"]["ms"] + 2.0
    # sleeping is not CPU work: the issue CPU time stays well below the wall time
    assert t["slow"]["issue_cpu_ms"] < t["slow"]["ms"]


def test_run_plan_repeats_alternate_and_skip_compile() -> None:
    v = ["eager_heuristic", "eager_benchmark", "compile", "convdoctor"]
    assert B.run_plan(v, 1) == [(0, x) for x in v]
    plan = B.run_plan(v, 3)
    assert plan[:4] == [(0, x) for x in v]
    assert plan[4:7] == [(1, "convdoctor"), (1, "eager_benchmark"), (1, "eager_heuristic")]
    assert plan[7:] == [(2, "eager_heuristic"), (2, "eager_benchmark"), (2, "convdoctor")]


REPORT = {"channels_last": False, "routing": True, "problems": 4, "from_db": 1, "tuned": 3,
          "tuning_s": 2.0, "choices": {"torch:heuristic": 4}}


def _cd(ms: float, same: float) -> dict[str, Any]:
    return {"ms": ms, "samples_ms": [ms], "issue_cpu_ms": ms * 0.9,
            "eager_heuristic_same_process": {"ms": same, "samples_ms": [same]},
            "speedup_vs_heuristic_same_process": same / ms, "report": REPORT}


def test_merge_runs_median_spread_and_errors() -> None:
    one = _cd(10.0, 11.0)
    assert B.merge_runs([one]) == one
    m = B.merge_runs([_cd(10.0, 11.0), {"error": "boom"}, _cd(14.0, 13.0), _cd(12.0, 12.5)])
    assert m["ms"] == 12.0 and m["runs_ms"] == [10.0, 14.0, 12.0] and m["ms_spread"] == 4.0
    assert m["ms_run0"] == 10.0 and m["report"] == REPORT
    same = m["eager_heuristic_same_process"]
    assert same["ms"] == 12.5 and same["ms_spread"] == 2.0 and same["ms_run0"] == 11.0
    assert m["speedup_vs_heuristic_same_process"] == pytest.approx(12.5 / 12.0)
    assert [r.get("error") for r in m["repeats"]] == ["boom", None, None]
    assert B.merge_runs([{"error": "x"}, {"error": "y"}]) == {"error": "x"}


def test_summarize_fair_and_former_ratios() -> None:
    slot = {"eager_heuristic": {"ms": 25.0}, "eager_benchmark": {"ms": 20.0},
            "convdoctor": _cd(19.0, 19.5)}
    B.summarize(slot)
    assert slot["speedup_vs_best_eager_fair"] == pytest.approx(19.5 / 19.0)   # min(20, 19.5)
    assert slot["speedup_vs_heuristic_same_process"] == pytest.approx(19.5 / 19.0)
    assert slot["speedup_vs_best_eager"] == pytest.approx(20.0 / 19.0)        # former figures
    assert slot["speedup_vs_heuristic"] == pytest.approx(25.0 / 19.0)
    slot = {"eager_heuristic": {"ms": 25.0}, "eager_benchmark": {"ms": 15.0},
            "convdoctor": _cd(19.0, 19.5)}
    B.summarize(slot)
    assert slot["speedup_vs_best_eager_fair"] == pytest.approx(15.0 / 19.0)
    cpu = {"eager_heuristic": {"ms": 9.0}, "convdoctor": {"ms": 8.0}}   # no twin: no fair ratio
    B.summarize(cpu)
    assert "speedup_vs_best_eager_fair" not in cpu and cpu["speedup_vs_best_eager"] == 9 / 8


def test_assemble_and_table() -> None:
    runs = {
        "eager_heuristic": [{"_wall_s": 1.0, "cfg": {"train": {"ms": 30.0}}}],
        "eager_benchmark": [{"_wall_s": 2.0, "cfg": {"train": {"ms": 20.0}}},
                            {"_wall_s": 2.0, "cfg": {"train": {"ms": 22.0}}}],
        "convdoctor": [{"_wall_s": 3.0, "cfg": {"train": _cd(18.0, 21.0)}},
                       {"_error": "timed out after 9 s"}],
    }
    results: dict[str, Any] = {"env": {"device": "H100"}}
    B.assemble(results, runs)
    slot = results["configs"]["cfg"]["train"]
    assert slot["eager_benchmark"]["ms"] == 21.0 and slot["eager_benchmark"]["ms_spread"] == 2.0
    assert results["variants"]["convdoctor"]["repeats"] == [{"_error": "timed out after 9 s"}]
    assert slot["speedup_vs_best_eager_fair"] == pytest.approx(21.0 / 18.0)
    text = B.table(results)
    head = next(ln for ln in text.splitlines() if ln.startswith("config"))
    for col in ("heur(own)", "bench(own)", "convdoctor", "heur(cd proc)", "vs best eager",
                "vs heur same proc"):
        assert col in head
    assert "compile" not in head
    row = next(ln for ln in text.splitlines() if ln.startswith("cfg "))
    assert row.split() == ["cfg", "train", "30.000", "21.000", "18.000", "21.000",
                           f"{21 / 18:.3f}x", f"{21 / 18:.3f}x"]
    assert "variant convdoctor run 1: ERROR timed out" in text
    assert "bench(own) 2.000 (2 runs)" in text
    assert "host CPU to issue a step: convdoctor 16.20 ms" in text
    assert "routing on, problems 4 (db 1, tuned 3 in 2s)" in text


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_pinner_pins_a_child_process() -> None:
    avail = sorted(os.sched_getaffinity(0))
    cpus = B.parse_cpus("1", avail)
    p = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                       capture_output=True, text=True, preexec_fn=B._pinner(cpus), check=True)
    assert p.stdout.strip() == str(cpus)
    assert B._pinner(None) is None


def test_tuning_budget_is_shared_so_every_config_gets_a_turn() -> None:
    # 4 configs x 2 modes, 240 s: the first slot may take an even share only
    assert B.tuning_share(240.0, 8) == 30.0
    # a slot that used nothing leaves its share to the later ones
    assert B.tuning_share(240.0, 7) == pytest.approx(34.2857, rel=1e-4)
    assert B.tuning_share(0.0, 3) == 0.0 and B.tuning_share(-5.0, 3) == 0.0
    assert B.tuning_share(10.0, 0) == 0.0


def test_process_facts_counts_this_process_threads_and_children() -> None:
    facts = B.process_facts()
    if not os.path.isdir("/proc/self/task"):
        assert facts == {}
        return
    assert facts["threads"] >= 1
    if "child_processes" not in facts:
        pytest.skip("this kernel has no /proc/<pid>/task/<tid>/children")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert B.process_facts()["child_processes"] >= 1
    finally:
        child.kill()
        child.wait()


def test_partial_result_keeps_the_last_complete_line_of_a_stopped_child() -> None:
    out = ('noise\n{"a": {"train": {"ms": 1.0}}}\n'
           '{"a": {"train": {"ms": 1.0}, "inference": {"ms": 0.5}}}\n{"a": {"tr')
    assert B.partial_result(out) == {"a": {"train": {"ms": 1.0}, "inference": {"ms": 0.5}}}
    assert B.partial_result(out.encode()) == B.partial_result(out)
    assert B.partial_result(None) == {}
    assert B.partial_result("no json here\n") == {}


def test_stopped_variant_child_reports_its_finished_slots(tmp_path: Path) -> None:
    """A real child process that prints a slot and then hangs: run_variant stops it at the
    timeout and keeps the printed slot, with the timeout as the variant's error."""
    script = tmp_path / "child.py"
    script.write_text('import json, time\nprint(json.dumps({"c": {"train": {"ms": 2.0}}}),'
                      ' flush=True)\ntime.sleep(60)\n')

    class Args:
        device = "cpu"
        configs = "c"
        db = "x"
        steps = 1
        budget = 0.1
        rounds = 1
        time_budget = 1.0
        compile: list[str] = []
        no_twin = True
        cpu_list = None
        modes = ["train"]

    real = B.sys.executable
    try:
        # run_variant runs `sys.executable bench_optimize.py ...`: point it at a fake child.
        B.sys.executable = str(tmp_path / "py")
        (tmp_path / "py").write_text(f'#!/bin/sh\nexec {real} {script}\n')
        (tmp_path / "py").chmod(0o755)
        data = B.run_variant("compile", Args(), timeout=3.0)
    finally:
        B.sys.executable = real
    assert data["c"] == {"train": {"ms": 2.0}}
    assert "timed out" in data["_error"]


def test_variants_option_rejects_unknown_names() -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_optimize.py"),
                        "--device", "cpu", "--variants", "eager_heuristic,fast"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert p.returncode == 2
    assert "unknown fast" in p.stderr
