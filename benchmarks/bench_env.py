"""Time `convdoctor env` (and `convdoctor doctor` with the smoke test) end to end in fresh processes.

Usage: python benchmarks/bench_env.py [--repeat N] [--smoke]
Prints each run's wall time and the median/min/max; targets: env < 3 s on a CPU machine,
doctor with the smoke test < 15 s on one GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def timed(argv: list[str]) -> tuple[float, int, str]:
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    cp = subprocess.run([sys.executable, "-m", "convdoctor", *argv], capture_output=True, text=True, env=env, timeout=300)
    return time.perf_counter() - t0, cp.returncode, cp.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="also time `convdoctor doctor` (smoke test on when a GPU is visible)")
    args = ap.parse_args()
    cases = [("env", ["env", "--json"], 3.0)]
    if args.smoke:
        cases.append(("doctor (smoke)", ["doctor", "--json"], 15.0))
    results = {}
    for label, argv, target in cases:
        times = []
        rc = None
        smoke_s = None
        for _ in range(args.repeat):
            dt, rc, out = timed(argv)
            times.append(dt)
            try:
                sm = json.loads(out)["facts"].get("smoke", {}).get("value", {})
                smoke_s = sm.get("seconds", smoke_s)
            except (ValueError, KeyError, AttributeError):
                pass
        med = statistics.median(times)
        results[label] = {"runs_s": [round(t, 3) for t in times], "median_s": round(med, 3), "min_s": round(min(times), 3),
                          "max_s": round(max(times), 3), "exit_code": rc, "target_s": target, "smoke_child_s": smoke_s}
        print(f"{label:<16} median {med:6.2f} s  min {min(times):6.2f}  max {max(times):6.2f}  "
              f"(n={len(times)}, exit {rc}, target < {target:g} s: {'PASS' if med < target else 'FAIL'})"
              + (f"  smoke child {smoke_s} s" if smoke_s else ""))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
