"""Would a runtime gain by choosing WHERE a plan's workspace lies? (GPU machine, standalone probe)

Sessions 11-12 (H100, `ws_probe.py`): one plan on the same inputs ran 148-149 us with some workspace
addresses and 158-159 us with others (UNet2D dec4a), and wav2vec2 conv1's split-K plan 141-145 vs
161-169 us. The tuner now averages over several workspace addresses; `optimize` gives each plan
one workspace, wherever the allocator puts it. This probe asks whether picking the fastest of
several workspaces once (block A) still pays later: for each PROBLEM_KEY<TAB>PLAN_NAME line of the
file, one after another in one process (from the second line on, PyTorch's paths have already run
in it, as in the referee's process), it allocates the inputs and WS workspaces with random spacers, times
the plan on each workspace (block A), runs PyTorch's heuristic and benchmark paths and allocates
more memory, then times every workspace again in reverse order (block B), and once more after
allocating a second set of inputs and output (block C: do fast workspaces stay fast when the
activations move?). CUDA events, 40 calls after 10 warm-up calls, median of 3 such blocks (no spin: back-to-back
calls of these 30-350 us plans keep the GPU ahead of the host).

    python scripts/gpu/ws_pick_probe.py PAIRS_FILE [WS]

One JSON line per problem: plan, workspace bytes, the A/B/C microseconds per workspace, PyTorch's
two paths, and the pick's gain in B and C: time at the workspace A picked against the median
workspace (an honest figure: the pick and the figure come from different blocks).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from typing import Any

import torch  # noqa: I001 - torch before cudnn
from probe_timing import event_us


def _time(fn: Any) -> float:
    return event_us(fn, 40, warm=10, blocks=3)


def probe(key: str, name: str, nws: int, rng: random.Random) -> dict[str, Any]:
    from convdoctor.problem import ConvProblem
    from convdoctor.tune.gpu import cudnn_plan as cp

    p = ConvProblem.parse(key)
    plan = cp.ConvPlan.build(p, name)
    (ra, rb), ro = plan.input_roles, plan.output_role

    def tensors() -> tuple[Any, Any, Any]:
        return (cp.empty_for(p, ra, "cuda:0").uniform_(-1, 1),
                cp.empty_for(p, rb, "cuda:0").uniform_(-1, 1), cp.empty_for(p, ro, "cuda:0"))

    keep: list[Any] = []

    def spacer() -> None:
        keep.append(torch.empty(rng.randint(1, 48) << 20, dtype=torch.uint8, device="cuda"))

    a, b, o = tensors()
    wss = []
    for _ in range(nws):
        spacer()
        wss.append(torch.empty(max(1, plan.workspace_bytes), dtype=torch.uint8, device="cuda"))

    def block(x: Any, y: Any, z: Any, order: list[int]) -> list[float]:
        out = [0.0] * nws
        for i in order:
            out[i] = round(_time(lambda w=wss[i]: plan.execute(x, y, z, workspace=w, check=False)), 2)
        return out

    fwd = list(range(nws))
    t_a = block(a, b, o, fwd)
    torch_us: dict[str, float] = {}
    if p.direction == "fprop":
        import torch.nn.functional as F

        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[p.ndim]
        args = dict(stride=p.stride, padding=p.pad_pre, dilation=p.dilation, groups=p.groups)
        for bench in (False, True):
            torch.backends.cudnn.benchmark = bench
            torch_us[f"benchmark={bench}"] = round(_time(lambda: conv(a, b, **args)), 2)
        torch.backends.cudnn.benchmark = False
    spacer()
    t_b = block(a, b, o, fwd[::-1])
    spacer()
    a2, b2, o2 = tensors()
    t_c = block(a2, b2, o2, fwd)
    pick = min(fwd, key=lambda i: t_a[i])

    def gain(ts: list[float]) -> float:
        return round(statistics.median(ts) / ts[pick], 4)

    return {"problem": key, "plan": name, "ws_bytes": plan.workspace_bytes, "A": t_a, "B": t_b,
            "C": t_c, "pick": pick, "gain_B": gain(t_b), "gain_C": gain(t_c),
            "spread_A": round(max(t_a) / min(t_a), 4), "torch_us": torch_us}


def main() -> None:
    pairs = [ln.rstrip("\n").split("\t")[:2] for ln in open(sys.argv[1]) if ln.strip()]
    nws = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    torch.backends.cudnn.allow_tf32 = True
    rng = random.Random(11)
    for key, name in pairs:
        try:
            row = probe(key, name, nws, rng)
        except Exception as e:  # noqa: BLE001 - a probe reports and goes on
            row = {"problem": key, "plan": name, "error": f"{type(e).__name__}: {e}"[:300]}
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
