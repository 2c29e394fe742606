"""PyTorch's way of choosing, kept to compare selectors: `one_sample_select`."""

from __future__ import annotations

from ..problem import ConvProblem
from .backend import Backend, Candidate, CandidateUnsupported


def one_sample_select(problem: ConvProblem, backend: Backend, *, limit: int = 10,
                      warmup: int = 1) -> Candidate | None:
    """What cudnn.benchmark does: in candidate order, `warmup` untimed runs then ONE timed run each
    (the first `limit` that run), pick the fastest. Kept to compare selectors; never used to choose."""
    best: tuple[float, Candidate] | None = None
    ran = 0
    for cand in backend.candidates(problem):
        if ran >= limit:
            break
        try:
            runner = backend.prepare(problem, cand)
        except CandidateUnsupported:
            continue
        try:
            for _ in range(warmup):
                runner.warmup()
            t = runner.time(1)[0]
        except Exception:  # noqa: BLE001
            continue
        finally:
            runner.close()
        ran += 1
        if best is None or t < best[0]:
            best = (t, cand)
    return None if best is None else best[1]
