"""PyTorch's own convolution paths as engines: `torch:*` keys.

- `torch:benchmark`: what `cudnn.benchmark=True` picks in this process, then timed. Measured as a
  reference, never routed: PyTorch caches one cuDNN choice per shape for the whole process
  regardless of the benchmark flag, so a benchmark route would change what every other path gets
  for that shape (on an H100 it made later inference 30% slower).
- `torch:heuristic`: PyTorch with benchmark off (cuDNN's heuristics). Tuned in a private child
  process (`CudaBackend`): PyTorch's choice cache ignores the benchmark flag, so the two modes
  cannot both be measured in one process (a runner that would reuse the other mode's cached choice
  raises CandidateUnsupported).
- `torch:heuristic+nhwc`: the heuristic path run in channels_last (2D/3D NCHW problems), inputs
  converted in and the output back inside the timed run, as the route pays per call.
- `torch:cudnn-off` (engine `torch-native`): PyTorch's native CUDA kernels, cuDNN disabled.
- `torch:default`, `torch:deterministic`: runtime routes only (PyTorch as configured; the
  fallback chain's deterministic step).
The runtime runs them all through `flag_exec.FlagExec` (flags per key: data/routes.json).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .base import Candidate, CandidateUnsupported, Engine
from .runner import BufferRunner
from .torch_ops import torch_conv, torch_flags

if TYPE_CHECKING:
    from ..problem import ConvProblem

BENCHMARK = "torch:benchmark"
HEURISTIC = "torch:heuristic"
HEURISTIC_NHWC = "torch:heuristic+nhwc"
CUDNN_OFF = "torch:cudnn-off"
DEFAULT = "torch:default"
DETERMINISTIC = "torch:deterministic"

# (problem key, device) -> which torch cuDNN mode ran first in this process
_TORCH_CUDNN_FIRST: dict[tuple[str, int], str] = {}


def _asym_note(problem: ConvProblem) -> tuple[str, ...]:
    return () if problem.symmetric_padding else ("asymmetric padding: explicit F.pad included in "
                                                 "the time",)


class TorchRunner(BufferRunner):
    """A `torch:*` candidate: PyTorch's convolution under the key's flags (`torch_flags`)."""

    def __init__(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> None:
        import torch

        self.mode, _, alt = candidate.key.split(":", 1)[1].partition("+")
        # the other layout to run in (converted in and back inside the timed run), or None
        self.alt: Any = None
        if alt:
            if alt != "nhwc" or problem.ndim not in (2, 3) or problem.layout == "nhwc":
                raise CandidateUnsupported(f"{candidate.key} applies to 2D/3D NCHW problems only")
            self.alt = torch.channels_last if problem.ndim == 2 else torch.channels_last_3d
        super().__init__(backend, problem, candidate)
        if self.mode in ("benchmark", "heuristic"):
            # PyTorch's choice cache key includes the memory format: the other layout is its own key
            k = (problem.key() + (f"+{alt}" if alt else ""), backend.device)
            first = _TORCH_CUDNN_FIRST.get(k)
            if first is not None and first != self.mode:
                self.close()
                raise CandidateUnsupported(
                    f"torch:{self.mode} cannot be measured in this process: torch:{first} already "
                    "ran this problem here and PyTorch reuses its cached cuDNN choice (its cache "
                    "key ignores the benchmark flag); run it in a fresh worker process")
            _TORCH_CUDNN_FIRST[k] = self.mode
            # The choice is made now: benchmark=True searches on this first call.
            self.run()
            torch.cuda.synchronize(backend.device)

    def run(self) -> Any:
        like = self.x_like if self.problem.direction == "dgrad" else self.w_like
        if self.alt is not None:
            return self._run_alt(like)
        with torch_flags(self.mode, self.problem):
            return torch_conv(self.problem, self.a, self.b, like)

    def _run_alt(self, like: Any) -> Any:
        import torch

        fmt = self.alt
        a = self.a.contiguous(memory_format=fmt)
        b = self.b.contiguous(memory_format=fmt)
        lk = None if like is None else like.contiguous(memory_format=fmt)
        with torch_flags(self.mode, self.problem):
            out = torch_conv(replace(self.problem, layout="nhwc"), a, b, lk)
        return out.contiguous(memory_format=torch.contiguous_format)

    def _poisoned_run(self) -> Any:
        # PyTorch allocates its own output: poison the caching allocator's block of that size
        # first (allocate, fill with NaN, free), so the output reuses NaN-filled memory.
        import torch

        from ..measure.buffers import empty_for

        _, _, rout = self.roles
        p = empty_for(self.problem, rout, f"cuda:{self.device}")
        p.fill_(float("nan"))
        del p
        torch.cuda.synchronize(self.device)
        return self.run()



def _flag_executor(key: str) -> Any:
    from .flag_exec import flag_exec

    return flag_exec(key)


class TorchPaths(Engine):
    """PyTorch's cuDNN paths: benchmark, heuristic, heuristic in channels_last; and the runtime's
    own routes (PyTorch as configured, deterministic)."""

    name = "torch"
    device = "any"
    keys = (BENCHMARK, HEURISTIC, HEURISTIC_NHWC, DEFAULT, DETERMINISTIC)
    summary = "PyTorch's cuDNN paths (benchmark=True's pick, the heuristic, the heuristic in NHWC)"

    def routes(self, key: str) -> bool:
        return key != BENCHMARK

    def offers(self, problem: ConvProblem, backend: Any, *, lean: bool = False
               ) -> list[Candidate]:
        det, asym = problem.deterministic, _asym_note(problem)
        # PyTorch picks the cuDNN engine of these paths in each process: not pinned
        out = [Candidate(HEURISTIC, "cuda", 0, det, ("PyTorch cuDNN heuristics (benchmark=False), "
                                                     "in a child process",) + asym, pinned=False)]
        settings = getattr(backend, "settings", None)
        if getattr(settings, "tune_benchmark_reference", True):
            out.insert(0, Candidate(BENCHMARK, "cuda", 0, det, ("PyTorch cudnn.benchmark=True "
                                                                "choice in this process",) + asym,
                                    pinned=False))
        if problem.layout == "nchw" and problem.ndim in (2, 3):
            out.append(Candidate(HEURISTIC_NHWC, "cuda", 0, det,
                                 ("PyTorch cuDNN heuristics run in channels_last: converted in "
                                  "and back, both timed",) + asym, pinned=False))
        return out

    def runner(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
        return _torch_runner(backend, problem, candidate)

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        return _flag_executor(key)


class NativePaths(Engine):
    """PyTorch's native CUDA kernels (cuDNN disabled)."""

    name = "torch-native"
    device = "any"
    keys = (CUDNN_OFF,)
    summary = "PyTorch's native CUDA convolution kernels (cuDNN disabled)"

    def offers(self, problem: ConvProblem, backend: Any, *, lean: bool = False
               ) -> list[Candidate]:
        if problem.deterministic and problem.direction != "fprop":
            return []
        return [Candidate(CUDNN_OFF, "cuda", 0, problem.direction == "fprop",
                          ("PyTorch native CUDA kernels (cuDNN disabled)",) + _asym_note(problem))]

    def runner(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
        return _torch_runner(backend, problem, candidate)

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        return _flag_executor(key)


def _torch_runner(backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
    try:
        return TorchRunner(backend, problem, candidate)
    except CandidateUnsupported:
        raise
    except RuntimeError as exc:
        raise CandidateUnsupported(f"{candidate.key} failed: {' '.join(str(exc).split())[:300]}"
                                   ) from None


TORCH = TorchPaths()
TORCH_NATIVE = NativePaths()
