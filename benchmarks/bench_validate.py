"""Overhead of convdoctor.validate() on a ResNet-50 forward on the CPU (target: < 5%).

  python benchmarks/bench_validate.py [--batch 1] [--size 224] [--reps 15]

Runs the zoo ResNet-50 (eval, no_grad) alternately without and with the guard, same input, and
prints the median forward time of each and the overhead. Also times the guard alone per forward
(hooks with a warm cache, no convolution work) to show where the cost is.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> int:
    import torch

    from convdoctor import zoo
    from convdoctor.check.guard import unvalidate, validate

    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = zoo.get("resnet50").eval()
    x = torch.randn(args.batch, 3, args.size, args.size)
    plain: list[float] = []
    guarded: list[float] = []
    with torch.no_grad():
        for _ in range(2):  # warm-up both
            model(x)
        validate(model)
        model(x)
        unvalidate(model)
        for rep in range(args.reps):
            # ABBA order; each timed forward follows an identical untimed one (for the guard, that
            # first call fills the verdict cache, as a training loop's first step does)
            for guard_on in ((False, True) if rep % 2 == 0 else (True, False)):
                if guard_on:
                    validate(model)
                model(x)
                t0 = time.perf_counter()
                model(x)
                (guarded if guard_on else plain).append(time.perf_counter() - t0)
                unvalidate(model)
        # the guard alone: run only the hooks (cache warm) for every conv layer
        validate(model)
        model(x)
        convs = [(m, m._forward_pre_hooks) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
        inputs = {}

        def grab(mod, a):
            inputs[mod] = a

        hs = [m.register_forward_pre_hook(grab) for m, _ in convs]
        model(x)
        for h in hs:
            h.remove()
        t0 = time.perf_counter()
        n = 200
        for _ in range(n):
            for m, hooks in convs:
                for hook in list(hooks.values()):
                    hook(m, inputs[m])
        per_forward_hooks = (time.perf_counter() - t0) / n
        unvalidate(model)
        # functional=True: a TorchFunctionMode sees every op of the forward
        functional: list[float] = []
        validate(model, functional=True)
        model(x)
        for _ in range(max(3, args.reps // 3)):
            t0 = time.perf_counter()
            model(x)
            functional.append(time.perf_counter() - t0)
        unvalidate(model)
    p, g = statistics.median(plain), statistics.median(guarded)
    fm = statistics.median(functional)
    print(f"ResNet-50 CPU forward, batch {args.batch}, {args.size}x{args.size}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {args.reps} reps")
    print(f"  without guard: median {p * 1e3:.1f} ms")
    print(f"  with validate: median {g * 1e3:.1f} ms")
    print(f"  overhead (medians): {100 * (g - p) / p:+.2f}%; (minimums): "
          f"{100 * (min(guarded) - min(plain)) / min(plain):+.2f}%")
    print(f"  validate(functional=True): median {fm * 1e3:.1f} ms ({100 * (fm - p) / p:+.2f}%)")
    print(f"  guard hooks alone: {per_forward_hooks * 1e6:.0f} us per forward ({len(convs)} convs) = "
          f"{100 * per_forward_hooks / p:.2f}% of the plain forward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
