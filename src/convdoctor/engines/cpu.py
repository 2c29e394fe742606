"""PyTorch's CPU convolution paths as an engine: `cpu:*` keys, timed with the host clock.

Candidates: oneDNN (mkldnn) on or off, in the user's layout; and the same two in the other memory
layout *with the conversions inside the timed interval* (input to that layout, output back),
because a model that keeps the user's layout pays them. `cpu:mkldnn-on` in the user's layout is
what PyTorch does by default, so it is the baseline. 1D problems have no channels-last form: layout
candidates are not offered there. Asymmetric padding runs as a pre-padded input with pad 0 for every
candidate alike (PyTorch pads symmetrically); the pad itself is outside the timed interval. There is
no cache flush on the CPU (it would cost more than small convolutions). A runner records the share
of its threads' CPU time each timed batch got (`CpuBackend.clock` turns it into a slowdown flag).
The runtime runs these keys through `flag_exec.FlagExec` (data/routes.json).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..measure.correctness import Correctness, compare_max, tolerance_cpu
from .base import Candidate, CandidateUnsupported, Engine
from .torch_ops import padded, reference_cpu, run_direction

if TYPE_CHECKING:
    from ..problem import ConvProblem

_KEY_RE = re.compile(r"cpu:mkldnn-(on|off)(?:\+(nchw|nhwc))?")


_TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


@contextlib.contextmanager
def _mkldnn_enabled(torch: Any, on: bool) -> Iterator[None]:
    """Switch oneDNN for the duration (torch.backends.mkldnn.flags also resets its TF32 flag, which
    warns on every call on CPU builds; the enabled switch alone is what the candidate means)."""
    get = getattr(torch._C, "_get_mkldnn_enabled", None)
    set_ = getattr(torch._C, "_set_mkldnn_enabled", None)
    if get is None or set_ is None:
        with torch.backends.mkldnn.flags(enabled=on):
            yield
        return
    old = get()
    set_(on)
    try:
        yield
    finally:
        set_(old)


MIN_JUDGED_S = 0.02




class CpuRunner:
    def __init__(self, problem: ConvProblem, candidate: Candidate, mkldnn: bool,
                 run_layout: str, backend: Any = None) -> None:
        import torch

        self.torch = torch
        self.backend = backend
        self.peak_share = 0.0
        self.problem = problem
        self.candidate = candidate
        self.mkldnn = mkldnn
        self.run_layout = run_layout
        self.padded, _ = padded(problem)
        self.dtype = getattr(torch, _TORCH_DTYPES[problem.dtype])
        self.gen = torch.Generator().manual_seed(1234)
        self.x, self.w, self.dy = self._tensors(self.padded)
        self._fn(self.x, self.w, self.dy)  # fails here (CandidateUnsupported) if it cannot run

    def _mf(self, ndim_tensor: int, layout: str) -> Any:
        t = self.torch
        if layout == "nchw":
            return t.contiguous_format
        return t.channels_last if ndim_tensor == 4 else t.channels_last_3d

    def _tensors(self, p: ConvProblem) -> tuple[Any, Any, Any]:
        t = self.torch
        mf_user = self._mf(len(p.x_shape()), self.problem.layout)

        def rnd(shape: tuple[int, ...]) -> Any:
            v = t.randn(shape, generator=self.gen, dtype=t.float32).to(self.dtype)
            return v.contiguous(memory_format=mf_user) if len(shape) > 3 else v

        x = rnd(p.x_shape())
        w = rnd(p.w_shape())
        dy = rnd(p.y_shape()) if p.direction != "fprop" else None
        return x, w, dy

    def _fn(self, x: Any, w: Any, dy: Any) -> Any:
        t = self.torch
        convert = self.run_layout != self.problem.layout
        with _mkldnn_enabled(t, self.mkldnn), t.no_grad():
            try:
                if convert:
                    mf = self._mf(x.dim(), self.run_layout)
                    x = x.contiguous(memory_format=mf)
                    w = w.contiguous(memory_format=mf)
                    dy = None if dy is None else dy.contiguous(memory_format=mf)
                out = run_direction(self.padded, x, w, dy)
                if convert:
                    out = out.contiguous(memory_format=self._mf(out.dim(), self.problem.layout))
            except (RuntimeError, NotImplementedError) as exc:
                raise CandidateUnsupported(f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                                           ) from None
        return out

    def warmup(self) -> None:
        self._fn(self.x, self.w, self.dy)

    def time(self, reps: int) -> list[float]:
        out = []
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(reps):
            t0 = time.perf_counter()
            self._fn(self.x, self.w, self.dy)
            out.append(time.perf_counter() - t0)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if self.backend is not None and wall >= MIN_JUDGED_S:
            # Relative to the best share this runner ever got: small kernels may not use every
            # thread, so an absolute share would flag them all the time. Process CPU time is
            # accounted in scheduler ticks, so batches shorter than MIN_JUDGED_S are not judged.
            share = min(1.0, cpu / (wall * max(1, self.torch.get_num_threads())))
            self.peak_share = max(self.peak_share, share)
            self.backend.last_share = share / self.peak_share if self.peak_share > 0 else None
        return out

    def check(self) -> Correctness:
        from dataclasses import replace

        # Fresh data; N capped at 2 so the float64 reference stays cheap (same kernels per image).
        small = replace(self.padded, n=min(self.padded.n, 2))
        x, w, dy = self._tensors(small)
        out = self._fn(x, w, dy)
        ref = reference_cpu(small, x, w, dy)
        # A CPU output is a fresh tensor (nothing to poison); compare_max fails any NaN/Inf in it.
        return compare_max(out, ref, tolerance_cpu(self.problem))

    def close(self) -> None:
        self.x = self.w = self.dy = None


class CpuPaths(Engine):
    name = "cpu"
    prefix = "cpu:"
    device = "cpu"
    summary = "PyTorch's CPU convolution with oneDNN on or off, in either memory layout"

    def offers(self, problem: ConvProblem, backend: Any, *, lean: bool = False
               ) -> list[Candidate]:
        import torch

        other = "nhwc" if problem.layout == "nchw" else "nchw"
        switches = (True, False) if torch.backends.mkldnn.is_available() else (False,)
        out = [Candidate(key=f"cpu:mkldnn-{'on' if on else 'off'}", backend="cpu")
               for on in switches]
        if problem.ndim >= 2:
            out += [Candidate(key=f"cpu:mkldnn-{'on' if on else 'off'}+{other}", backend="cpu",
                              notes=(f"runs in {other}; converts to it and back inside the "
                                     "timed interval",)) for on in switches]
        return out

    def runner(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
        m = _KEY_RE.fullmatch(candidate.key)
        if not m:
            raise CandidateUnsupported(f"unknown CPU candidate {candidate.key!r}")
        layout = m.group(2) or problem.layout
        if layout != problem.layout and problem.ndim < 2:
            raise CandidateUnsupported("1D convolutions have no channels-last layout")
        return CpuRunner(problem, candidate, mkldnn=m.group(1) == "on", run_layout=layout,
                         backend=backend)

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        from .flag_exec import flag_exec

        return flag_exec(key)


CPU = CpuPaths()
