"""Which buffer makes a cuDNN plan slow at one of the tuner's placements? (GPU machine, probe)

A plan can run slower on one of the tuner's buffer placements than on the others (H100: Inception
Conv2d_4a_3x3 fp32 wgrad, `eng68_k2=0_k13=0_k18=1_k25=0_k27=1_k28=1`, 592-597 us on three of four
placements and 716-729 us on the first). A placement is
the problem's tensors (`placement.allocate`) AND the plan's workspace at `workspace_offsets`
(slot 0: offset 0). This probe separates the two, in ONE process, with the tuner's own timer
(`LaunchTimer`: L2 flush, spin cover):

- `tuner`: each plan on the tuner's placements, slot s = tensors of set s + workspace offset s*STEP;
- `grid`: tensors of set s x workspace offset o (OFFSETS) for every s, o;
- `roles`: x, dy and dw each from set 0 or set 1 (8 mixes), workspace at offset 0 and at STEP;
- `fresh`: the workspace as `convdoctor.optimize` gets it (`ConvPlan.workspace()`: its own
  `torch.empty`), on every set;
- `pytorch`: benchmark=True (and the heuristic, in that order: PyTorch caches the first choice)
  on every set, and the kernel names each plan and PyTorch's pick launch (torch.profiler).

    PYTHONPATH=src python lab/ws_place_probe.py "PROBLEM" PLAN_NAME [PLAN_NAME ...]

One JSON line per measurement (phase, plan, set/mix, workspace offset, address bits, median us of
SAMPLES samples, env WSP_SAMPLES, default 9); a summary line per phase at the end.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any

import torch  # noqa: I001 - torch before cudnn

MiB = 1 << 20


def main() -> None:
    from convdoctor.engines import cudnn_enum as cp
    from convdoctor.engines.torch_ops import torch_conv
    from convdoctor.measure.placement import WORKSPACE_STEP, allocate
    from convdoctor.measure.timing import LaunchTimer
    from convdoctor.problem import ConvProblem

    problem = ConvProblem.parse(sys.argv[1])
    names = sys.argv[2:]
    samples = int(os.environ.get("WSP_SAMPLES", "9"))
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = False
    plans = [cp.build_plan(problem, n, device=0) for n in names]
    sets = allocate(problem, 0, wanted=4).sets
    (ra, rb), ro = plans[0].input_roles, plans[0].output_role
    offsets = [0, 256, 4096, 64 << 10, 512 << 10, MiB, WORKSPACE_STEP, 2 * WORKSPACE_STEP,
               3 * WORKSPACE_STEP, 2 * MiB, 2 * MiB + 4096]
    wsbytes = max(p.workspace_bytes for p in plans)
    bigs = [torch.empty(wsbytes + max(offsets) + 4096, dtype=torch.uint8, device="cuda:0")]
    summary: dict[str, dict[str, list[float]]] = {}

    def bits(t: Any) -> str:
        return f"{t.data_ptr() % (2 * MiB):#x}"

    def measure(phase: str, plan: Any, a: Any, b: Any, o: Any, ws: Any, **tags: Any) -> float:
        timer = LaunchTimer(lambda: plan.execute(a, b, o, workspace=ws, check=False), device=0)
        timer.time(2)
        us = statistics.median(timer.time(samples)) * 1e6
        timer.close()
        print(json.dumps({"phase": phase, "plan": plan.name, **tags,
                          "ws_mod_2MiB": bits(ws), "a_mod_2MiB": bits(a),
                          "b_mod_2MiB": bits(b), "out_mod_2MiB": bits(o), "us": round(us, 2)}),
              flush=True)
        summary.setdefault(phase, {}).setdefault(plan.name, []).append(us)
        return us

    def ws_at(plan: Any, off: int) -> Any:
        return bigs[0][off:off + max(1, plan.workspace_bytes)]

    print(json.dumps({"phase": "setup", "problem": problem.key(), "plans": names,
                      "ws_bytes": [p.workspace_bytes for p in plans], "big_mod_2MiB": bits(bigs[0]),
                      "sets": [{r: bits(t) for r, t in s.items()} for s in sets]}), flush=True)
    for _round in range(3):
        for slot in range(4):
            for plan in plans:
                s = sets[slot]
                measure("tuner", plan, s[ra], s[rb], s[ro], ws_at(plan, slot * WORKSPACE_STEP),
                        set=slot, ws_off=slot * WORKSPACE_STEP)
    for slot in range(4):
        for off in offsets:
            for plan in plans:
                s = sets[slot]
                measure("grid", plan, s[ra], s[rb], s[ro], ws_at(plan, off), set=slot, ws_off=off)
    for mix in range(8):
        pick = [(mix >> i) & 1 for i in range(3)]
        a, b, o = sets[pick[0]][ra], sets[pick[1]][rb], sets[pick[2]][ro]
        for off in (0, WORKSPACE_STEP):
            for plan in plans:
                measure("roles", plan, a, b, o, ws_at(plan, off), mix=f"{ra}{pick[0]}{rb}{pick[1]}"
                        f"{ro}{pick[2]}", ws_off=off)
    bigs.clear()
    torch.cuda.empty_cache()  # the runtime's workspace: a fresh allocation of its own
    for plan in plans:
        ws = plan.workspace()
        for slot in range(4):
            s = sets[slot]
            measure("fresh", plan, s[ra], s[rb], s[ro], ws, set=slot)
        plan.release_workspace()
    # PyTorch's paths: benchmark=True first (its pick is cached for the heuristic too, so the
    # heuristic is only timed when asked for with WSP_HEURISTIC=1 in a process of its own)
    mode = "heuristic" if os.environ.get("WSP_HEURISTIC") == "1" else "benchmark"
    torch.backends.cudnn.benchmark = mode == "benchmark"
    like = sets[0].get("w") if problem.direction == "wgrad" else sets[0].get("x")
    for slot in range(4):
        s = sets[slot]
        a, b = s[ra], s[rb]
        timer = LaunchTimer(lambda a=a, b=b: torch_conv(problem, a, b, like), device=0)
        timer.time(2)
        us = statistics.median(timer.time(samples)) * 1e6
        timer.close()
        print(json.dumps({"phase": "pytorch", "plan": f"torch:{mode}", "set": slot,
                          "us": round(us, 2)}), flush=True)
        summary.setdefault("pytorch", {}).setdefault(f"torch:{mode}", []).append(us)
    from torch.profiler import ProfilerActivity, profile

    s = sets[1]
    runs: dict[str, Any] = {f"torch:{mode}": lambda: torch_conv(problem, s[ra], s[rb], like)}
    for plan in plans:
        runs[plan.name] = lambda plan=plan: plan.execute(s[ra], s[rb], s[ro], check=False)
    for name, fn in runs.items():
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = sorted({e.name[:120] for e in prof.events()
                          if e.device_type.name == "CUDA" and "Memset" not in e.name})
        print(json.dumps({"phase": "kernels", "plan": name, "kernels": kernels}), flush=True)
    for phase, per in summary.items():
        print(json.dumps({"phase": "summary", "of": phase,
                          "us": {k: [round(min(v), 1), round(statistics.median(v), 1),
                                     round(max(v), 1)] for k, v in per.items()}}), flush=True)


if __name__ == "__main__":
    main()
