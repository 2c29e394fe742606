"""Tuning: find the fastest correct way to run each convolution, measured robustly.

`tune_problem(problem, backend="auto", db=None, ...)` runs the harness (`harness.py`) over a backend
(`backend.py` protocols; CPU in `cpu_backend.py`, CUDA in `gpu/`), in a worker subprocess
(`worker.py`), and returns a `TuneResult` (`result.py`) that the tuning database stores.
"""

from .backend import (
    Backend,
    Candidate,
    CandidateUnsupported,
    ClockReading,
    Correctness,
    Runner,
    StickyError,
    get_backend,
)
from .harness import Harness, HarnessConfig, one_sample_select, tune_problem
from .result import CandidateStats, TuneResult

__all__ = ["Backend", "Candidate", "CandidateStats", "CandidateUnsupported", "ClockReading",
           "Correctness", "Harness", "HarnessConfig", "Runner", "StickyError", "TuneResult",
           "get_backend", "one_sample_select", "tune_problem"]
