"""`CudaBackend`: the tuner's GPU backend (the Backend protocol of `convdoctor.tune.backend`).

Its candidates are those of every engine in `convdoctor.engines.registry` but the CPU paths, in
registry order: PyTorch's paths, cuBLAS products, convdoctor's Triton kernels, PyTorch's native
kernels, cuDNN plans and their dual-problem twins (docs/engines.md describes each). A candidate's
runner comes from its engine; the backend supplies what runners share: the device, the problem's
buffer placements, the NVML clock, the settings.

PyTorch caches its cuDNN choice per process under a key WITHOUT the benchmark flag: once a shape ran
with benchmark off, benchmark=True never searches it, and vice versa. So torch:benchmark runs in this
process (its choice is "what benchmark=True picks in this process"), and torch:heuristic runs in a
private child worker process (`convdoctor.tune.worker` with `in_process_backend`) that never runs
benchmark mode; the heuristic choice does not depend on the process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..engines.base import Candidate, CandidateUnsupported
from ..engines.registry import TWIN_PREFIX, engine_of, listed_by
from ..engines.torch_paths import BENCHMARK, HEURISTIC
from ..measure.clock import ClockReading
from ..settings import Settings
from .worker import WorkerBackend

if TYPE_CHECKING:
    from ..problem import ConvProblem


class Prestartable:
    """A helper process's handle, made by `make` on first use (`get`), or started ahead in a
    background thread (`start_ahead`) and taken by the first `get`. A start that failed ahead is
    retried by `get`, which reports its error; `shutdown` does not wait for a start still under
    way: that start, finding itself stale (its generation passed), shuts its process down."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.handle: Any = None
        self._thread: threading.Thread | None = None
        self._ready: Any = None
        self._lock = threading.Lock()
        self._generation = 0

    def start_ahead(self) -> None:
        if self.handle is not None or self._thread is not None:
            return
        with self._lock:
            mine = self._generation

        def start() -> None:
            try:
                made = self.make()
            except Exception:  # noqa: BLE001 - retried, and reported, by get()
                made = None
            with self._lock:
                if mine == self._generation:
                    self._ready, made = made, None
            if made is not None:
                made.shutdown()

        self._thread = threading.Thread(target=start, name="convdoctor-prestart", daemon=True)
        self._thread.start()

    def get(self) -> Any:
        if self.handle is None and self._thread is not None:
            self._thread.join()
            self._thread = None
            with self._lock:
                self.handle, self._ready = self._ready, None
        if self.handle is None:
            self.handle = self.make()
        return self.handle

    def shutdown(self) -> None:
        with self._lock:
            self._generation += 1      # a start still under way is stale from now on
            self._thread = None
            ready, self._ready = self._ready, None
        for h in (ready, self.handle):
            if h is not None:
                h.shutdown()
        self.handle = None


