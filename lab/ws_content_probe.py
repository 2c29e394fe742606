"""Does a cuDNN plan's speed depend on what its WORKSPACE holds before the call? (GPU probe)

Measured with `ws_place_probe.py` (H100, 4 processes; docs/results.md, workspace memory): the
Inception Conv2d_4a_3x3 fp32 wgrad plan `eng68_k2=0_k13=0_k18=1_k25=0_k27=1_k28=1` ran 586-595 us
with its workspace anywhere inside one large buffer that three plans had used, but 710-724 us with
a workspace of its own freshly allocated. This probe tests the workspace's
prior contents, in one process, with the tuner's timer:

- `fresh`: a new allocation, untouched; then the same buffer zeroed, filled with 0xff, with random
  bytes, and after another plan ran in it;
- `padded`: the workspace at offset 0, 4 KiB or 1 MiB + 68 KiB of fresh buffers 0, 2, 8 or
  64 MiB longer than it; `tuner_geometry`: the tuner's buffer (3 steps longer, four views);
- `written`: which bytes one call of each plan writes (the buffer filled with a sentinel first):
  the first and last changed byte and the count, so the part the plan reads back is known.

    PYTHONPATH=src python lab/ws_content_probe.py "PROBLEM" PLAN_NAME [PLAN_NAME ...]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any

import torch  # noqa: I001 - torch before cudnn


def main() -> None:
    from convdoctor.engines import cudnn_enum as cp
    from convdoctor.measure.placement import allocate
    from convdoctor.measure.timing import LaunchTimer
    from convdoctor.problem import ConvProblem

    problem = ConvProblem.parse(sys.argv[1])
    names = sys.argv[2:]
    samples = int(os.environ.get("WSP_SAMPLES", "9"))
    torch.backends.cudnn.allow_tf32 = True
    plans = [cp.build_plan(problem, n, device=0) for n in names]
    s = allocate(problem, 0, wanted=1).sets[0]
    (ra, rb), ro = plans[0].input_roles, plans[0].output_role
    a, b, o = s[ra], s[rb], s[ro]
    nbytes = max(max(1, p.workspace_bytes) for p in plans)

    def measure(phase: str, plan: Any, ws: Any, **tags: Any) -> float:
        timer = LaunchTimer(lambda: plan.execute(a, b, o, workspace=ws, check=False), device=0)
        timer.time(2)
        us = statistics.median(timer.time(samples)) * 1e6
        timer.close()
        print(json.dumps({"phase": phase, "plan": plan.name, **tags,
                          "ws_ptr": f"{ws.data_ptr():#x}", "us": round(us, 2)}), flush=True)
        return us

    def fills(ws: Any, gen: Any) -> dict[str, Any]:
        return {
            "zero": lambda: ws.zero_(),
            "ff": lambda: ws.fill_(255),
            "random": lambda: ws.copy_(torch.randint(0, 256, ws.shape, dtype=torch.uint8,
                                                    device=ws.device, generator=gen)),
        }

    gen = torch.Generator(device="cuda:0")
    gen.manual_seed(5)
    for rep in range(int(os.environ.get("WSP_FILL_REPS", "2"))):
        for plan in plans:
            ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
            measure("fresh", plan, ws, state="untouched", rep=rep)
            for state, fill in fills(ws, gen).items():
                fill()
                torch.cuda.synchronize()
                measure("fresh", plan, ws, state=state, rep=rep)
            for other in plans:
                if other is not plan:
                    fills(ws, gen)["zero"]()
                    other.execute(a, b, o, workspace=ws, check=False)
                    torch.cuda.synchronize()
                    measure("fresh", plan, ws, state=f"zero+{other.name}", rep=rep)
            del ws
            torch.cuda.empty_cache()
    if os.environ.get("WSP_SWEEP"):  # only: ALLOCS fresh buffers x offsets 0, 4 KiB, STEP, 2 STEP
        from convdoctor.measure.placement import WORKSPACE_STEP as STEP

        offs = (0, 4096, STEP, 2 * STEP)
        bufs = [torch.empty(nbytes + 2 * STEP, dtype=torch.uint8, device="cuda:0")
                for _ in range(int(os.environ["WSP_SWEEP"]))]
        for i, buf in enumerate(bufs):
            for off in offs:
                for plan in plans:
                    measure("sweep", plan, buf[off:off + nbytes], buf=i, off=off,
                            ws_bytes=plan.workspace_bytes)
        return
    # the workspace at offset OFF of a fresh buffer PAD bytes longer than it needs (all buffers
    # allocated first and kept, so each has its own memory), then the tuner's geometry: one
    # buffer of 3 * STEP + bytes, views at 0, STEP, 2 STEP, 3 STEP
    from convdoctor.measure.placement import WORKSPACE_STEP as STEP

    mib = 1 << 20
    shapes = [(pad, off) for pad in (0, 2 * mib, 8 * mib, 64 * mib)
              for off in (0, 4096, STEP) if off <= pad] * 2
    bufs = [torch.empty(nbytes + pad, dtype=torch.uint8, device="cuda:0") for pad, _ in shapes]
    for (pad, off), buf in zip(shapes, bufs, strict=True):
        for plan in plans:
            measure("padded", plan, buf[off:off + nbytes], pad=pad, off=off)
    del bufs
    for i in range(3):
        buf = torch.empty(3 * STEP + nbytes, dtype=torch.uint8, device="cuda:0")
        for slot in range(4):
            for plan in plans:
                measure("tuner_geometry", plan, buf[slot * STEP:slot * STEP + nbytes], buf=i,
                        slot=slot)
        del buf
        torch.cuda.empty_cache()
    for plan in plans:
        ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
        for sentinel in (0, 255):
            ws.fill_(sentinel)
            plan.execute(a, b, o, workspace=ws, check=False)
            torch.cuda.synchronize()
            changed = (ws != sentinel).nonzero().flatten()
            n = int(changed.numel())
            print(json.dumps({"phase": "written", "plan": plan.name, "sentinel": sentinel,
                              "ws_bytes": plan.workspace_bytes, "changed": n,
                              "first": int(changed[0]) if n else None,
                              "last": int(changed[-1]) if n else None}), flush=True)
        del ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
