"""Does a convolution's time depend on where its buffers lie? (If buffer placement moves a kernel's
time, the tuner and the bench referee must both time over several placements.)

In ONE process, for each problem: PyTorch's path (cudnn.benchmark=False) timed with convdoctor's
LaunchTimer (L2 flush, spin cover, CUDA graph batches for small kernels) over PLACEMENTS fresh
allocations of the input and weight (a pad tensor of a random size allocated first shifts the
addresses), SAMPLES samples each, then the first placement again (drift check). Prints one JSON
line per problem: the median per placement, their spread (max/min - 1), the drift, the SM clock.
Run it in several processes and compare the within-process placement spread with the spread of
the processes' first placements.

    PYTHONPATH=src python lab/placement_probe.py [PLACEMENTS] [SAMPLES]
"""

from __future__ import annotations

import json
import random
import statistics
import sys

PROBLEMS = [
    # (name, dtype, layout, N, C, H, W, K, R, S, stride, pad)
    ("r50 layer4.x.conv1 fp16", "float16", "nhwc", 32, 2048, 7, 7, 512, 1, 1, 1, 0),
    ("inc Mixed_7c.branch1x1 fp16", "float16", "nhwc", 32, 2048, 8, 8, 320, 1, 1, 1, 0),
    ("r50 layer2.x.conv1 fp16", "float16", "nhwc", 32, 512, 28, 28, 128, 1, 1, 1, 0),
    ("mbv2 pw192-32@28 fp32", "float32", "nchw", 64, 192, 28, 28, 32, 1, 1, 1, 0),
    ("unet2d dec2a fp32", "float32", "nchw", 4, 256, 128, 128, 128, 3, 3, 1, 1),
]


def main() -> None:
    import torch
    import torch.nn.functional as F  # noqa: N812

    from convdoctor.measure.nvml import NvmlClock
    from convdoctor.measure.timing import LaunchTimer

    placements = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    samples = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = True
    rng = random.Random()
    try:
        clock: NvmlClock | None = NvmlClock(0)
    except Exception:  # noqa: BLE001
        clock = None
    keep: list[torch.Tensor] = []
    for name, dt, layout, n, c, h, w, k, r, s, st, pad in PROBLEMS:
        dtype = getattr(torch, dt)
        mf = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        meds = []
        first: tuple[torch.Tensor, torch.Tensor] | None = None
        for i in range(placements + 1):
            keep.append(torch.empty(rng.randrange(1, 64) * 4096 + rng.randrange(0, 16) * 256,
                                    dtype=torch.uint8, device="cuda"))
            x = torch.randn(n, c, h, w, device="cuda", dtype=dtype).to(memory_format=mf)
            wt = torch.randn(k, c, r, s, device="cuda", dtype=dtype).to(memory_format=mf)
            if i == placements and first is not None:  # back to the first placement's buffers
                x, wt = first
            elif i == 0:
                first = (x, wt)

            def run(x: torch.Tensor = x, wt: torch.Tensor = wt, st: int = st,
                    pad: int = pad) -> torch.Tensor:
                return F.conv2d(x, wt, stride=st, padding=pad)

            run()
            torch.cuda.synchronize()
            timer = LaunchTimer(run)
            timer.time(10)  # warm
            ts = timer.time(samples)
            meds.append(statistics.median(ts) * 1e6)
        reading = clock.read() if clock is not None else None
        body = meds[:placements]
        print(json.dumps({
            "problem": name, "us_per_placement": [round(v, 3) for v in body],
            "placement_spread": round(max(body) / min(body) - 1, 4),
            "first_again_us": round(meds[-1], 3),
            "drift": round(meds[-1] / meds[0] - 1, 4),
            "addresses": "x/w fresh per placement",
            "sm_clock_mhz": getattr(reading, "sm_clock_mhz", None),
        }), flush=True)
        keep.clear()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
