"""The tuner's runner on a GPU: one candidate's launches on the problem's shared buffers.

`BufferRunner` holds what every GPU candidate shares: inputs by role on the problem's buffer
placements (`measure.placement`; the harness passes its round number as the slot, so the
candidates of a round run on the same placement), L2-flushed event timing (`measure.timing`, one
timer per placement), and the check: fresh random inputs, the output poisoned with NaN, compared
norm-wise with a float64 reference computed by PyTorch's native CUDA kernels (cuDNN off). An
engine's runner subclasses it and defines `run()`: one launch of the engine's own launch path,
writing (or returning) the output.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..measure.buffers import fill_random, io_roles
from ..measure.correctness import Correctness, compare_norm, tolerance
from .torch_ops import reference_cuda

if TYPE_CHECKING:
    from ..problem import ConvProblem
    from .base import Candidate

# The last float64 reference: every runner of a problem checks on the same fresh seed, so the
# candidates of one problem share one reference computation. Key: (problem key, device, seed).
_REF_CACHE: dict[tuple[str, int, int], Any] = {}


def release_references() -> None:
    """Drop the cached float64 reference (the tuner calls this between problems)."""
    _REF_CACHE.clear()


class BufferRunner:
    """Shared parts: inputs by role on the problem's shared buffer placements (`placement.py`),
    L2-flushed event timing (one timer per placement), the NaN-poisoned check."""

    # the harness passes its round number as `slot` (see `Harness._timed`)
    slotted = True

    def __init__(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> None:
        import torch

        self.candidate = candidate
        self.problem = problem
        self.device = backend.device
        dev = f"cuda:{self.device}"
        (ra, rb), rout = io_roles(problem.direction)
        self.roles = (ra, rb, rout)
        self._sets: list[dict[str, Any]] | None = backend.placements_for(problem).sets
        self._cur = 0
        self._gen = torch.Generator(device=dev)
        self._seed = 1234
        self._gen.manual_seed(self._seed)
        fill_random(self.a, self._gen)
        fill_random(self.b, self._gen)
        self._timers: dict[int, Any] = {}
        self.timing_mode = ""

    @property
    def placements(self) -> int:
        return len(self._sets or ())

    def _role(self, role: str) -> Any:
        if self._sets is None:
            return None
        return self._sets[self._cur].get(role)

    @property
    def a(self) -> Any:
        return self._role(self.roles[0])

    @property
    def b(self) -> Any:
        return self._role(self.roles[1])

    @property
    def out(self) -> Any:
        return self._role(self.roles[2])

    @property
    def x_like(self) -> Any:
        return self._role("x") if self.problem.direction == "dgrad" else None

    @property
    def w_like(self) -> Any:
        return self._role("w") if self.problem.direction == "wgrad" else None

    # subclasses: run once, writing/returning the output
    def run(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def warmup(self) -> None:
        import torch

        self.run()
        torch.cuda.synchronize(self.device)

    def time(self, reps: int, slot: int | None = None) -> list[float]:
        """`reps` samples on placement `slot` (modulo the count; None: the first)."""
        from ..measure.timing import LaunchTimer

        n = self.placements
        self._cur = (int(slot) % n) if (slot is not None and n) else 0
        try:
            timer = self._timers.get(self._cur)
            if timer is None:
                # created (and its batch graph captured) while this placement is current
                timer = self._timers[self._cur] = LaunchTimer(self.run, device=self.device)
            out = timer.time(int(reps))
        finally:
            cur, self._cur = self._cur, 0
        info = timer.info
        self.timing_mode = (f"{info.mode} x{info.batch} spin {info.cover_s * 1e6:.0f}us "
                            f"retakes {info.retakes} uncovered {info.uncovered} "
                            f"max spin {info.max_cover_s * 1e6:.0f}us shrinks {info.shrinks} "
                            f"placement {cur + 1}/{n}")
        return out

    def _poisoned_run(self) -> Any:
        self.out.fill_(float("nan"))
        return self.run()

    def check(self) -> Correctness:
        import torch

        self._seed += 1
        self._gen.manual_seed(self._seed)
        fill_random(self.a, self._gen)
        fill_random(self.b, self._gen)
        try:
            out = self._poisoned_run()
            torch.cuda.synchronize(self.device)
        except Exception as exc:  # noqa: BLE001
            return Correctness(False, math.inf, tolerance(self.problem),
                               f"run failed: {type(exc).__name__}: {exc}"[:400])
        key = (self.problem.key(), self.device, self._seed)
        ref = _REF_CACHE.get(key)
        if ref is None:
            _REF_CACHE.clear()
            ref = reference_cuda(self.problem, self.a, self.b, self.x_like, self.w_like)
            _REF_CACHE[key] = ref
        return compare_norm(self.problem, out, ref)

    def close(self) -> None:
        for t in self._timers.values():
            t.close()
        self._timers = {}
        self._sets = None  # the placements stay with the backend for the problem's other runners

