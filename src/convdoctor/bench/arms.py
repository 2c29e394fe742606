"""The bench's PyTorch and convdoctor arms: each a fresh worker process over every problem.

- PyTorch (`pytorch_arm`): PyTorch's heuristic path and its benchmark=True choice (on the CPU:
  PyTorch's default path, and the pick of a one-sample screen over the CPU candidates, which is
  what benchmark=True does), timed by the harness.
- convdoctor (`tune_arm`): every problem tuned from scratch (no database), to measure speed,
  stability and tuning cost; each problem's record keeps enough of the tuning result (`costliest`,
  `candidate_digest`, `failure_summary`) to tell afterwards why a candidate did or did not win.
`Restricted` offers a backend's chosen candidates only (also the referee's view of a backend).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engines.registry import TWIN_PREFIX, built_by_name
from ..problem import ConvProblem
from ..settings import Settings
from ..tune.backend import Candidate, ClockReading
from ..tune.result import TuneResult
from .resume import ArmCheckpoint

if TYPE_CHECKING:
    from ..tune.worker import WorkerBackend


def measure_only(settings: Settings) -> Settings:
    """The settings of the PyTorch and referee arms: they only time paths chosen elsewhere, so no
    knob refinement there (it would run cuDNN plans in those processes before PyTorch's paths are
    timed, and cost time)."""
    return settings.replace(cudnn_refine=False)


def start_worker(backend: str, timeout_s: float, settings: Settings) -> WorkerBackend:
    """A fresh worker process for one arm, running under `settings`."""
    from ..tune.worker import WorkerBackend

    return WorkerBackend(backend, timeout_s=timeout_s, settings=settings)


@dataclass(frozen=True)
class ArmSpec:
    """How every arm of one bench runs: the backend spec, the sampling budget per problem, the
    timeout per call into a worker process, and the settings the workers run under."""

    backend: str
    budget_s: float
    timeout_s: float
    settings: Settings

    def tune_worker(self) -> WorkerBackend:
        """A fresh worker process for a tuning arm."""
        return start_worker(self.backend, self.timeout_s, self.settings)

    def measure_worker(self) -> WorkerBackend:
        """A fresh worker process for a PyTorch or referee arm (`measure_only` settings)."""
        return start_worker(self.backend, self.timeout_s, measure_only(self.settings))


class Restricted:
    """A backend that offers only some candidates (the PyTorch arm times just PyTorch's paths)."""

    def __init__(self, inner: Any, keys: set[str]) -> None:
        self.inner = inner
        self.keys = keys
        self.name = inner.name

    def environment(self) -> dict[str, str]:
        return dict(self.inner.environment())

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        return self._restrict(self.inner.candidates(problem))

    def lean_candidates(self, problem: ConvProblem) -> list[Candidate]:
        """The same restriction over the inner backend's short list (the harness's fallback when
        the full listing failed); plans missing from it are built by name as above."""
        lean = getattr(self.inner, "lean_candidates", None)
        if lean is None:
            raise RuntimeError(f"backend {self.name!r} has no short candidate list")
        return self._restrict(lean(problem))

    def _restrict(self, base: list[Candidate]) -> list[Candidate]:
        from dataclasses import replace

        out = [c for c in base if c.key in self.keys]
        by = {c.key: c for c in base}
        # A cuDNN plan chosen by a tuning run need not be in this process's listing (knob
        # refinement picks its neighbours from quick timings, which differ run to run): it is
        # offered by name, and its runner builds it by name.
        for k in sorted(self.keys):
            if k in by or k.startswith(TWIN_PREFIX) or not built_by_name(k):
                continue
            by[k] = Candidate(k, self.name, 0, False, ("not in this process's listing: built by "
                                                       "its name",))
            out.append(by[k])
        # "twin:<key>": <key> again, in the process of PyTorch's heuristic path (GPU backend)
        for k in sorted(self.keys):
            inner = k[len(TWIN_PREFIX):]
            if k.startswith(TWIN_PREFIX) and (inner in by or built_by_name(inner)):
                c = by.get(inner) or Candidate(inner, self.name, 0, False,
                                               ("not in this process's listing: built by its "
                                                "name",))
                out.append(replace(c, key=k))
        return out

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> Any:
        return self.inner.prepare(problem, candidate)

    def clock(self) -> ClockReading | None:
        return self.inner.clock()


def pytorch_arm(problems: list[ConvProblem], spec: ArmSpec, bar: Any, fresh: Any = None,
                done: dict[str, Any] | None = None,
                on_problem: ArmCheckpoint | None = None) -> dict[str, Any]:
    """One fresh process (`fresh`, or a new measure-only worker): PyTorch's heuristic and
    benchmark=True choices, timed by the harness. `done`: this arm's results restored from an
    interrupted run (those problems are skipped); `on_problem` gets the arm's results so far
    after each problem."""
    from ..tune.harness import Harness, HarnessConfig, one_sample_select

    out: dict[str, Any] = dict(done or {})
    with fresh if fresh is not None else spec.measure_worker() as be:
        cpu = be.name == "cpu"
        env = be.environment()
        for p in problems:
            if p.key() in out:
                bar.update(1, "pytorch " + p.short() + " (resumed)")
                continue
            t0 = time.monotonic()
            if cpu:
                pick = one_sample_select(p, be)       # what benchmark=True does, on CPU paths
                bench_key = pick.key if pick else None
                keys = {"cpu:mkldnn-on"} | ({bench_key} if bench_key else set())
            else:
                bench_key = "torch:benchmark"
                keys = {"torch:heuristic", "torch:benchmark"}
            select_s = time.monotonic() - t0
            # PyTorch's paths are timed even where they miss our tolerance (what users get)
            cfg = HarnessConfig(budget_s=spec.budget_s, keep_keys=tuple(keys),
                                time_outside_tolerance=tuple(keys))
            r = Harness(Restricted(be, keys), cfg).run(p, env)
            heur = r.stats_for("cpu:mkldnn-on" if cpu else "torch:heuristic")
            bench = r.stats_for(bench_key) if bench_key else None
            out[p.key()] = {
                "heuristic_s": heur.median_s if heur and heur.status == "ok" else None,
                "benchmark_s": bench.median_s if bench and bench.status == "ok" else None,
                "outside_tolerance": outside_tolerance(r),
                "benchmark_pick": bench_key if cpu else "torch:benchmark",
                # GPU: benchmark=True searches when the path is built or on its first call
                # (prepare + first run); CPU: the one-sample screen.
                "benchmark_cost_s": select_s if cpu else (
                    (bench.prepare_s or 0.0) + (bench.first_run_s or 0.0) if bench else None),
            }
            if on_problem is not None:
                on_problem(out)
            bar.update(1, "pytorch " + p.short())
    return out


def tune_arm(problems: list[ConvProblem], spec: ArmSpec, bar: Any,
             done: dict[str, Any] | None = None,
             on_problem: ArmCheckpoint | None = None) -> dict[str, Any]:
    """One fresh process tunes every problem (`done`, `on_problem`: as for `pytorch_arm`;
    `_process_s` adds up the processes an interrupted arm ran in)."""
    from ..tune.harness import tune_problem

    out: dict[str, Any] = dict(done or {})
    before = float(out.get("_process_s") or 0.0)
    with spec.tune_worker() as be:
        t_start = time.monotonic()
        for p in problems:
            if p.key() in out:
                bar.update(1, "tune " + p.short() + " (resumed)")
                continue
            r = tune_problem(p, backend=be, db=None, budget_s=spec.budget_s, progress=bar,
                             reuse=False)
            measured = {s.candidate.key: s.median_s for s in r.candidates
                        if s.status == "ok" and s.median_s}
            out[p.key()] = {"winner": r.winner.key if r.winner else None,
                            "tuned_s": r.winner_time_s, "tuning_s": r.tuning_s,
                            "degraded": r.degraded, "short_list": r.short_list,
                            "listing": dict(r.listing), "costliest": costliest(r),
                            "measured": measured,
                            "notes": list(r.notes), "failures": failure_summary(r),
                            "candidates": candidate_digest(r)}
            out["_process_s"] = before + time.monotonic() - t_start
            if on_problem is not None:
                on_problem(out)
            bar.update(1, "tune " + p.short())
        out["_process_s"] = before + time.monotonic() - t_start
    return out


def outside_tolerance(result: TuneResult) -> dict[str, float]:
    """{key: norm-wise error} of the candidates timed although their check failed on the
    tolerance (`HarnessConfig.time_outside_tolerance`)."""
    return {s.candidate.key: s.correctness.max_rel_err for s in result.candidates
            if s.status == "ok" and s.correctness is not None and not s.correctness.ok}


def failure_summary(result: TuneResult, limit: int = 5) -> list[str]:
    """The most common reasons candidates failed or were disqualified ("3 x failed: ..."), so a
    bench row with no winner says why."""
    counts: dict[str, int] = {}
    for s in result.candidates:
        if s.status in ("failed", "disqualified"):
            why = f"{s.status}: {' '.join((s.reason or '').split())[:160]}"
            counts[why] = counts.get(why, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
    return [f"{n} x {why}" for why, n in top]


def costliest(result: TuneResult, n: int = 5) -> list[list[Any]]:
    """[key, status, host seconds] of the `n` candidates the harness spent most time on
    (`CandidateStats.cost_s`): on an H100, tuning fp16 depthwise layers took 40-50 s per run,
    ~25 s of it after the last listed candidate's first run; this says which candidates cost it."""
    top = sorted(result.candidates, key=lambda s: -s.cost_s)[:n]
    return [[s.candidate.key, s.status, round(s.cost_s, 3)] for s in top if s.cost_s > 0]


def candidate_digest(result: TuneResult, fastest: int = 8, screened: int = 3) -> list[list[Any]]:
    """[key, status, median us, reason] for the `fastest` measured candidates, the `screened`
    fastest screened-out ones (median of their screen samples: a plan that won one tuning run
    and is missing from another run's fastest may have been screened out there), and every
    candidate that was neither measured nor screened out (failed, disqualified, unsupported):
    enough to see afterwards why a candidate did not win, without every sample."""
    def row(s: Any) -> list[Any]:
        med = round(s.median_s * 1e6, 2) if s.median_s else None
        return [s.candidate.key, s.status, med, " ".join((s.reason or "").split())[:120]]

    def fastest_of(status: str, n: int) -> list[Any]:
        return sorted((s for s in result.candidates if s.status == status and s.median_s),
                      key=lambda s: s.median_s)[:n]

    other = [s for s in result.candidates if s.status not in ("ok", "screened-out")]
    return [row(s) for s in fastest_of("ok", fastest) + fastest_of("screened-out", screened)
            + other]


