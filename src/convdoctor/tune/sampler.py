"""The sampler: measures every candidate of one problem the same way, over any backend.

Per problem: build each candidate's runner and time its first run; a first run of over a second,
or else a second run, drops a hopeless candidate (far slower than the fastest seen) before
anything else, and the later problems of its class in the run skip it (`tune.hopeless`); check
the output against float64 (wrong -> disqualified); warm up until a step's times stop falling
(`Settled`: lazy loading, first-run effects); screen with a few paired rounds and drop the candidates far behind;
let the finalists settle (a cuDNN plan's workspace guard); then sample the finalists round-robin,
every finalist once per round on the round's buffer placement (so drift, throttling and placement
hit all alike), until the stopping rule (`HarnessConfig.stopping()`,
`convdoctor.measure.stopping`) says enough. Samples taken while the clock reports a slowdown are
discarded, with a pause and a retry; a slowdown that does not clear marks the result degraded.
The choice among the finalists is `convdoctor.tune.select.select_winner`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engines.listing import listing_record
from ..measure.stopping import Settled
from ..problem import ConvProblem
from .backend import Backend, Candidate, CandidateUnsupported, ClockReading, Runner
from .config import HarnessConfig
from .result import CandidateStats, TuneResult
from .select import Rounds, leader, passed, ratios, select_winner

Note = Callable[[str], None]


def _noop(_: str) -> None:
    return None


@dataclass
class _Live:
    """A candidate while it is measured: its statistics and its open runner."""

    stats: CandidateStats
    runner: Runner | None = None
    clocks: list[float] = field(default_factory=list)
    throttled_in_a_row: int = 0
    active: bool = True


def _passed(lv: _Live) -> bool:
    return passed(lv.stats)


def _slow(reading: ClockReading | None) -> bool:
    return bool(reading is not None and reading.slowdown)


class Harness:
    """Measures the candidates of one problem and chooses one (`run`)."""

    def __init__(self, backend: Backend, config: HarnessConfig | None = None,
                 note: Note | None = None) -> None:
        self.backend = backend
        self.cfg = config or HarnessConfig()
        self.note = note or _noop
        self.degraded = False
        self._rounds: Rounds = []

    def _trace(self, event: dict[str, Any]) -> None:
        if self.cfg.trace is not None:
            try:
                self.cfg.trace(event)
            except Exception:  # noqa: BLE001 - a diagnostic sink must never cost the tuning run
                pass

    def _us(self, row: dict[int, float], lives: Sequence[_Live]) -> dict[str, float]:
        by_id = {id(lv): lv.stats.candidate.key for lv in lives}
        return {by_id[i]: round(v * 1e6, 2) for i, v in row.items() if i in by_id}

    # ------------------------------------------------------------------ measuring one batch
    def _timed(self, live: _Live, reps: int, slot: int | None = None) -> list[float] | None:
        """`reps` samples taken under a normal clock, or None (discarded: slowdown, or failure).

        `slot`: the round number; a runner that keeps several buffer placements (`slotted`)
        times on placement `slot` modulo its count, so all candidates of one round share one
        placement (paired rounds) and a candidate's samples cover every placement."""
        t0 = self.cfg.now()
        try:
            return self._timed_inner(live, reps, slot)
        finally:
            live.stats.cost_s += self.cfg.now() - t0

    def _timed_inner(self, live: _Live, reps: int, slot: int | None) -> list[float] | None:
        assert live.runner is not None
        runner = live.runner
        slotted = slot is not None and bool(getattr(runner, "slotted", False))
        while True:
            if self.degraded:
                return None
            before = self.backend.clock()
            try:
                raw = runner.time(reps, slot=slot) if slotted else runner.time(reps)  # type: ignore[call-arg]
                samples = [float(v) for v in raw]
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

    def _unsupported(self, live: _Live, exc: CandidateUnsupported) -> None:
        live.stats.status = "unsupported"
        live.stats.reason = str(exc) or "unsupported"
        live.active = False
        self._close(live)

    def _fail(self, live: _Live, reason: str) -> None:
        live.stats.status = "failed"
        live.stats.reason = reason
        self._trace({"phase": "failed", "key": live.stats.candidate.key, "reason": reason})
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
    def _prepare_first(self, problem: ConvProblem, live: _Live) -> None:
        """Prepare the runner and time its very first run."""
        cand = live.stats.candidate
        if problem.deterministic and not cand.deterministic:
            live.stats.status, live.stats.reason = "unsupported", "not deterministic"
            live.active = False
            return
        t_prep = time.perf_counter()
        try:
            live.runner = self.backend.prepare(problem, cand)
            live.stats.prepare_s = time.perf_counter() - t_prep
        except CandidateUnsupported as exc:
            self._unsupported(live, exc)
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(live, f"prepare failed: {type(exc).__name__}: {exc}")
            return
        # The very first run (lazy module loading, plan compilation) is timed on its own, on the
        # config's clock like the second run it is compared with.
        t0 = self.cfg.now()
        try:
            live.runner.warmup()
        except CandidateUnsupported as exc:
            self._unsupported(live, exc)
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(live, f"first run failed: {type(exc).__name__}: {exc}")
            return
        live.stats.first_run_s = self.cfg.now() - t0
        live.stats.warmup_runs = 1

    def _check(self, live: _Live) -> None:
        """The correctness check (fresh data, poisoned output, float64 reference)."""
        assert live.runner is not None
        if not self.cfg.check:
            return
        try:
            corr = live.runner.check()
        except CandidateUnsupported as exc:
            self._unsupported(live, exc)
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(live, f"correctness check failed: {type(exc).__name__}: {exc}")
            return
        live.stats.correctness = corr
        if (not corr.ok and live.stats.candidate.key in self.cfg.time_outside_tolerance
                and math.isfinite(corr.max_rel_err)):
            self._trace({"phase": "outside-tolerance", "key": live.stats.candidate.key,
                         "max_rel_err": corr.max_rel_err, "tolerance": corr.tolerance})
            return
        if not corr.ok:
            live.stats.status = "disqualified"
            live.stats.reason = (f"wrong output: max rel err {corr.max_rel_err:.3g} > tolerance "
                                 f"{corr.tolerance:.3g}" + (f" ({corr.detail})" if corr.detail
                                                            else ""))
            live.active = False
            self._close(live)

    def _second_run(self, live: _Live) -> float | None:
        """One more untimed run, its wall time (host clock, including the wait): how slow the
        candidate is once its first-run effects are over. None if it failed (then marked)."""
        assert live.runner is not None
        t0 = self.cfg.now()
        try:
            live.runner.warmup()
        except CandidateUnsupported as exc:
            self._unsupported(live, exc)
            return None
        except Exception as exc:  # noqa: BLE001
            self._fail(live, f"second run failed: {type(exc).__name__}: {exc}")
            return None
        live.stats.warmup_runs += 1
        live.stats.second_run_s = self.cfg.now() - t0
        return live.stats.second_run_s

    def _hopeless(self, problem: ConvProblem, live: _Live, run_s: float, best: float | None,
                  which: str = "second") -> bool:
        """Drop a candidate far slower than the fastest seen (`HarnessConfig.hopeless_abs_s`),
        by its `which` run's time, and remember it for the problem's class."""
        cfg = self.cfg
        if (best is None or best <= 0 or run_s <= cfg.hopeless_abs_s
                or run_s <= cfg.hopeless_factor * best
                or live.stats.candidate.key in cfg.keep_keys):
            return False
        live.stats.status = "screened-out"
        live.stats.reason = (f"hopeless: its {which} run took {run_s * 1e3:.1f} ms, "
                             f"{run_s / best:.0f}x the fastest so far ({best * 1e3:.2f} ms)")
        self._trace({"phase": "hopeless", "key": live.stats.candidate.key,
                     f"{which}_run_ms": round(run_s * 1e3, 3), "best_ms": round(best * 1e3, 3)})
        if cfg.hopeless_memory is not None:
            cfg.hopeless_memory.remember(problem, live.stats.candidate.key, run_s / best,
                                         cfg.recall_factor)
        live.active = False
        self._close(live)
        return True

    def _recalled(self, problem: ConvProblem, live: _Live) -> bool:
        """Screen out, before its first run, a candidate found hopeless on a problem of the same
        class earlier in this run (`HarnessConfig.hopeless_memory`)."""
        memory, key = self.cfg.hopeless_memory, live.stats.candidate.key
        why = memory.recall(problem, key) if memory is not None else None
        if why is None or key in self.cfg.keep_keys:
            return False
        live.stats.status = "screened-out"
        live.stats.reason = f"hopeless on a problem of this class earlier in this run ({why})"
        live.active = False
        return True

    def _warmup(self, live: _Live) -> None:
        """Run in steps until one is no faster than the best step so far (`Settled` by
        `warmup_settle`), at most `warmup_max_steps` steps and `warmup_cap_s` seconds."""
        assert live.runner is not None
        settled = Settled(tolerance=self.cfg.warmup_settle)
        best: float | None = None
        t_end = self.cfg.now() + self.cfg.warmup_cap_s
        for _ in range(self.cfg.warmup_max_steps):
            if self.cfg.now() > t_end:
                return
            s = self._timed(live, self.cfg.warmup_reps)
            if s is None:
                return
            live.stats.warmup_runs += len(s)
            med = statistics.median(s)
            if settled.enough(best, med):
                return
            best = med if best is None else min(best, med)

    def _rotated(self, lives: list[_Live], rnd: int) -> list[_Live]:
        k = rnd % len(lives) if lives else 0
        return lives[k:] + lives[:k]


    def _screen(self, lives: list[_Live]) -> list[_Live]:
        """A few rounds, one sample per candidate per round (rotating order), scored by the
        per-round ratio to the fastest, so drift during the screen cannot favour an early one."""
        cands = [lv for lv in lives if lv.active]
        rounds: Rounds = []
        for rnd in range(self.cfg.screen_reps):
            row: dict[int, float] = {}
            for lv in self._rotated(cands, rnd):
                if not lv.active:
                    continue
                s = self._timed(lv, 1, slot=rnd)
                if s is not None:
                    lv.stats.screen_samples.extend(s)
                    row[id(lv)] = s[0]
                if self.degraded:
                    break
            rounds.append(row)
            self._trace({"phase": "screen", "round": rnd, "us": self._us(row, cands)})
            if self.degraded:
                break
        ok = [lv for lv in cands if lv.active and lv.stats.screen_samples]
        if not ok:
            return []
        # the reference is a candidate that may be chosen: a faster one timed outside the
        # tolerance must not screen out the rest
        ref = min([lv for lv in ok if _passed(lv)] or ok,
                  key=lambda lv: statistics.median(lv.stats.screen_samples))
        scored: list[tuple[float, float, _Live]] = []
        for lv in ok:
            paired = ratios(rounds, lv, ref)
            if paired:
                scored.append((statistics.median(paired), min(paired), lv))
            else:
                m = statistics.median(lv.stats.screen_samples)
                r = m / statistics.median(ref.stats.screen_samples)
                scored.append((r, r, lv))
        scored.sort(key=lambda t: t[0])
        finalists: list[_Live] = []
        n_contenders = 0
        for score, best_ratio, lv in scored:
            keep = lv.stats.candidate.key in self.cfg.keep_keys
            # Hopeless only if even its best round is far behind the fastest: one burst of
            # noise during a candidate's screen must not drop it.
            contender = (best_ratio <= 1.0 + self.cfg.screen_margin
                         and n_contenders < self.cfg.max_finalists)
            # one timed outside the tolerance takes no finalist's place from a choosable one
            if contender and _passed(lv):
                n_contenders += 1
            self._trace({"phase": "screen-verdict", "key": lv.stats.candidate.key,
                         "score": round(score, 4), "best_round": round(best_ratio, 4),
                         "kept": bool(keep or contender), "baseline": keep})
            if keep or contender:
                finalists.append(lv)
            else:
                lv.stats.status = "screened-out"
                lv.stats.reason = (f"screen: {score:.2f}x the fastest (best round "
                                   f"{best_ratio:.2f}x)")
                lv.active = False
                self._close(lv)
        return finalists

    def _settle(self, finalists: list[_Live]) -> None:
        """Before sampling, a finalist's runner may settle what the runtime would settle too (a
        cuDNN plan runner: its workspace guard, `convdoctor.measure.wsguard`). Only finalists:
        the guard times the plan several times, and the screen's best-round rule already keeps a
        plan that one slow placement would slow."""
        for lv in finalists:
            settle = getattr(lv.runner, "settle", None)
            if not lv.active or not callable(settle):
                continue
            t0 = self.cfg.now()
            try:
                settle()
            except CandidateUnsupported as exc:
                self._unsupported(lv, exc)
            except Exception as exc:  # noqa: BLE001
                self._fail(lv, f"settle failed: {type(exc).__name__}: {exc}")
            lv.stats.cost_s += self.cfg.now() - t0

    def _sample(self, finalists: list[_Live]) -> None:
        """Round-robin batches until the stopping rule says enough (`HarnessConfig.stopping()`):
        the leader's median and every contender's paired ratio to it known to `target_rel_ci`,
        or the time budget spent. A contender that can no longer tie, or that has its
        `max_samples`, is sampled no more."""
        cfg = self.cfg
        rule = cfg.stopping()
        started = cfg.now()
        self._rounds = []
        active = list(finalists)
        rnd = 0
        while active and not self.degraded:
            row: dict[int, float] = {}
            for lv in self._rotated(active, rnd):
                if not lv.active:
                    continue
                s = self._timed(lv, self._batch_for(lv), slot=rnd)
                if s is not None:
                    lv.stats.samples.extend(s)
                    row[id(lv)] = statistics.median(s)
                if self.degraded:
                    break
            self._rounds.append(row)
            self._trace({"phase": "sample", "round": rnd, "us": self._us(row, finalists)})
            rnd += 1
            active = [lv for lv in active if lv.active and not rule.cap.enough(lv.stats.samples)]
            if not active:
                break
            # the leader is one that may be chosen (`passed`); the others are timed against it
            lead, _ = self._leader([lv for lv in active if _passed(lv)] or active)
            if lead is None:
                break
            scores = {id(lv): ratios(self._rounds, lv, lead) for lv in active
                      if lv.stats.samples}
            contenders = [lead] + [lv for lv in active if lv is not lead
                                   and not rule.separated.enough(scores.get(id(lv), []))]
            if rule.leader.enough(lead.stats.samples) and all(
                    rule.paired.enough(scores.get(id(lv), [])) for lv in contenders[1:]):
                break
            if rule.budget.enough(started, cfg.now()):
                self.note("time cap reached before every median converged")
                break
            active = [lv for lv in active if lv in contenders]

    def _batch_for(self, lv: _Live) -> int:
        ref = lv.stats.samples[-self.cfg.batch:] or lv.stats.screen_samples
        if not ref:
            return self.cfg.batch
        one = statistics.median(ref)
        return max(1, min(self.cfg.batch, int(self.cfg.batch_target_s / one) if one > 0 else 1))

    def _leader(self, lives: list[_Live]) -> tuple[_Live | None, dict[int, list[float]]]:
        """The fastest by paired per-round ratios (drift between rounds cancels out)."""
        return leader(self._rounds, lives)

    def _select(self, finalists: list[_Live]) -> tuple[Candidate | None, float]:
        """The winner (`select.select_winner`) and the noise band; every measured finalist's
        `rank_s` (its placement score relative to the leader x the leader's median)."""
        sel = select_winner(finalists, self._rounds, self.cfg.tie_rules())
        if sel is None:
            return None, 0.0
        lead_s = sel.leader.stats.median_s
        for lv in sel.measured:
            if lead_s is not None and math.isfinite(sel.rel[id(lv)]):
                lv.stats.rank_s = sel.rel[id(lv)] * lead_s
        if self.cfg.trace is not None:
            self._trace({**sel.event(), "worker_restarts": getattr(self.backend, "restarts", None)})
        return sel.winner, sel.band

    # ------------------------------------------------------------------ entry point
    def run(self, problem: ConvProblem, env: dict[str, str]) -> TuneResult:
        t0 = time.monotonic()
        listing_notes: list[str] = []
        cands = self._candidates(problem, listing_notes)
        if cands is None:
            return TuneResult(problem=problem, env=dict(env), backend=self.backend.name,
                              winner=None, created=time.time(),
                              tuning_s=time.monotonic() - t0, notes=listing_notes)
        self._trace({"phase": "problem", "key": problem.key(), "candidates": len(cands)})
        seen: set[str] = set()
        lives: list[_Live] = []
        for c in cands:
            if c.key in seen:
                continue
            seen.add(c.key)
            lives.append(_Live(CandidateStats(candidate=c)))
        listing = listing_record(self.backend)
        # units a hung step left out of the listing (`worker.WorkerBackend._listing`): said in the
        # notes, but the listing was the full one (not a short list)
        left_out = [str(n) for n in listing.get("left_out_notes") or () if str(n)]
        result = TuneResult(problem=problem, env=dict(env), backend=self.backend.name,
                            winner=None, candidates=[lv.stats for lv in lives],
                            created=time.time(), notes=listing_notes + left_out,
                            short_list=bool(listing_notes), listing=listing)
        try:
            self._first_runs(problem, lives)
            finalists = self._screen(lives)
            self._settle(finalists)
            self.note(f"sampling {len(finalists)} finalists")
            self._sample(finalists)
            for lv in lives:
                if lv.clocks:
                    lv.stats.clock_mhz = statistics.median(lv.clocks)
            result.winner, result.noise_band = self._select(finalists)
            self._conclude(result, lives)
        finally:
            for lv in lives:
                self._close(lv)
            result.tuning_s = time.monotonic() - t0
        return result

    def _candidates(self, problem: ConvProblem, notes: list[str]) -> list[Candidate] | None:
        """The backend's candidates; where its listing fails, its short list
        (`lean_candidates`) with a note saying so; None when neither could be had."""
        try:
            return self.backend.candidates(problem)
        except Exception as exc:  # noqa: BLE001 - a backend that cannot list costs this problem
            notes.append(f"could not list candidates: {type(exc).__name__}: {exc}")
        lean = getattr(self.backend, "lean_candidates", None)
        cands = None
        if lean is not None:
            try:
                cands = lean(problem)
            except Exception as exc2:  # noqa: BLE001
                notes.append(f"nor the short list: {type(exc2).__name__}: {exc2}")
        if cands is None:
            return None
        notes.append("tuned from the backend's short list (no engine enumeration, "
                     "no knob refinement): not stored, tune again for the full list")
        return cands

    def _first_runs(self, problem: ConvProblem, lives: list[_Live]) -> None:
        """Per candidate in listing order: prepare and first run, second run (the hopeless
        drop), check, warm-up. With `prescreen`, the check and warm-up wait for the prescreen
        and are given to the candidates it keeps only."""
        best_second: float | None = None
        pre = self.cfg.prescreen > 0
        for lv in lives:
            self.note(f"first run + check {lv.stats.candidate.key}")
            if self._recalled(problem, lv):
                continue
            t_cand = self.cfg.now()
            self._prepare_first(problem, lv)
            first = lv.stats.first_run_s
            if (lv.active and first is not None and first > self.cfg.hopeless_first_s
                    and self._hopeless(problem, lv, first, best_second, "first")):
                lv.stats.cost_s += self.cfg.now() - t_cand
                continue
            if lv.active:
                # the second run comes before the check: a hopeless candidate is dropped
                # without one more of its (slow) runs
                second = self._second_run(lv)
                if second is not None and self._hopeless(problem, lv, second, best_second):
                    lv.stats.cost_s += self.cfg.now() - t_cand
                    continue
                if lv.active and not pre:
                    self._check(lv)
                if lv.active and second is not None and _passed(lv):
                    best_second = second if best_second is None else min(best_second, second)
            lv.stats.cost_s += self.cfg.now() - t_cand  # warm-up on: counted by _timed
            if lv.active and not pre:
                self._warm_up(lv)
        if pre:
            for lv in self._prescreen(lives):
                t_cand = self.cfg.now()
                self._check(lv)
                lv.stats.cost_s += self.cfg.now() - t_cand
                if lv.active:
                    self._warm_up(lv)

    def _warm_up(self, lv: _Live) -> None:
        self.note(f"warm up {lv.stats.candidate.key}")
        self._warmup(lv)

    def _prescreen(self, lives: list[_Live]) -> list[_Live]:
        """One timed sample per active candidate; the `prescreen` fastest by it and every
        `keep_keys` candidate go on, the rest are screened out. Returns those that go on."""
        cands = [lv for lv in lives if lv.active]
        first: dict[int, float] = {}
        for lv in cands:
            s = self._timed(lv, 1, slot=0)
            if s:
                first[id(lv)] = s[0]
            if self.degraded:
                return [lv for lv in cands if lv.active]
        ranked = sorted((lv for lv in cands if id(lv) in first), key=lambda lv: first[id(lv)])
        fastest = ranked[0] if ranked else None
        chosen = {id(lv) for lv in ranked[:self.cfg.prescreen]}
        out = []
        for lv in cands:
            if not lv.active:
                continue
            keep = lv.stats.candidate.key in self.cfg.keep_keys
            t = first.get(id(lv))
            if keep or id(lv) in chosen:
                out.append(lv)
                continue
            lv.stats.status = "screened-out"
            lv.stats.reason = ("prescreen: no timed sample" if t is None or fastest is None else
                               f"prescreen: {t / first[id(fastest)]:.2f}x the fastest first "
                               f"sample (the {self.cfg.prescreen} fastest go on)")
            lv.active = False
            self._close(lv)
        self._trace({"phase": "prescreen", "kept": [lv.stats.candidate.key for lv in out],
                     "us": {lv.stats.candidate.key: round(first[id(lv)] * 1e6, 3)
                            for lv in ranked}})
        return out

    def _conclude(self, result: TuneResult, lives: list[_Live]) -> None:
        """The notes and statuses of a degraded run, or of one without a winner."""
        if self.degraded:
            result.degraded = True
            for lv in lives:
                if lv.stats.status == "ok" and not lv.stats.samples:
                    lv.stats.status = "not-measured"
                    lv.stats.reason = "the device was slowed down before it was timed"
            result.notes.append("the device reported a slowdown (GPU clock throttling, or CPU "
                                "time taken by other processes) that did not clear: result "
                                "not trusted, not stored")
        if result.winner is None and not self.degraded:
            result.notes.append("no candidate ran correctly")

