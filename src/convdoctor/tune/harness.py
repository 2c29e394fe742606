"""The measurement and selection harness: backend-independent, so every backend is measured alike.

Per problem: build each candidate's runner, check it against float64 (wrong -> disqualified), warm it
up until its times stop falling (lazy loading, first-run effects), screen it with a few samples and
drop hopeless ones, then sample the finalists round-robin (so drift and throttling hit all alike)
until each contender's median has a 95% CI within `target_rel_ci` or the time cap is hit. Samples
taken while the clock reports a slowdown are discarded, with a pause and a retry. Candidates whose
medians lie within the noise band of the best are ties, broken by smaller workspace, then
determinism, then the candidate key, so two runs agree.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..problem import ConvProblem
from .backend import Backend, Candidate, CandidateUnsupported, ClockReading, Runner
from .result import BASELINE_KEYS, CPU_BASELINE_KEYS, CandidateStats, TuneResult, median_ci


@dataclass
class HarnessConfig:
    """The knobs of one tuning run. Times are seconds."""

    budget_s: float = 20.0             # cap on the adaptive sampling phase of one problem
    target_rel_ci: float = 0.01        # stop when the median's 95% CI half-width is within this
    min_samples: int = 10              # per finalist before the stopping rule applies
    max_samples: int = 300             # per finalist
    batch: int = 5                     # samples per finalist per round-robin round
    warmup_reps: int = 3               # samples per warm-up step
    warmup_settle: float = 0.05        # warm: a step's median no more than this below the best
    warmup_max_steps: int = 12
    screen_reps: int = 5
    screen_margin: float = 0.30        # hopeless: screen median > (1 + margin) x best screen median
    max_finalists: int = 6
    tie_floor: float = 0.01            # the noise band is never narrower than this
    throttle_pause_s: float = 0.5
    max_throttle_retries: int = 6      # in a row, per finalist, before the run is marked degraded
    check: bool = True
    keep_keys: tuple[str, ...] = BASELINE_KEYS + CPU_BASELINE_KEYS   # never screened out
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


Note = Callable[[str], None]


def _noop(_: str) -> None:
    return None


@dataclass
class _Live:
    stats: CandidateStats
    runner: Runner | None = None
    clocks: list[float] = field(default_factory=list)
    throttled_in_a_row: int = 0
    active: bool = True


def _slow(reading: ClockReading | None) -> bool:
    return bool(reading is not None and reading.slowdown)


class Harness:
    def __init__(self, backend: Backend, config: HarnessConfig | None = None,
                 note: Note | None = None) -> None:
        self.backend = backend
        self.cfg = config or HarnessConfig()
        self.note = note or _noop
        self.degraded = False

    # ------------------------------------------------------------------ measuring one batch
    def _timed(self, live: _Live, reps: int) -> list[float] | None:
        """`reps` samples taken under a normal clock, or None (discarded: slowdown, or failure)."""
        assert live.runner is not None
        while True:
            before = self.backend.clock()
            try:
                samples = [float(v) for v in live.runner.time(reps)]
            except Exception as exc:  # noqa: BLE001 - a candidate failing costs only itself
                self._fail(live, f"timing failed: {type(exc).__name__}: {exc}")
                return None
            after = self.backend.clock()
            if not samples or any(not (v > 0) for v in samples):
                self._fail(live, f"timing returned invalid samples {samples[:3]}")
                return None
            if _slow(before) or _slow(after):
                live.stats.discarded += len(samples)
                live.throttled_in_a_row += 1
                if live.throttled_in_a_row > self.cfg.max_throttle_retries:
                    self.degraded = True
                    return None
                self.note(f"clock slowdown: {len(samples)} samples discarded, pausing")
                self.cfg.sleep(self.cfg.throttle_pause_s)
                continue
            live.throttled_in_a_row = 0
            for r in (before, after):
                if r is not None and r.sm_clock_mhz is not None:
                    live.clocks.append(float(r.sm_clock_mhz))
            return samples

    def _fail(self, live: _Live, reason: str) -> None:
        live.stats.status = "failed"
        live.stats.reason = reason
        live.active = False
        self._close(live)

    def _close(self, live: _Live) -> None:
        if live.runner is not None:
            try:
                live.runner.close()
            except Exception:  # noqa: BLE001
                pass
            live.runner = None

    # ------------------------------------------------------------------ phases
    def _prepare_and_check(self, problem: ConvProblem, live: _Live) -> None:
        cand = live.stats.candidate
        if problem.deterministic and not cand.deterministic:
            live.stats.status, live.stats.reason = "unsupported", "not deterministic"
            live.active = False
            return
        try:
            live.runner = self.backend.prepare(problem, cand)
        except CandidateUnsupported as exc:
            live.stats.status, live.stats.reason = "unsupported", str(exc) or "unsupported"
            live.active = False
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(live, f"prepare failed: {type(exc).__name__}: {exc}")
            return
        if not self.cfg.check:
            return
        try:
            corr = live.runner.check()
        except CandidateUnsupported as exc:
            live.stats.status, live.stats.reason = "unsupported", str(exc) or "unsupported"
            live.active = False
            self._close(live)
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(live, f"correctness check failed: {type(exc).__name__}: {exc}")
            return
        live.stats.correctness = corr
        if not corr.ok:
            live.stats.status = "disqualified"
            live.stats.reason = (f"wrong output: max rel err {corr.max_rel_err:.3g} > tolerance "
                                 f"{corr.tolerance:.3g}" + (f" ({corr.detail})" if corr.detail
                                                            else ""))
            live.active = False
            self._close(live)

    def _warmup(self, live: _Live) -> None:
        """Run until a step is no faster than the best step so far (by `warmup_settle`)."""
        assert live.runner is not None
        t0 = time.perf_counter()
        try:
            live.runner.warmup()
        except Exception as exc:  # noqa: BLE001
            self._fail(live, f"first run failed: {type(exc).__name__}: {exc}")
            return
        live.stats.first_run_s = time.perf_counter() - t0
        live.stats.warmup_runs = 1
        best: float | None = None
        for _ in range(self.cfg.warmup_max_steps):
            s = self._timed(live, self.cfg.warmup_reps)
            if s is None:
                return
            live.stats.warmup_runs += len(s)
            med = statistics.median(s)
            if best is not None and med >= best * (1.0 - self.cfg.warmup_settle):
                live.stats.screen_samples = []
                return
            best = med if best is None else min(best, med)

    def _screen(self, lives: list[_Live]) -> list[_Live]:
        for live in lives:
            if live.active:
                s = self._timed(live, self.cfg.screen_reps)
                if s is not None:
                    live.stats.screen_samples = s
        ok = [lv for lv in lives if lv.active and lv.stats.screen_samples]
        if not ok:
            return []
        ok.sort(key=lambda lv: statistics.median(lv.stats.screen_samples))
        best = statistics.median(ok[0].stats.screen_samples)
        finalists: list[_Live] = []
        for lv in ok:
            med = statistics.median(lv.stats.screen_samples)
            keep = lv.stats.candidate.key in self.cfg.keep_keys
            contender = (med <= best * (1.0 + self.cfg.screen_margin)
                         and sum(1 for f in finalists if f.stats.candidate.key not in
                                 self.cfg.keep_keys) < self.cfg.max_finalists)
            if keep or contender:
                finalists.append(lv)
            else:
                lv.stats.status = "screened-out"
                lv.stats.reason = f"screen median {med / best:.2f}x the best's"
                lv.active = False
                self._close(lv)
        return finalists

    def _sample(self, finalists: list[_Live]) -> None:
        cfg = self.cfg
        deadline = cfg.now() + cfg.budget_s
        rnd = 0
        active = list(finalists)
        while active and not self.degraded:
            order = active[rnd % len(active):] + active[:rnd % len(active)]
            for lv in order:
                if not lv.active:
                    continue
                s = self._timed(lv, cfg.batch)
                if s is not None:
                    lv.stats.samples.extend(s)
                if self.degraded:
                    break
            rnd += 1
            active = [lv for lv in active if lv.active and lv.stats.n < cfg.max_samples]
            if not active:
                break
            # Contenders: every finalist whose CI reaches the best's CI (plus the tie floor).
            meds = {id(lv): median_ci(lv.stats.samples) for lv in active if lv.stats.samples}
            if not meds:
                break
            best = min(meds.values(), key=lambda m: m[0])
            contenders = []
            for lv in active:
                m = meds.get(id(lv))
                if m is None:
                    continue
                clearly_slower = (lv.stats.n >= cfg.min_samples and best[0] > 0
                                  and m[1] > best[2] * (1.0 + cfg.tie_floor))
                if not clearly_slower:
                    contenders.append(lv)
            converged = all(lv.stats.n >= cfg.min_samples and lv.stats.rel_ci <= cfg.target_rel_ci
                            for lv in contenders)
            if converged:
                break
            if cfg.now() >= deadline:
                self.note("time cap reached before every median converged")
                break
            # Candidates clearly slower than the best stop sampling once they have enough samples.
            active = [lv for lv in active if lv in contenders or lv.stats.n < cfg.min_samples]

    # ------------------------------------------------------------------ selection
    def _select(self, finalists: list[_Live]) -> tuple[Candidate | None, float]:
        measured = [lv for lv in finalists if lv.stats.status == "ok" and lv.stats.samples]
        if not measured:
            return None, 0.0
        best = min(measured, key=lambda lv: lv.stats.median_s or float("inf"))
        best_med = best.stats.median_s or 0.0
        band = max(self.cfg.tie_floor, best.stats.rel_ci if best.stats.n >= 3 else 0.0)
        ties = []
        for lv in measured:
            med = lv.stats.median_s or float("inf")
            lv_band = max(band, lv.stats.rel_ci if lv.stats.n >= 3 else 0.0)
            if med <= best_med * (1.0 + lv_band):
                ties.append(lv)
        ties.sort(key=lambda lv: (lv.stats.candidate.workspace_bytes,
                                  not lv.stats.candidate.deterministic, lv.stats.candidate.key))
        return ties[0].stats.candidate, band

    # ------------------------------------------------------------------ entry point
    def run(self, problem: ConvProblem, env: dict[str, str]) -> TuneResult:
        t0 = time.monotonic()
        cands = self.backend.candidates(problem)
        seen: set[str] = set()
        lives: list[_Live] = []
        for c in cands:
            if c.key in seen:
                continue
            seen.add(c.key)
            lives.append(_Live(CandidateStats(candidate=c)))
        result = TuneResult(problem=problem, env=dict(env), backend=self.backend.name,
                            winner=None, candidates=[lv.stats for lv in lives],
                            created=time.time())
        try:
            for lv in lives:
                self.note(f"check {lv.stats.candidate.key}")
                self._prepare_and_check(problem, lv)
                if lv.active:
                    self.note(f"warm up {lv.stats.candidate.key}")
                    self._warmup(lv)
            finalists = self._screen(lives)
            self.note(f"sampling {len(finalists)} finalists")
            self._sample(finalists)
            for lv in lives:
                if lv.clocks:
                    lv.stats.clock_mhz = statistics.median(lv.clocks)
            winner, band = self._select(finalists)
            result.winner, result.noise_band = winner, band
            if self.degraded:
                result.degraded = True
                result.notes.append("the clock reported a slowdown that did not clear: result not "
                                    "trusted")
            if winner is None:
                result.notes.append("no candidate ran correctly")
            for lv in lives:
                if lv.stats.status == "ok" and not lv.stats.samples and lv.stats.screen_samples:
                    pass  # screened candidates keep their screen samples for the record
        finally:
            for lv in lives:
                self._close(lv)
            result.tuning_s = time.monotonic() - t0
        return result


# ---------------------------------------------------------------------- PyTorch's way, for comparison
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


# ---------------------------------------------------------------------- the public entry point
def tune_problem(problem: ConvProblem, *, backend: str | Backend = "auto", db: Any = None,
                 budget_s: float = 20.0, progress: Any = None, isolate: bool = True,
                 config: HarnessConfig | None = None, reuse: bool = True,
                 timeout_s: float = 60.0) -> TuneResult:
    """Tune one problem and return every candidate's statistics and the winner.

    backend: "auto" | "cpu" | "cuda" or a Backend object. With a name and `isolate` (default), the
    candidates run in a worker subprocess (`convdoctor.tune.worker`), so a crash or a hang (over
    `timeout_s` per call) costs only that candidate. db: a `convdoctor.db.TuningDB`; a valid stored
    result is returned when `reuse`, and a new result is stored. progress: a `Progress`; notes go to it.
    """
    from .worker import WorkerBackend

    cfg = replace(config) if config is not None else HarnessConfig()
    cfg.budget_s = budget_s

    def note(text: str) -> None:
        if progress is not None:
            progress.update(0, text)

    owned = None
    if isinstance(backend, str):
        if isolate:
            owned = WorkerBackend(backend, timeout_s=timeout_s)
            be: Backend = owned
        else:
            from .backend import get_backend

            be = get_backend(backend)
    else:
        be = backend
    try:
        env = environment_of(be)
        if db is not None and reuse:
            hit = db.get(problem, env)
            if hit is not None:
                hit.notes.append("loaded from the tuning database")
                return hit
        result = Harness(be, cfg, note).run(problem, env)
        if db is not None and result.winner is not None and not result.degraded:
            db.put(result)
        return result
    finally:
        if owned is not None:
            owned.shutdown()


def environment_of(backend: Backend) -> dict[str, str]:
    env = {str(k): str(v) for k, v in backend.environment().items()}
    env.setdefault("backend", backend.name)
    return env


def tune_many(problems: Sequence[ConvProblem], **kwargs: Any) -> list[TuneResult]:
    return [tune_problem(p, **kwargs) for p in problems]
