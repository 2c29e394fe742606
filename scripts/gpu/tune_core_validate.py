#!/usr/bin/env python
"""GPU validation of the tuner's core (harness, worker isolation, database, tune/bench CLIs), < ~3 min.

Steps (each with its own timeout; a step that fails or times out is reported, the rest still run):
1. pytest tests/tune tests/db (not the slow CLI ones): the core on Python 3.12 / torch 2.11.
2. `convdoctor tune --problem <the issue's ResNet layer> --detail --json` on the CUDA backend, in a
   worker process, into a fresh database; then the same command again, which must load from it.
3. `convdoctor bench cnn-layers --limit N` fp32 NCHW (TF32) fprop: PyTorch heuristic, PyTorch
   benchmark=True in a fresh process, convdoctor in two fresh processes, and a referee process.
4. benchmarks/bench_tune_db.py: loading 90 tuned problems.

Run from the repo root:  OUT=/tmp/out PYTHONPATH=src:/tmp/site python scripts/gpu/tune_core_validate.py
Writes logs and JSON under $OUT; prints a short summary last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT") or "/tmp/tune_core_out")
OUT.mkdir(parents=True, exist_ok=True)
PY = sys.executable
ENV = dict(os.environ)
ENV["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), "/tmp/site", ENV.get("PYTHONPATH", "")])
ENV["CONVDOCTOR_DB"] = str(OUT / "tuning.sqlite3")
ISSUE = "fprop n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1 dtype=float32 layout=nchw"
LIMIT = os.environ.get("BENCH_LIMIT", "2")
BACKEND = os.environ.get("TUNE_BACKEND", "cuda")   # "cpu" to dry-run the script elsewhere

summary: list[str] = []


def step(name: str, argv: list[str], timeout: int, out_name: str) -> tuple[int, str]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True,
                           timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc = 124
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")) + \
            f"\nTIMEOUT after {timeout} s"
    dt = time.monotonic() - t0
    (OUT / out_name).write_text(out)
    (OUT / (out_name + ".stderr")).write_text(err)
    print(f"== {name}: rc={rc} in {dt:.1f} s (stdout -> {out_name})", flush=True)
    if rc not in (0, 1):
        print(err[-2000:], flush=True)
    return rc, out


def main() -> int:
    ok = True
    # 1. unit tests on the GPU machine's Python/torch
    rc, out = step("pytest tune+db", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
                                      "not slow", "tests/tune", "tests/db"], 50, "pytest.txt")
    last = out.strip().splitlines()[-1] if out.strip() else "(no output)"
    summary.append(f"pytest tests/tune tests/db: rc={rc}: {last}")
    ok &= rc == 0

    # 2. tune the issue's layer, then again (must come from the database)
    rc, out = step("tune issue layer", [PY, "-m", "convdoctor", "tune", "--problem", ISSUE,
                                        "--backend", BACKEND, "--budget", "3", "--json"], 60,
                   "tune_issue.json")
    try:
        doc = json.loads(out)
        row = doc["rows"][0]
        res = doc["results"][0]
        st = {}
        for c in res["candidates"]:
            st[c["status"]] = st.get(c["status"], 0) + 1
        summary.append(
            f"tune {row['problem']}: heuristic {row['torch_heuristic_s']} s, benchmark "
            f"{row['torch_benchmark_s']} s, tuned {row['tuned_s']} s ({row['engine']}), speedup "
            f"{row['speedup']}, roofline {row['roofline_percent']}%, candidates {st}, "
            f"tuning {res['tuning_s']:.1f} s, clock {next((c['clock_mhz'] for c in res['candidates'] if c['candidate']['key'] == row['engine']), None)} MHz")
    except Exception as exc:  # noqa: BLE001
        summary.append(f"tune issue layer: rc={rc}, output not readable ({exc})")
        ok = False
    rc, out = step("tune again (db)", [PY, "-m", "convdoctor", "tune", "--problem", ISSUE,
                                       "--backend", BACKEND, "--detail"], 30, "tune_issue_again.txt")
    summary.append(f"tune again: rc={rc}, from db: {'(db)' in out}")
    ok &= "(db)" in out

    # 3. bench: the side-by-side comparison on a few problems
    rc, out = step("bench fp32-nchw", [PY, "-m", "convdoctor", "bench", "cnn-layers", "--limit",
                                       LIMIT, "--budget", "0.5", "--backend", BACKEND, "--json"],
                   130, "bench_fp32_nchw.json")
    try:
        s = json.loads(out)["summary"]
        summary.append("bench fp32-nchw fprop: " + ", ".join(
            f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()))
    except Exception as exc:  # noqa: BLE001
        summary.append(f"bench fp32-nchw: rc={rc}, output not readable ({exc})")
        ok = False

    # 4. database load time
    rc, out = step("db load", [PY, "benchmarks/bench_tune_db.py"], 20, "bench_tune_db.txt")
    summary.append(out.strip() or f"bench_tune_db: rc={rc}")

    print("\n=== tune_core summary ===")
    for line in summary:
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
