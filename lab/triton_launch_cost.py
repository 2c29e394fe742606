"""Host cost per call of the depthwise Triton kernel (what `runtime.optimizer.TRITON_PENALTY_S`
charges an eager Triton route): wall time per eager call, back to back on a tiny problem whose
GPU time is far below the host's, for Triton's launcher, the runtime executor and PyTorch's own
F.conv2d (cuDNN). Writes $OUT/triton_launch_cost.json."""

from __future__ import annotations

import json
import os
import time

import torch
import torch.nn.functional as F

from convdoctor.engines.base import ConvArgs
from convdoctor.kernels import depthwise as dw
from convdoctor.problem import ConvProblem

CALLS = 3000


def per_call_us(fn) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / CALLS * 1e6)
    return best


def main() -> None:
    x = torch.randn(1, 32, 14, 14, device="cuda")
    w = torch.randn(32, 1, 3, 3, device="cuda")
    y = torch.empty_like(x)
    cfg = "c1p256w4"
    ex = dw.ENGINE.executor(dw.PREFIX + cfg, ConvProblem.parse(
        "fprop n=1 c=32 h=14 w=14 k=32 r=3 s=3 pad=1 groups=32"))
    a = ConvArgs((1, 1), (1, 1), (1, 1), False, (0, 0), 32)
    res = {
        "triton_run_us": per_call_us(lambda: dw.run("fprop", x, w, y, stride=(1, 1),
                                                    pad_pre=(1, 1), dilation=(1, 1), config=cfg)),
        "executor_fprop_us": per_call_us(lambda: ex.fprop(x, w, None, a)),
        "torch_conv2d_us": per_call_us(lambda: F.conv2d(x, w, padding=1, groups=32)),
        "calls": CALLS, "torch": torch.__version__,
        "triton": __import__("triton").__version__, "device": torch.cuda.get_device_name(),
    }
    print(json.dumps(res))
    with open(os.path.join(os.environ.get("OUT", "."), "triton_launch_cost.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
