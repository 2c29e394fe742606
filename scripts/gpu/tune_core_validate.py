#!/usr/bin/env python
"""GPU validation of the tuner's core (harness, worker isolation, database, tune/bench CLIs).

Fits a wall-clock deadline (TUNE_DEADLINE_S, default 430 s): each step gets a timeout, and the bench
steps size their `--limit` from the time left and the cost per problem measured by the steps before.
Steps (a step that fails or times out is reported; the rest still run):
1. pytest of the tests changed since the last GPU run (selection, CPU backend) on Python 3.12/torch 2.11.
2. `convdoctor tune --problem <the issue's ResNet layer> --json` on the CUDA backend into a fresh
   database, then the same with --detail, which must load from the database.
3. `convdoctor bench cnn-layers` fprop fp32 NCHW (TF32 allowed) and fp16 NHWC, then dgrad and wgrad
   fp32 NCHW while time is left: PyTorch heuristic, PyTorch benchmark=True in 2 fresh processes,
   convdoctor in 2 fresh processes, and a referee process timing every choice side by side.
4. benchmarks/bench_tune_db.py: loading 90 tuned problems.

Run from the repo root:  OUT=/tmp/out PYTHONPATH=src:/tmp/site python scripts/gpu/tune_core_validate.py
Writes logs and JSON under $OUT (bench_<config>_<direction>.json ...); prints a short summary last.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

T0 = time.monotonic()
ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT") or "/tmp/tune_core_out")
OUT.mkdir(parents=True, exist_ok=True)
PY = sys.executable
ENV = dict(os.environ)
ENV["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), "/tmp/site", ENV.get("PYTHONPATH", "")])
ENV["CONVDOCTOR_DB"] = str(OUT / "tuning.sqlite3")
ISSUE = "fprop n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1 dtype=float32 layout=nchw"
BACKEND = os.environ.get("TUNE_BACKEND", "cuda")   # "cpu" to dry-run the script elsewhere
DEADLINE = float(os.environ.get("TUNE_DEADLINE_S", "430"))
BUDGET = os.environ.get("TUNE_BUDGET_S", "0.5")
MAX_LIMIT = int(os.environ.get("TUNE_MAX_LIMIT", "16"))
PROC_OVERHEAD_S = 30.0     # 5 fresh processes per bench (CUDA init, imports, cuDNN handles)
cost_per_problem = float(os.environ.get("TUNE_COST_PER_PROBLEM_S", "15"))

summary: list[str] = []


def left() -> float:
    return DEADLINE - (time.monotonic() - T0)


def step(name: str, argv: list[str], timeout: float, out_name: str) -> tuple[int, str, float]:
    timeout = max(5.0, min(timeout, left() - 5))
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True,
                           timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc = 124
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")) + \
            f"\nTIMEOUT after {timeout:.0f} s"
    dt = time.monotonic() - t0
    (OUT / out_name).write_text(out)
    (OUT / (out_name + ".stderr")).write_text(err)
    print(f"== {name}: rc={rc} in {dt:.1f} s, {left():.0f} s left (stdout -> {out_name})",
          flush=True)
    if rc not in (0, 1):
        print(err[-1500:], flush=True)
    return rc, out, dt


def bench(config: str, direction: str, share: float, min_limit: int = 2) -> None:
    global cost_per_problem
    avail = left() * share - PROC_OVERHEAD_S
    limit = min(MAX_LIMIT, int(avail / (cost_per_problem * 1.25)))
    if limit < min_limit:
        summary.append(f"bench {config} {direction}: skipped ({left():.0f} s left)")
        return
    name = f"bench_{config}_{direction}.json"
    allowed = left() - 5       # an overrun eats into the later steps, which then shrink or skip
    rc, out, dt = step(f"bench {config} {direction} --limit {limit}",
                       [PY, "-m", "convdoctor", "bench", "cnn-layers", "--config", config,
                        "--direction", direction, "--limit", str(limit), "--budget", BUDGET,
                        "--backend", BACKEND, "--json"], allowed, name)
    try:
        doc = json.loads(out)
    except Exception as exc:  # noqa: BLE001
        summary.append(f"bench {config} {direction} (limit {limit}): rc={rc}, no JSON ({exc})")
        return
    s = doc["summary"]
    measured = (dt - PROC_OVERHEAD_S) / max(1, limit)
    if math.isfinite(measured) and measured > 1:
        cost_per_problem = max(cost_per_problem * 0.5, measured)

    def f(k: str, pat: str = "{:.3f}") -> str:
        v = s.get(k)
        return "-" if v is None else pat.format(v)

    summary.append(
        f"bench {config} {direction}: {s['problems']} problems in {dt:.0f} s; geomean vs "
        f"benchmark {f('geomean_speedup_vs_benchmark')}, vs heuristic "
        f"{f('geomean_speedup_vs_heuristic')}, vs best {f('geomean_speedup_vs_best_pytorch')}; "
        f">=1.10x vs benchmark {f('share_at_1_10x_vs_benchmark', '{:.0%}')}; slower than best "
        f"PyTorch by >2%: {s['slower_than_best_pytorch_by_2pct']} (worst "
        f"{f('worst_vs_best_pytorch')}); stable within 3%: {f('stable_within_3pct', '{:.0%}')}; "
        f"benchmark runs differ >5%: {f('benchmark_runs_disagree_over_5pct', '{:.0%}')}; tuning "
        f"{f('tuning_s_per_problem', '{:.1f}')} s/problem; degraded {s['degraded_problems']}")


def main() -> int:
    ok = True
    rc, out, _ = step("pytest (changed tests)", [PY, "-m", "pytest", "-q", "-p",
                                                 "no:cacheprovider",
                                                 "tests/tune/test_tune_selection.py",
                                                 "tests/tune/test_tune_cpu_backend.py"], 40,
                      "pytest.txt")
    last = out.strip().splitlines()[-1] if out.strip() else "(no output)"
    summary.append(f"pytest selection + cpu backend: rc={rc}: {last}")
    ok &= rc == 0

    rc, out, dt = step("tune issue layer", [PY, "-m", "convdoctor", "tune", "--problem", ISSUE,
                                            "--backend", BACKEND, "--budget", "3", "--json"], 60,
                       "tune_issue.json")
    try:
        doc = json.loads(out)
        row, res = doc["rows"][0], doc["results"][0]
        st: dict[str, int] = {}
        for c in res["candidates"]:
            st[c["status"]] = st.get(c["status"], 0) + 1
        clock = next((c["clock_mhz"] for c in res["candidates"]
                      if c["candidate"]["key"] == row["engine"]), None)
        summary.append(
            f"tune {row['problem']}: heuristic {row['torch_heuristic_s']} s, benchmark "
            f"{row['torch_benchmark_s']} s, tuned {row['tuned_s']} s ({row['engine']}), speedup "
            f"{row['speedup']}, roofline {row['roofline_percent']}%, candidates {st}, tuning "
            f"{res['tuning_s']:.1f} s, clock {clock} MHz")
    except Exception as exc:  # noqa: BLE001
        summary.append(f"tune issue layer: rc={rc}, output not readable ({exc})")
        ok = False
    rc, out, _ = step("tune again (db)", [PY, "-m", "convdoctor", "tune", "--problem", ISSUE,
                                          "--backend", BACKEND, "--detail"], 30,
                      "tune_issue_again.txt")
    summary.append(f"tune again: rc={rc}, from db: {'(db)' in out}")
    ok &= "(db)" in out

    reserve = 15.0  # the db load step at the end
    global DEADLINE
    DEADLINE -= reserve
    bench("fp32-nchw", "fprop", 0.45)
    bench("fp16-nhwc", "fprop", 0.75)
    bench("fp32-nchw", "dgrad", 0.5)
    bench("fp32-nchw", "wgrad", 0.95)
    DEADLINE += reserve

    rc, out, _ = step("db load", [PY, "benchmarks/bench_tune_db.py"], 14, "bench_tune_db.txt")
    summary.append(out.strip() or f"bench_tune_db: rc={rc}")

    print(f"\n=== tune_core summary ({time.monotonic() - T0:.0f} s) ===")
    for line in summary:
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