class CudaBackend:
    """Tuning backend for one CUDA device."""

    name = "cuda"

    def __init__(self, device: int | None = None, *, settings: Settings | None = None,
                 isolate_heuristic: bool = True) -> None:
        import torch

        if not torch.cuda.is_available():
            from ..errors import DependencyMissing

            raise DependencyMissing("the CUDA tuning backend needs a CUDA build of torch that sees "
                                    "a GPU", hint="run `convdoctor doctor` to see why none is seen")
        from ..settings import current

        self.settings = settings if settings is not None else current()
        self.device = torch.cuda.current_device() if device is None else int(device)
        self.isolate_heuristic = isolate_heuristic
        self._clock: Any = None
        self._env: dict[str, str] | None = None
        self._placements: Any = None
        self._child = Prestartable(lambda: WorkerBackend(
            "convdoctor.tune.cuda_backend:in_process_backend", timeout_s=120.0,
            settings=self.settings))
        # what the last listing did (`listing_info`), written by the cuDNN engines
        self.last_listing: dict[str, Any] = {}
        self.last_enumeration: Any = None
        self.last_refinement: Any = None
        self.cudnn_error = ""
        # units ("eng69") the next listings leave out: set by the worker from its parent's
        # request after a step of an earlier listing never returned (`engines.listing`)
        self.listing_exclude: set[str] = set()
        self.listing_exclude_why: dict[str, str] = {}

    def _heuristic_child(self) -> Any:
        """The private worker process that measures torch:heuristic (started on first use, or
        ahead by `prestart`)."""
        return self._child.get()

    def prestart(self) -> None:
        """Start the torch:heuristic child in the background now, so that its start (PyTorch's
        import and a CUDA context, seconds) overlaps the first problem's listing instead of
        delaying its first candidate."""
        if self.isolate_heuristic:
            self._child.start_ahead()

    def shutdown(self) -> None:
        self._child.shutdown()

    # ------------------------------------------------------------ identity
    def environment(self) -> dict[str, str]:
        """Database key parts: the device, and every version and setting that can change a
        result (driver, CUDA, cuDNN and its frontend, torch, Triton, convdoctor's kernel sources,
        the result-changing settings)."""
        if self._env is not None:
            return dict(self._env)
        import torch

        from ..engines.cudnn_graph import cudnn_frontend_version, import_cudnn
        from ..kernels import source_hash, triton_version

        props = torch.cuda.get_device_properties(self.device)
        env = {
            "gpu_name": str(props.name),
            "sm_count": str(props.multi_processor_count),
            "compute_capability": f"{props.major}.{props.minor}",
            "driver": self._nvml().driver_version() or "unknown",
            "cuda_runtime": str(torch.version.cuda or "unknown"),
            "cudnn": str(torch.backends.cudnn.version() or "unknown"),
            "cudnn_frontend": cudnn_frontend_version() or "absent",
            "torch": str(torch.__version__),
            "triton": triton_version(),
            "kernels": source_hash(),
            "settings": self.settings.result_key(),
        }
        try:
            _, cudnn = import_cudnn()
            env["cudnn_frontend_backend"] = str(cudnn.backend_version())
        except Exception:  # noqa: BLE001
            pass
        self._env = env
        return dict(env)

    def _nvml(self) -> Any:
        if self._clock is None:
            from ..measure.nvml import NvmlClock

            self._clock = NvmlClock(self.device)
        return self._clock

    def clock(self) -> ClockReading | None:
        return self._nvml().read()  # type: ignore[no-any-return]

    # ------------------------------------------------------------ candidates
    def _listing(self, problem: ConvProblem, *, lean: bool) -> list[Candidate]:
        from ..engines.cudnn import excluded_engines
        from ..engines.cudnn_dual import UNIT as DUAL_UNIT
        from ..engines.listing import listing_step

        self.release(problem)
        self.last_listing = {}
        out: list[Candidate] = []
        for engine in listed_by("cuda"):
            out += engine.offers(problem, self, lean=lean)
        listing_step("setup", "", "listing done")
        own = excluded_engines(self.listing_exclude)
        dual = excluded_engines({u[len(DUAL_UNIT):] for u in self.listing_exclude
                                 if u.startswith(DUAL_UNIT)})
        left = [f"eng{e}" for e in sorted(own)] + [f"{DUAL_UNIT}eng{e}" for e in sorted(dual)]
        if left:
            self.last_listing["left_out"] = left
        return out

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        return self._listing(problem, lean=False)

    def lean_candidates(self, problem: ConvProblem) -> list[Candidate]:
        """PyTorch's paths and cuDNN's heuristic plans only (no enumeration, no refinement): what
        the harness falls back to when the full listing failed or hung."""
        return self._listing(problem, lean=True)

    def listing_info(self) -> dict[str, Any]:
        """What the last listing did (JSON-safe; `TuneResult.listing`): whether it was the short
        list, cuDNN's error if it listed nothing, the enumeration's plan counts and seconds, and
        the knob refinement's seeds, plans tried/built/kept, seconds and notes."""
        return dict(self.last_listing or {})

    def release(self, problem: ConvProblem | None = None) -> None:
        """Free what earlier problems left behind before tuning `problem`: their cached cuDNN
        plans (and graphs), the cached reference and the allocator's unused cached blocks. A
        worker tunes problem after problem; without this its memory grows until later problems
        fail every candidate with CUDA out-of-memory."""
        import torch

        from ..engines.cudnn_enum import drop_plans
        from ..engines.runner import release_references

        drop_plans(None if problem is None else problem.key())
        self._placements = None
        release_references()
        torch.cuda.empty_cache()

    def placements_for(self, problem: ConvProblem) -> Any:
        """The problem's buffer placements, shared by all its runners in this process (made on
        first use; a new problem replaces the previous problem's, whose runners keep theirs alive
        until they close)."""
        from ..measure.placement import allocate

        cur = self._placements
        if cur is None or cur.key != problem.key():
            self._placements = None
            cur = self._placements = allocate(problem, self.device)
        return cur

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> Any:
        import torch

        key = candidate.key
        with torch.cuda.device(self.device):
            if key.startswith(TWIN_PREFIX):
                inner = key[len(TWIN_PREFIX):]
                if not inner or inner.startswith(TWIN_PREFIX) or inner == BENCHMARK:
                    raise CandidateUnsupported(f"{key}: no twin of {inner!r} in the heuristic "
                                               "process")
                return self._heuristic_child().prepare(problem, replace(candidate, key=inner))
            if key == HEURISTIC and self.isolate_heuristic:
                return self._heuristic_child().prepare(problem, candidate)
            engine = engine_of(key)
            if engine is None or engine.device == "cpu":
                raise CandidateUnsupported(f"unknown candidate {key!r} for the CUDA backend")
            return engine.runner(self, problem, candidate)


def in_process_backend() -> CudaBackend:
    """The backend of the torch:heuristic child worker: everything runs in that process (and no
    engine enumeration: it measures PyTorch's paths)."""
    from ..settings import current

    return CudaBackend(settings=current().replace(cudnn_enum=False), isolate_heuristic=False)
