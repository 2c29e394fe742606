"""The CPU backend: the CPU engine's candidates (`convdoctor.engines.cpu`), timed with the host clock.

The CPU's analogue of a GPU clock slowdown is contention: other processes taking the cores. Each
timed batch (of at least 20 ms: CPU time is accounted in scheduler ticks) records the share of its
threads' CPU time the process got (process CPU time / (wall time x threads)), relative to the best
share that runner ever got (small kernels do not use every thread); `clock()` reports a slowdown
when it fell below the `cpu_min_share` setting (default 0.6; 0 turns the check off), so the harness
discards the batch, pauses and retries, exactly as for a throttled GPU. (Contention present from a
runner's very first batch is not seen.)
"""

from __future__ import annotations

import os
import platform
import re
import time
from typing import Any

from ..engines.base import Candidate, CandidateUnsupported
from ..engines.registry import engine_of, listed_by
from ..measure.clock import ClockReading
from ..problem import ConvProblem
from ..settings import Settings


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


class CpuBackend:
    name = "cpu"

    def __init__(self, settings: Settings | None = None) -> None:
        import torch

        from ..settings import current

        self.torch = torch
        self.settings = settings if settings is not None else current()
        self.last_share: float | None = None   # CPU share of the last timed batch

    def environment(self) -> dict[str, str]:
        t = self.torch
        return {"backend": "cpu", "cpu": _cpu_model(), "cpu_count": str(os.cpu_count() or 0),
                "threads": str(t.get_num_threads()), "torch": t.__version__.split("+")[0],
                "mkldnn": _onednn_version(t) if t.backends.mkldnn.is_available() else "none",
                "settings": self.settings.result_key()}

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        return [c for e in listed_by("cpu") for c in e.offers(problem, self)]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> Any:
        engine = engine_of(candidate.key)
        if engine is None or engine.device != "cpu":
            raise CandidateUnsupported(f"unknown CPU candidate {candidate.key!r}")
        return engine.runner(self, problem, candidate)

    def clock(self) -> ClockReading | None:
        """No clock to read; `slowdown` is set when the last batch was starved of CPU time."""
        share, self.last_share = self.last_share, None
        threshold = self.settings.cpu_min_share
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
        threshold = self.settings.cpu_min_share
        if threshold > 0 and shares and shares[0] < threshold:
            return None
        return {"device": _cpu_model(), "flops": {"float32/tf32": fl, "float32/strict": fl},
                "bandwidth": bw, "method": "fp32 matmul 1024^3 best of 5; copy 64 MiB best of 5"}
