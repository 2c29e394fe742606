"""The CPU backend: PyTorch's CPU convolution paths as candidates, timed with the host clock.

Candidates: oneDNN (mkldnn) on or off, in the user's layout; and the same two in the other memory
layout *with the conversions inside the timed interval* (input to that layout, output back), because
a model that keeps the user's layout pays them. `cpu:mkldnn-on` in the user's layout is what PyTorch
does by default, so it is the baseline. 1D problems have no channels-last form: layout candidates are
not offered there. Asymmetric padding runs as a pre-padded input with pad 0 for every candidate alike
(PyTorch pads symmetrically); the pad itself is outside the timed interval.
There is no cache flush on the CPU (it would cost more than small convolutions).
The CPU's analogue of a GPU clock slowdown is contention: other processes taking the cores. Each
timed batch (of at least 20 ms: CPU time is accounted in scheduler ticks) records the share of its threads' CPU time the process got (process
CPU time / (wall time x threads)), relative to the best share that runner ever got (small kernels
do not use every thread); `clock()` reports a slowdown when it fell below CONVDOCTOR_CPU_MIN_SHARE
(default 0.6; 0 turns the check off), so the harness discards the batch, pauses and retries,
exactly as for a throttled GPU. (Contention present from a runner's very first batch is not seen.)
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import time
from collections.abc import Iterator
from typing import Any

from ..problem import ConvProblem
from .backend import Candidate, CandidateUnsupported, ClockReading, Correctness
from .correctness import compare, padded, reference, run_direction, tolerance_for

_TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _onednn_version(torch: Any) -> str:
    m = re.search(r"(?:MKL-DNN|oneDNN) v([\d.]+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


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


def min_share() -> float:
    try:
        return float(os.environ.get("CONVDOCTOR_CPU_MIN_SHARE", "0.6"))
    except ValueError:
        return 0.6


class CpuRunner:
    def __init__(self, problem: ConvProblem, candidate: Candidate, mkldnn: bool,
                 run_layout: str, backend: CpuBackend | None = None) -> None:
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
        ref = reference(small, x, w, dy)
        # A CPU output is a fresh tensor (nothing to poison); compare() fails any NaN/Inf in it.
        return compare(out, ref, tolerance_for(self.problem))

    def close(self) -> None:
        self.x = self.w = self.dy = None


class CpuBackend:
    name = "cpu"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.last_share: float | None = None   # CPU share of the last timed batch

    def environment(self) -> dict[str, str]:
        t = self.torch
        return {"backend": "cpu", "cpu": _cpu_model(), "cpu_count": str(os.cpu_count() or 0),
                "threads": str(t.get_num_threads()), "torch": t.__version__.split("+")[0],
                "mkldnn": _onednn_version(t) if t.backends.mkldnn.is_available() else "none"}

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        other = "nhwc" if problem.layout == "nchw" else "nchw"
        mk = self.torch.backends.mkldnn.is_available()
        out: list[Candidate] = []
        for on in ((True, False) if mk else (False,)):
            base = f"cpu:mkldnn-{'on' if on else 'off'}"
            out.append(Candidate(key=base, backend="cpu"))
        if problem.ndim >= 2:
            for on in ((True, False) if mk else (False,)):
                base = f"cpu:mkldnn-{'on' if on else 'off'}"
                out.append(Candidate(key=f"{base}+{other}", backend="cpu",
                                     notes=(f"runs in {other}; converts to it and back inside the "
                                            "timed interval",)))
        return out

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> CpuRunner:
        key = candidate.key
        m = re.fullmatch(r"cpu:mkldnn-(on|off)(?:\+(nchw|nhwc))?", key)
        if not m:
            raise CandidateUnsupported(f"unknown CPU candidate {key!r}")
        layout = m.group(2) or problem.layout
        if layout != problem.layout and problem.ndim < 2:
            raise CandidateUnsupported("1D convolutions have no channels-last layout")
        return CpuRunner(problem, candidate, mkldnn=m.group(1) == "on", run_layout=layout,
                         backend=self)

    def clock(self) -> ClockReading | None:
        """No clock to read; `slowdown` is set when the last batch was starved of CPU time."""
        share, self.last_share = self.last_share, None
        threshold = min_share()
        slow = share is not None and threshold > 0 and share < threshold
        return ClockReading(sm_clock_mhz=None, max_sm_clock_mhz=None, reasons=0, slowdown=slow)

    def peaks(self) -> dict[str, Any] | None:
        """A simple measured roofline: best of 5 fp32 1024^3 matmuls, best of 5 64 MiB copies.
        None when other processes took the CPU meanwhile (a peak measured then is too low and
        would make every % of roofline meaningless)."""
        t = self.torch
        shares: list[float] = []

        def best(fn: Any) -> float:
            fn()
            times = []
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(5):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            wall = time.perf_counter() - w0
            shares.append((time.process_time() - c0) / (wall * max(1, t.get_num_threads())))
            return min(times)

        n = 1024
        a, b = t.randn(n, n), t.randn(n, n)
        fl = 2.0 * n ** 3 / best(lambda: t.mm(a, b))
        src = t.empty(64 << 20, dtype=t.uint8)
        dst = t.empty_like(src)
        bw = 2.0 * src.numel() / best(lambda: dst.copy_(src))
        threshold = min_share()
        if threshold > 0 and shares and shares[0] < threshold:
            return None
        return {"device": _cpu_model(), "flops": {"float32/tf32": fl, "float32/strict": fl},
                "bandwidth": bw, "method": "fp32 matmul 1024^3 best of 5; copy 64 MiB best of 5"}
