"""How long loading tuned choices for 90 problems takes (target: under 0.5 s).

Fills a fresh database with 90 results shaped like real GPU tuning results (40 candidates each,
60 samples per measured candidate), closes it, then times what `convdoctor.optimize` does: open the
database (one connection) and look up all 90 problems. Prints the figure; exits 1 over the target.

    python benchmarks/bench_tune_db.py [--problems 90] [--candidates 40] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from convdoctor.bench.suites import load_suite  # noqa: E402
from convdoctor.db import TuningDB  # noqa: E402
from convdoctor.problem import ConvProblem  # noqa: E402
from convdoctor.tune.backend import Candidate, Correctness  # noqa: E402
from convdoctor.tune.result import CandidateStats, TuneResult  # noqa: E402

ENV = {"backend": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": "132",
       "compute_capability": "9.0", "driver": "580.65.06", "cuda_runtime": "13.0",
       "cudnn": "91900", "cudnn_frontend": "1.16.0", "torch": "2.11.0"}


def fake_result(p: ConvProblem, n_cands: int, rng: random.Random) -> TuneResult:
    stats = []
    for j in range(n_cands):
        base = 1e-4 * (1 + 0.05 * j)
        measured = j < 8
        stats.append(CandidateStats(
            candidate=Candidate(f"cudnn:eng{j}_k2={j % 4}", "cudnn-frontend", workspace_bytes=j << 20,
                                deterministic=j % 3 != 0),
            status="ok" if measured else "screened-out",
            samples=[base * (1 + rng.gauss(0, 0.01)) for _ in range(60 if measured else 0)],
            screen_samples=[base * (1 + rng.gauss(0, 0.02)) for _ in range(5)],
            warmup_runs=9, first_run_s=base * 4, clock_mhz=1980.0,
            correctness=Correctness(True, 2e-6, 5e-3)))
    return TuneResult(problem=p, env=dict(ENV), backend="cuda", winner=stats[0].candidate,
                      candidates=stats, tuning_s=2.0, created=time.time())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=90)
    ap.add_argument("--candidates", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    suite = load_suite("cnn-layers")
    problems = [e.problem(direction=d) for d in ("fprop", "dgrad", "wgrad")
                for e in suite.entries][: args.problems]
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tuning.sqlite3")
        db = TuningDB(path)
        for p in problems:
            db.put(fake_result(p, args.candidates, rng))
        db.close()
        size = os.path.getsize(path)
        times, cpu = [], []
        for _ in range(args.repeat):
            c0 = time.process_time()
            t0 = time.perf_counter()
            db = TuningDB(path)
            got = db.get_many(problems, ENV)
            winners = [lk.result.winner.key for lk in got.values() if lk.status == "hit"]
            db.close()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            assert len(winners) == len(problems), "not every problem was found"
    best, med = min(times), statistics.median(times)
    print(f"tuning db: loaded {len(problems)} problems ({args.candidates} candidates each, "
          f"file {size / 1e6:.1f} MB) in {med:.3f} s median, {best:.3f} s best of {args.repeat} "
          f"(target < 0.5 s): {'OK' if med < 0.5 else 'TOO SLOW'}; CPU time {statistics.median(cpu):.3f} s"
          f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0 if med < 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
