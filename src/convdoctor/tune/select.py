"""From a tuning result to the order the runtime tries candidates in.

The harness chooses the winner of a problem (`TuneResult.winner`, by GPU time: its tie rules are
in `harness.Harness._select`). The runtime runs candidates from Python, where some engines pay
host time per eager call that PyTorch's own dispatch does not (a cuDNN plan through the custom
autograd Function, a Triton launcher; `Engine.host_cost_s`), and none inside a CUDA graph. So the
route order is the tuner's measured times plus each engine's host cost for the way the route will
run: within the tuner's noise band of the best such cost the tuner's winner stays first; beyond it
the measured cost decides. Keys the runtime may not route (`torch:benchmark`, unknown keys) and,
for transposed convolutions, engines that cannot run them are left out.
"""

from __future__ import annotations

from typing import Any

from ..engines.registry import engine_of


def route_order(result: Any, *, transposed: bool, train: bool, graphed: bool) -> list[str]:
    """Correct, measured candidate keys of `result`, best first, for a route that runs eagerly
    (`graphed=False`: engines' host costs count) or inside a CUDA graph (they do not), in training
    (`train`) or inference."""
    win = getattr(result, "winner", None)

    def usable(key: str) -> bool:
        e = engine_of(key)
        return e is not None and e.routes(key) and not (transposed and not e.runs_transposed)

    ok = [s for s in getattr(result, "candidates", []) if s.status == "ok"
          and s.median_s is not None and (s.correctness is None or s.correctness.ok)
          and usable(s.candidate.key)]

    def cost(s: Any) -> tuple[float, int]:
        key = s.candidate.key
        e = engine_of(key)
        host = 0.0 if graphed or e is None else e.host_cost_s(key, train=train)
        t = getattr(s, "rank_s", None)
        return ((s.median_s if t is None else t) + host,
                0 if win is not None and key == win.key else 1)

    ok.sort(key=cost)
    # Within the tuner's noise band of the best cost, the tuner's winner is trusted (its tie rules:
    # a pinned kernel within the tie floor, smaller workspace, deterministic); beyond it, the
    # measured cost decides.
    band = float(getattr(result, "noise_band", 0.0) or 0.0)
    if ok and win is not None:
        wi = next((i for i, s in enumerate(ok) if s.candidate.key == win.key), None)
        if wi is not None and cost(ok[wi])[0] <= cost(ok[0])[0] * (1.0 + band):
            ok.insert(0, ok.pop(wi))
    keys = [s.candidate.key for s in ok]
    if not keys and win is not None and usable(win.key):
        keys = [win.key]
    return keys
