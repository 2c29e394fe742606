"""What a tuning backend supplies: candidates, and a runner per candidate that times and checks it.

The harness (`convdoctor.tune.harness`) owns every measurement decision (warm-up, screening,
adaptive round-robin sampling, throttling, ties); a backend lists the engines' candidates for a
problem (`convdoctor.engines.registry`), builds their runners, and reads its device's clock. The CPU
backend lives in `cpu_backend.py`, the CUDA backend in `cuda_backend.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..engines.base import Candidate, CandidateUnsupported, Runner, StickyError
from ..errors import UsageError
from ..measure.clock import ClockReading
from ..measure.correctness import Correctness
from ..settings import Settings

if TYPE_CHECKING:
    from ..problem import ConvProblem

__all__ = ["BACKEND_NAMES", "Backend", "Candidate", "CandidateUnsupported", "ClockReading",
           "Correctness", "Runner", "StickyError", "get_backend"]

BACKEND_NAMES = ("auto", "cpu", "cuda")


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


# Backends by name: "module:callable" specs, also what a worker process is started with.
BACKENDS = {"cpu": "convdoctor.tune.cpu_backend:CpuBackend",
            "cuda": "convdoctor.tune.cuda_backend:CudaBackend"}


def _cuda_available() -> bool:
    try:
        import torch
    except Exception:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def load(spec: str, settings: Settings | None = None) -> Backend:
    """The backend a spec names: a name of `BACKENDS` (or "auto") or "module:callable" (tests)."""
    import importlib

    if ":" not in spec:
        return get_backend(spec, settings)
    mod, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(mod), attr)
    return factory() if settings is None else factory(settings=settings)  # type: ignore[no-any-return]


def get_backend(name: str = "auto", settings: Settings | None = None) -> Backend:
    """`auto`: CUDA when torch sees a GPU, else CPU. Raises UsageError for an unknown name."""
    import importlib

    name = (name or "auto").lower()
    if name not in BACKEND_NAMES:
        raise UsageError(f"unknown tuning backend {name!r}; use one of {', '.join(BACKEND_NAMES)}")
    if name == "auto":
        name = "cuda" if _cuda_available() else "cpu"
    if name == "cuda" and not _cuda_available():
        raise UsageError("the cuda backend needs a CUDA build of torch that sees a GPU",
                         hint="use --backend cpu, or run `convdoctor doctor` to see why no GPU")
    mod, _, attr = BACKENDS[name].partition(":")
    try:
        cls = getattr(importlib.import_module(mod), attr)
    except ImportError as exc:
        raise UsageError(f"the {name} tuning backend is not available ({exc})") from None
    return cls(settings=settings)  # type: ignore[no-any-return]
