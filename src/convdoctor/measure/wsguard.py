"""A cuDNN plan's workspace kept only where the plan runs at its speed ("workspace guard").

Why (H100, `lab/ws_place_probe.py` and `ws_content_probe.py`): Inception
Conv2d_4a_3x3 fp32 wgrad, plan `eng68_k2=0_k13=0_k18=1_k25=0_k27=1_k28=1` (187 MB of workspace:
NHWC copies of x and dy, which its GEMM then reads) ran 585-597 us with some workspace buffers and
710-736 us (+22%) with others - the same tensors, the same process, any contents (zeros, 0xff,
random, another plan's leftovers). Which buffers are slow follows the memory behind them, not their
virtual address: two buffers at the same virtual address, allocated one after the other, read 726
and 594 us; the same allocation sequence gave the same pattern in every fresh process. About one
workspace in four was slow (3 of 12 fresh buffers; 6 of 18 padded ones, more often at a buffer's
first byte). PyTorch runs the same kernel and draws the same: benchmark=True's path ran 586-590 us
in some processes and 722-732 us in others, the heuristic path likewise. Six other fp32 wgrad eng68
plans showed at most 2.6% between buffers. The tuner had rotated 4 workspace offsets inside one buffer
and, ranking by the mean over them, dropped the plan for a 2.2% slower one that no buffer slows.

The workspace is the one buffer a plan's user allocates for it, so a user of the plan can choose
it: time the plan with its workspace; if it is more than `TOLERANCE` slower than the reference,
allocate another (the rejected ones stay allocated until the choice is made, so each try gets new
memory) and keep the fastest of at most `TRIES`. `convdoctor.optimize` does this with the tuned
time as the reference (`runtime/plans.py`: the first plan of each route), and the tuner's plan
runners do it with their own fastest workspace as the reference when the harness settles its
finalists before sampling (`Harness._settle`, `CudnnPlanRunner.settle`), so what the tuner ranks is
what the runtime will run. Finalists only: a guard times its plan five times or more, and the
screen keeps a plan one slow placement would slow (it drops by the best round, not the mean).

`choose` is the decision alone (no CUDA); `time_with` and `enabled` are the GPU-side parts.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Workspaces smaller than this are not guarded (split-K partial sums, index tables: the probes found
# the effect with workspaces holding whole operand copies, 89.6 MB in one probe, 187 MB in another).
GUARD_MIN_BYTES = 1 << 20
# A workspace more than this much slower than the reference is replaced (the slow buffers of the
# probe were 22% slower; buffer-to-buffer spread of the insensitive plans stayed under 2.6%).
TOLERANCE = 0.05
# Workspaces tried at most per guard, the first included (at the probes' one slow buffer in four,
# three tries are all slow about one time in 64).
TRIES = 3
# Timed calls per try (median), after one warm-up call.
SAMPLES = 5


def wanted(workspace_bytes: int, enabled: bool = True) -> bool:
    """Whether a plan with this workspace is guarded at all (`enabled`: the `ws_guard`
    setting)."""
    return enabled and int(workspace_bytes) >= GUARD_MIN_BYTES


@dataclass
class GuardResult:
    """What one guard did: `times_s[i]` is the i-th try's time (the first: the workspace it was
    given), `kept` the index of the one kept, `reference_s` what it was held to."""

    times_s: list[float] = field(default_factory=list)
    kept: int = 0
    reference_s: float | None = None

    @property
    def replaced(self) -> bool:
        return self.kept != 0

    def summary(self) -> str:
        us = "/".join(f"{t * 1e6:.0f}" for t in self.times_s)
        ref = "" if self.reference_s is None else f" vs {self.reference_s * 1e6:.0f} us"
        verb = f"kept try {self.kept + 1}" if self.replaced else "kept the first"
        return f"workspace guard: {us} us over {len(self.times_s)} tries{ref}, {verb}"


def choose(first: Any, fresh: Callable[[], Any], time_of: Callable[[Any], float], *,
           reference_s: float | None = None, first_s: float | None = None,
           tries: int | None = None, tolerance: float | None = None
           ) -> tuple[Any, GuardResult]:
    """The workspace to keep and what was tried.

    `first`: the workspace in hand; `fresh()`: a new one; `time_of(ws)`: seconds per call with it;
    `first_s`: `first`'s time when already measured. Keeps `first` when it is within `tolerance` of
    `reference_s` (no reference: `first` is its own, so it is kept); else tries fresh workspaces,
    all held until the end (a freed one would come back from the allocator on the next try), until
    one is within the tolerance or `tries` were made, and keeps the fastest. `tries` and
    `tolerance` default to the module's `TRIES` and `TOLERANCE` (read per call)."""
    tries = TRIES if tries is None else tries
    tolerance = TOLERANCE if tolerance is None else tolerance
    t0 = time_of(first) if first_s is None else first_s
    res = GuardResult([t0], 0, reference_s)
    if reference_s is None or t0 <= reference_s * (1.0 + tolerance):
        return first, res
    held = [first]
    while len(held) < max(1, tries):
        ws = fresh()
        held.append(ws)
        t = time_of(ws)
        res.times_s.append(t)
        if t <= reference_s * (1.0 + tolerance):
            break
    res.kept = min(range(len(res.times_s)), key=res.times_s.__getitem__)
    return held[res.kept], res


def time_with(run: Callable[[], Any], *, device: int, samples: int = SAMPLES) -> float:
    """Seconds per call of `run` with the tuner's timer (L2 flushed before each call), the median
    of `samples` after one warm-up call."""
    from .timing import LaunchTimer

    timer = LaunchTimer(run, device=device)
    try:
        timer.time(1)
        return float(statistics.median(timer.time(max(1, samples))))
    finally:
        timer.close()
