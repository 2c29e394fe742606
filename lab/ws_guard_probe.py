"""`convdoctor.optimize`'s workspace guard on one plan, in one fresh process (GPU probe).

1. Builds the runtime's executor of PLAN for PROBLEM without a reference (the workspace
   `ConvPlan.workspace()` allocates: the unguarded case) and with REFERENCE_US as the tuned time
   (`PlanExec.guard_workspace`), times both with the tuner's timer on the same scratch tensors, and
   reports how long the guarded build took.
2. Forced: allocates up to 12 fresh workspaces (all kept), times the plan with each, hands the
   slowest to the plan (`ConvPlan.adopt_workspace`) and builds a guarded executor with the
   fastest's time as the reference: the guard must find a faster workspace when the slowest was
   more than its tolerance behind.

    PYTHONPATH=src python lab/ws_guard_probe.py "PROBLEM" PLAN_NAME REFERENCE_US
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch  # noqa: I001 - torch before cudnn


def main() -> None:
    from convdoctor.engines.cudnn_exec import PlanExec
    from convdoctor.measure.buffers import empty_for
    from convdoctor.measure.timing import LaunchTimer
    from convdoctor.problem import ConvProblem

    p = ConvProblem.parse(sys.argv[1])
    key, ref_us = "cudnn:" + sys.argv[2], float(sys.argv[3])
    torch.backends.cudnn.allow_tf32 = True
    plain = PlanExec.build(key, p)
    (ra, rb), ro = plain.plan.input_roles, plain.plan.output_role
    a, b = (empty_for(p, r, "cuda").uniform_(-1, 1) for r in (ra, rb))
    out = empty_for(p, ro, "cuda")

    def us_with(ws: torch.Tensor) -> float:
        t = LaunchTimer(lambda: plain.plan.execute(a, b, out, workspace=ws, check=False), device=0)
        t.time(2)
        v = statistics.median(t.time(15)) * 1e6
        t.close()
        return v

    before = us_with(plain.workspace)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    guarded = PlanExec.build(key, p, reference_s=ref_us * 1e-6)
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    after = us_with(guarded.workspace)
    g = guarded.guard
    print(json.dumps({"problem": p.short(), "plan": key, "ws_bytes": plain.plan.workspace_bytes,
                      "reference_us": ref_us, "unguarded_us": round(before, 1),
                      "guarded_us": round(after, 1), "guarded_build_ms": round(build_s * 1e3, 1),
                      "guard": None if g is None else g.summary()}), flush=True)
    n = max(1, plain.plan.workspace_bytes)
    bufs = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(12)]
    times = [us_with(w) for w in bufs]
    slow = max(range(len(times)), key=times.__getitem__)
    fast = min(times)
    plain.plan.adopt_workspace(bufs[slow])
    forced = PlanExec.build(key, p, reference_s=fast * 1e-6)
    del bufs
    g = forced.guard
    print(json.dumps({"forced": True, "workspaces_us": [round(t, 1) for t in times],
                      "handed_us": round(times[slow], 1), "reference_us": round(fast, 1),
                      "guard": None if g is None else g.summary(),
                      "kept_us": round(us_with(forced.workspace), 1)}), flush=True)


if __name__ == "__main__":
    main()
