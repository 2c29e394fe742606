"""Results of tuning one problem: every candidate's samples and derived statistics, and the winner.

A `CandidateStats` keeps its raw samples (seconds) and derives the median and a distribution-free
95% confidence interval of the median (binomial order statistics), in the spirit of
torch.utils.benchmark's `Measurement`. A `TuneResult` is what the database stores and returns.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..measure.stopping import median_ci, rel_ci_halfwidth
from ..problem import ConvProblem
from .backend import Candidate, Correctness

# ok: measured and correct; disqualified: wrong output; failed: crashed, hung or raised;
# screened-out: dropped by the early screen (too slow to matter); unsupported: the backend said no;
# not-measured: correct, but the device was slowed down (throttled, contended) before it was timed.
STATUSES = ("ok", "disqualified", "failed", "screened-out", "unsupported", "not-measured")

BASELINE_KEYS = ("torch:heuristic", "torch:benchmark")
CPU_BASELINE_KEYS = ("cpu:mkldnn-on",)   # PyTorch's default CPU path
BASELINE_LABELS = {"torch:heuristic": "PyTorch heuristic", "torch:benchmark": "PyTorch benchmark",
                   "cpu:mkldnn-on": "PyTorch default"}


@dataclass
class CandidateStats:
    candidate: Candidate
    status: str = "ok"
    reason: str = ""
    samples: list[float] = field(default_factory=list)
    screen_samples: list[float] = field(default_factory=list)
    warmup_runs: int = 0
    prepare_s: float | None = None  # building the runner (plans, allocations; benchmark=True's search
    first_run_s: float | None = None  # may fall in either)
    second_run_s: float | None = None  # wall time of the run after it (the hopeless check)
    discarded: int = 0            # samples thrown away because the clock showed a slowdown
    clock_mhz: float | None = None
    correctness: Correctness | None = None
    # what the harness ranked a finalist by: its time at a random buffer placement (placement score
    # relative to the leader x the leader's median); None where it was not ranked (screened out,
    # or a stored result that does not record it)
    rank_s: float | None = None
    # host seconds the harness spent on this candidate (preparing, first and second runs, check,
    # warm-up, screen and samples; pauses for a slowdown included): where tuning time goes
    cost_s: float = 0.0

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median_s(self) -> float | None:
        pool = self.samples or self.screen_samples
        return statistics.median(pool) if pool else None

    @property
    def ci_s(self) -> tuple[float, float] | None:
        if not self.samples:
            return None
        _, lo, hi = median_ci(self.samples)
        return (lo, hi)

    @property
    def rel_ci(self) -> float:
        return rel_ci_halfwidth(self.samples)

    def to_dict(self, *, with_samples: bool = True) -> dict[str, Any]:
        ci = self.ci_s
        d: dict[str, Any] = {
            "candidate": self.candidate.to_dict(), "status": self.status, "reason": self.reason,
            "median_s": self.median_s, "ci_low_s": ci[0] if ci else None,
            "ci_high_s": ci[1] if ci else None, "n": self.n, "warmup_runs": self.warmup_runs,
            "prepare_s": self.prepare_s, "first_run_s": self.first_run_s,
            "second_run_s": self.second_run_s, "discarded": self.discarded,
            "clock_mhz": self.clock_mhz, "rank_s": self.rank_s, "cost_s": round(self.cost_s, 4),
            "correctness": None if self.correctness is None else {
                "ok": self.correctness.ok, "max_rel_err": _finite(self.correctness.max_rel_err),
                "tolerance": self.correctness.tolerance, "detail": self.correctness.detail},
        }
        if with_samples:
            # 6 significant digits: far below any timing noise, and half the text to parse back.
            d["samples"] = [_sig6(v) for v in self.samples]
            d["screen_samples"] = [_sig6(v) for v in self.screen_samples]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CandidateStats:
        corr = d.get("correctness")
        return cls(
            candidate=Candidate.from_dict(d["candidate"]), status=str(d.get("status", "ok")),
            reason=str(d.get("reason", "")), samples=[float(v) for v in d.get("samples", [])],
            screen_samples=[float(v) for v in d.get("screen_samples", [])],
            warmup_runs=int(d.get("warmup_runs", 0)), first_run_s=d.get("first_run_s"),
            second_run_s=d.get("second_run_s"), prepare_s=d.get("prepare_s"),
            discarded=int(d.get("discarded", 0)), clock_mhz=d.get("clock_mhz"),
            rank_s=d.get("rank_s"), cost_s=float(d.get("cost_s") or 0.0),
            correctness=None if not corr else Correctness(
                ok=bool(corr["ok"]), max_rel_err=float(corr["max_rel_err"] if corr["max_rel_err"]
                                                       is not None else math.nan),
                tolerance=float(corr["tolerance"]), detail=str(corr.get("detail", ""))),
        )


def _sig6(v: float) -> float:
    return float(f"{v:.6g}")


def _finite(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


@dataclass
class TuneResult:
    problem: ConvProblem
    env: dict[str, str]
    backend: str
    winner: Candidate | None
    candidates: list[CandidateStats] = field(default_factory=list)
    tuning_s: float = 0.0
    created: float = 0.0           # unix time
    noise_band: float = 0.0        # relative: candidates within it of the best were ties
    notes: list[str] = field(default_factory=list)
    degraded: bool = False         # clock slowdown persisted: never stored as a valid choice
    short_list: bool = False       # tuned from the backend's short list (the full listing failed):
                                   # never stored, so the next run tunes the whole list again
    # what the backend did to list the candidates (JSON-safe; CUDA: the enumeration's counts, the
    # knob refinement's seeds with their quick times, plans tried/built/kept, seconds, notes)
    listing: dict[str, Any] = field(default_factory=dict)

    def stats_for(self, key: str) -> CandidateStats | None:
        for s in self.candidates:
            if s.candidate.key == key:
                return s
        return None

    @property
    def winner_stats(self) -> CandidateStats | None:
        return None if self.winner is None else self.stats_for(self.winner.key)

    @property
    def winner_time_s(self) -> float | None:
        ws = self.winner_stats
        return None if ws is None else ws.median_s

    @property
    def baselines(self) -> dict[str, float]:
        """Median seconds of the reference paths (PyTorch heuristic / benchmark, CPU default)."""
        out: dict[str, float] = {}
        for key in BASELINE_KEYS + CPU_BASELINE_KEYS:
            s = self.stats_for(key)
            if s is not None and s.status == "ok" and s.median_s is not None:
                out[key] = s.median_s
        return out

    def speedup_over(self, key: str) -> float | None:
        base = self.baselines.get(key)
        w = self.winner_time_s
        if base is None or not w:
            return None
        return base / w

    def to_dict(self, *, with_samples: bool = True) -> dict[str, Any]:
        return {
            "problem": self.problem.to_dict(), "problem_key": self.problem.key(),
            "env": dict(self.env), "backend": self.backend,
            "winner": None if self.winner is None else self.winner.to_dict(),
            "winner_time_s": self.winner_time_s, "baselines": self.baselines,
            "tuning_s": self.tuning_s, "created": self.created, "noise_band": self.noise_band,
            "notes": list(self.notes), "degraded": self.degraded, "short_list": self.short_list,
            "listing": dict(self.listing),
            "candidates": [s.to_dict(with_samples=with_samples) for s in self.candidates],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TuneResult:
        return cls(
            problem=ConvProblem.from_dict(d["problem"]), env={str(k): str(v) for k, v in
                                                              d.get("env", {}).items()},
            backend=str(d.get("backend", "")),
            winner=None if not d.get("winner") else Candidate.from_dict(d["winner"]),
            candidates=[CandidateStats.from_dict(c) for c in d.get("candidates", [])],
            tuning_s=float(d.get("tuning_s", 0.0)), created=float(d.get("created", 0.0)),
            noise_band=float(d.get("noise_band", 0.0)), notes=list(d.get("notes", [])),
            degraded=bool(d.get("degraded", False)),
            short_list=bool(d.get("short_list", False)),
            listing=dict(d["listing"]) if isinstance(d.get("listing"), dict) else {},
        )
