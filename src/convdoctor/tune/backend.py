"""What a tuning backend supplies: candidates, and a runner per candidate that times and checks it.

The harness (`convdoctor.tune.harness`) owns every measurement decision (warm-up, screening,
adaptive round-robin sampling, throttling, ties); a backend only knows how to build a candidate for a
problem, run it, time it with its own clock and check it against a float64 reference. The CPU backend
lives in `cpu_backend.py`; the CUDA backend in `convdoctor.tune.gpu.backend.CudaBackend`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from ..errors import UsageError

if TYPE_CHECKING:
    from ..problem import ConvProblem

BACKEND_NAMES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Candidate:
    """One way to run a problem. `key` is stable across processes and machines of one kind.

    `pinned`: the key fixes the kernel that runs (a cuDNN engine configuration, a native kernel).
    False where a library picks the kernel anew in each process (PyTorch's cuDNN heuristic and
    benchmark paths): session 8 on the H100 saw PyTorch's heuristic path run a 19-20% slower
    kernel in one fresh process than in five others (wav2vec2 conv1 170 vs 143 us, C3D conv3a
    342 vs 285 us), so a time measured for it in the tuner's process need not hold in the user's.
    Ties prefer pinned candidates."""

    key: str
    backend: str
    workspace_bytes: int = 0
    deterministic: bool = True
    notes: tuple[str, ...] = ()
    pinned: bool = True

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "backend": self.backend, "workspace_bytes": self.workspace_bytes,
                "deterministic": self.deterministic, "notes": list(self.notes),
                "pinned": self.pinned}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Candidate:
        return cls(key=str(d["key"]), backend=str(d["backend"]),
                   workspace_bytes=int(cast(int, d.get("workspace_bytes", 0) or 0)),
                   deterministic=bool(d.get("deterministic", True)),
                   notes=tuple(str(n) for n in cast("Iterable[object]", d.get("notes", ()) or ())),
                   pinned=bool(d.get("pinned", True)))


@dataclass(frozen=True)
class ClockReading:
    """The device clock while a sample was taken (NVML)."""

    sm_clock_mhz: float | None
    max_sm_clock_mhz: float | None
    reasons: int
    slowdown: bool


@dataclass(frozen=True)
class Correctness:
    ok: bool
    max_rel_err: float
    tolerance: float
    detail: str = ""


class CandidateUnsupported(Exception):
    """The candidate cannot run this problem (the backend says why); not a failure."""


class StickyError(Exception):
    """The device is unusable in this process (a sticky CUDA error): raise it from a runner and the
    worker process exits, so the parent marks the candidate failed and starts a fresh worker."""


@runtime_checkable
class Runner(Protocol):
    candidate: Candidate

    def warmup(self) -> None:
        """One untimed run; the harness repeats it until first-run effects are gone."""

    def time(self, reps: int) -> list[float]:
        """`reps` timed runs, seconds each (flushing caches outside the timed interval)."""
        ...

    def check(self) -> Correctness:
        """Fresh random data, output poisoned (NaN) first, compared with a float64 reference."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """A tuning backend. Optional extras the harness uses when present: `lean_candidates(problem)`
    (a short list for when the full listing fails) and `listing_info()` (a JSON-safe dict: what
    the last listing did, kept in `TuneResult.listing`; read through `listing_record`), and a
    `listing_exclude` set of units (see `listing_step`) that its next listing must leave out."""

    name: str

    def environment(self) -> dict[str, str]:
        """Database key parts: device identity and every version that can change a timing."""
        ...

    def candidates(self, problem: ConvProblem) -> list[Candidate]: ...

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> Runner:
        """Build the runner (allocations, plan); may raise CandidateUnsupported."""
        ...

    def clock(self) -> ClockReading | None:
        """The current clock, or None when there is nothing to watch (CPU)."""
        ...


# ---------------------------------------------------------------------- listing steps
# Session 18 (H100, fp16 NHWC wgrad, whole suite): the full listing of 7 of the 8 3D problems
# outlasted the worker's 60 s wait in both tuning runs, so those problems were tuned from the short
# list at ~70 s each; session 8 had seen `cudnn:eng69_k24=0_k17=65` never return from its first run
# on one of them. A listing now says what it does next (`listing_step`); a worker writes each step
# to a file its parent watches, so the parent can name the step that hung, leave its unit (a cuDNN
# engine) out and list again (`worker.WorkerBackend`).
_STEP_SINK: Callable[[str, str, str], None] | None = None


def set_step_sink(sink: Callable[[str, str, str], None] | None
                  ) -> Callable[[str, str, str], None] | None:
    """Install the function that hears `listing_step`s (None: nobody listens); returns the old one."""
    global _STEP_SINK
    old, _STEP_SINK = _STEP_SINK, sink
    return old


# A prefix for the units of the steps reported inside `unit_prefix(...)`: a listing of another
# problem (the GPU backend's dual problem) names its engines "dual:eng69", so what hangs there is
# left out of that listing only, never out of the problem's own (engine ids belong to one graph).
_UNIT_PREFIX = ""


@contextlib.contextmanager
def unit_prefix(prefix: str) -> Iterator[None]:
    """Inside the block, `listing_step` units are reported as `prefix + unit`."""
    global _UNIT_PREFIX
    old, _UNIT_PREFIX = _UNIT_PREFIX, prefix
    try:
        yield
    finally:
        _UNIT_PREFIX = old


def listing_step(kind: str, unit: str, name: str = "") -> None:
    """Say what a backend's listing does next: `kind` ("build" a plan, "time" a plan, "engine": list
    an engine's knob settings), `unit` (what to leave out if this step never returns: for cuDNN the
    engine, "eng69"; inside `unit_prefix(p)`, `p + unit`), `name` (the plan). A no-op unless a
    worker listens; never raises."""
    sink = _STEP_SINK
    if sink is None:
        return
    try:
        sink(kind, _UNIT_PREFIX + unit if unit else unit, name)
    except Exception:  # noqa: BLE001 - diagnosis only: it must not cost the listing
        pass


def listing_record(backend: Any) -> dict[str, Any]:
    """The backend's record of its last listing (its optional `listing_info()`), checked to be a
    JSON-safe dict, or {}; a record that fails becomes {"record_error": why}. Never raises: the
    record is diagnosis only and must not cost the listing or the result's storage."""
    import json

    info = getattr(backend, "listing_info", None)
    if info is None:
        return {}
    try:
        d = info()
        if not isinstance(d, dict):
            return {}
        json.dumps(d)
    except Exception as exc:  # noqa: BLE001
        return {"record_error": f"listing record unavailable: {type(exc).__name__}: {exc}"[:200]}
    return dict(d)


def _cuda_available() -> bool:
    try:
        import torch
    except Exception:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def get_backend(name: str = "auto") -> Backend:
    """`auto`: CUDA when torch sees a GPU, else CPU. Raises UsageError for an unknown name."""
    name = (name or "auto").lower()
    if name not in BACKEND_NAMES:
        raise UsageError(f"unknown tuning backend {name!r}; use one of {', '.join(BACKEND_NAMES)}")
    if name == "auto":
        name = "cuda" if _cuda_available() else "cpu"
    if name == "cpu":
        from .cpu_backend import CpuBackend

        return CpuBackend()
    if not _cuda_available():
        raise UsageError("the cuda backend needs a CUDA build of torch that sees a GPU",
                         hint="use --backend cpu, or run `convdoctor doctor` to see why no GPU")
    try:
        from .gpu.backend import CudaBackend
    except ImportError as exc:
        raise UsageError(f"the CUDA tuning backend is not available ({exc})") from None
    return CudaBackend()  # type: ignore[no-any-return]
