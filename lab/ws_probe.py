"""Does a cuDNN plan's speed depend on where its WORKSPACE lies? (GPU machine, standalone probe)

A split-K cuDNN plan can run at two speeds depending on where its workspace lies (H100: wav2vec2
conv1's `eng67_k2=9_...`, about 144 or 165 us; docs/results.md). This probe, in one fresh
process, times each PLAN on the same inputs with WS workspaces allocated one after another with random spacers (kept alive) and at offsets inside
one large buffer, then again after PyTorch's heuristic and benchmark paths ran. CUDA events, 40
calls after 10 warm-up calls, median of 3 such blocks.

    PYTHONPATH=src python lab/ws_probe.py PROBLEM_KEY WS PLAN_NAME [PLAN_NAME ...]

One JSON line per measurement: plan, phase, workspace address mod 2 MiB / 64 KiB, microseconds.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import torch  # noqa: I001 - torch before cudnn
from probe_timing import event_us


def _time(fn: Any) -> float:
    return event_us(fn, 40, warm=10, blocks=3)


def main() -> None:
    from convdoctor.engines import cudnn_enum as cp
    from convdoctor.problem import ConvProblem

    key, nws, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    p = ConvProblem.parse(key)
    torch.backends.cudnn.allow_tf32 = True
    plans = [cp.build_plan(p, n) for n in names]
    (ra, rb), ro = plans[0].input_roles, plans[0].output_role
    a = cp.empty_for(p, ra, "cuda:0").uniform_(-1, 1)
    b = cp.empty_for(p, rb, "cuda:0").uniform_(-1, 1)
    o = cp.empty_for(p, ro, "cuda:0")
    rng = random.Random(7)
    keep: list[Any] = []

    def line(plan: Any, phase: str, ws: Any) -> None:
        us = _time(lambda: plan.execute(a, b, o, workspace=ws, check=False))
        ptr = ws.data_ptr()
        print(json.dumps({"plan": plan.name, "phase": phase, "ws_bytes": plan.workspace_bytes,
                          "ws_mod_2MiB": ptr % (2 << 20), "ws_mod_64KiB": ptr % (64 << 10),
                          "us": round(us, 2)}), flush=True)

    def spaced(nbytes: int) -> Any:
        keep.append(torch.empty(rng.randint(1, 48) << 20, dtype=torch.uint8, device="cuda"))
        return torch.empty(max(1, nbytes), dtype=torch.uint8, device="cuda")

    for plan in plans:
        for i in range(nws):
            line(plan, f"separate-{i}", spaced(plan.workspace_bytes))
        big = torch.empty(plan.workspace_bytes + (4 << 20), dtype=torch.uint8, device="cuda")
        for off in (0, 256, 4096, 65536, 1 << 20, (2 << 20) - 256):
            line(plan, f"offset-{off}", big[off:off + max(1, plan.workspace_bytes)])
        del big
    if p.direction == "fprop":
        import torch.nn.functional as F

        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[p.ndim]
        args = dict(stride=p.stride, padding=p.pad_pre, dilation=p.dilation, groups=p.groups)
        for bench in (False, True):
            torch.backends.cudnn.benchmark = bench
            us = _time(lambda: conv(a, b, **args))
            print(json.dumps({"plan": f"torch benchmark={bench}", "phase": "pytorch",
                              "us": round(us, 2)}), flush=True)
        torch.backends.cudnn.benchmark = False
    for plan in plans:
        for i in range(nws):
            line(plan, f"after-pytorch-{i}", spaced(plan.workspace_bytes))


if __name__ == "__main__":
    main()
