"""Host cost of the check a CUDA-graph replay makes before it runs, on the CPU.

  python benchmarks/bench_graph_guard.py [--models resnet50,unet3d,speech_frontend] [--calls N]

Before every replay `GraphedForward` checks that the model's parameters and buffers are still the
storage the graph captured. The GPU waits for this host time (a ResNet-50 replay's step is its
kernel time plus its host time; docs/results.md). Prints, per zoo model, microseconds per check:
- walk: a walk of `model.parameters()` and `model.buffers()` and a tuple of data pointers (the
  check without the guard);
- guard: `graphs.StorageGuard.ok()` with no registration since the last check;
- guard after a registration: `ok()` right after an unrelated module was built (a re-walk).
Needs no GPU: the check is host code.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def per_call_us(fn, calls: int, reps: int = 5) -> float:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


def main() -> int:
    import torch

    from convdoctor import zoo
    from convdoctor.runtime.graphs import StorageGuard

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,unet3d,speech_frontend")
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    print(f"torch {torch.__version__}; microseconds per check (median of 5 x {args.calls} calls)")
    print(f"{'model':16s} {'slots':>7s} {'walk':>9s} {'guard':>9s} {'after a registration':>21s}")
    for name in args.models.split(","):
        m = zoo.get(name)

        def walk(m: torch.nn.Module = m) -> tuple[int, ...]:
            return tuple(t.data_ptr() for t in (*m.parameters(), *m.buffers()))

        g = StorageGuard(m)
        assert g.ok()

        def after_registration(g: StorageGuard = g) -> None:
            torch.nn.Linear(1, 1)  # registers 2 parameters: the next check re-walks
            g.ok()

        build = per_call_us(lambda: torch.nn.Linear(1, 1), max(1, args.calls // 10))
        w = per_call_us(walk, args.calls)
        k = per_call_us(g.ok, args.calls)
        r = per_call_us(after_registration, max(1, args.calls // 10)) - build
        print(f"{name:16s} {len(g.slots):7d} {w:9.1f} {k:9.1f} {r:21.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
