"""How often each selector picks the truly fastest candidate on a simulated device with the traps
of real GPUs (noise, first-run penalty, drift, throttling): convdoctor's harness vs a one-sample
screen (cudnn.benchmark's way). Uses the simulated device of tests/tune/tune_fakes.py.

    python benchmarks/bench_tune_selection.py [--seeds 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "tune")]

import test_tune_selection as sel  # noqa: E402

SCENARIOS = ("noise", "first-run", "drift", "throttle", "throttle-unreported", "all")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    args = ap.parse_args()
    print(f"{'scenario':<22}{'harness':>9}{'one-sample':>12}   ({args.seeds} seeds each)")
    t0 = time.perf_counter()
    for sc in SCENARIOS:
        h = sum(sel._harness_pick(s, sc) == sel.BEST for s in range(args.seeds)) / args.seeds
        o = sum(sel._one_sample_pick(s, sc) == sel.BEST for s in range(args.seeds)) / args.seeds
        print(f"{sc:<22}{h:>9.3f}{o:>12.3f}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
