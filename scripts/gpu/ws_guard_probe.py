"""`convdoctor.optimize`'s workspace guard on one plan, in one fresh process (GPU probe).

Builds the runtime's executor of PLAN for PROBLEM twice: without a reference (the workspace
`ConvPlan.workspace()` allocates, as before session 29) and with REFERENCE_US as the tuned time
(`PlanExec.guard_workspace`), and times both with the tuner's timer on the same scratch tensors.

    PYTHONPATH=src python scripts/gpu/ws_guard_probe.py "PROBLEM" PLAN_NAME REFERENCE_US
"""

from __future__ import annotations

import json
import statistics
import sys

import torch  # noqa: I001 - torch before cudnn


def main() -> None:
    from convdoctor.problem import ConvProblem
    from convdoctor.runtime.plans import PlanExec
    from convdoctor.tune.gpu.cudnn_plan import empty_for
    from convdoctor.tune.gpu.timing import LaunchTimer

    p = ConvProblem.parse(sys.argv[1])
    key, ref_us = "cudnn:" + sys.argv[2], float(sys.argv[3])
    torch.backends.cudnn.allow_tf32 = True
    plain = PlanExec.build(key, p)
    (ra, rb), ro = plain.plan.input_roles, plain.plan.output_role
    a, b = (empty_for(p, r, "cuda").uniform_(-1, 1) for r in (ra, rb))
    out = empty_for(p, ro, "cuda")

    def us(ex: PlanExec) -> float:
        t = LaunchTimer(lambda: ex._run(a, b, out), device=0)
        t.time(2)
        v = statistics.median(t.time(15)) * 1e6
        t.close()
        return v

    before = us(plain)
    guarded = PlanExec.build(key, p, reference_s=ref_us * 1e-6)
    after = us(guarded)
    g = guarded.guard
    print(json.dumps({"problem": p.short(), "plan": key, "reference_us": ref_us,
                      "unguarded_us": round(before, 1), "guarded_us": round(after, 1),
                      "guard": None if g is None else g.summary()}), flush=True)


if __name__ == "__main__":
    main()
