"""The measurement and selection harness: backend-independent, so every backend is measured alike.

Per problem: build each candidate's runner, check it against float64 (wrong -> disqualified), warm it
up until its times stop falling (lazy loading, first-run effects), screen it with a few samples and
drop hopeless ones, then sample the finalists round-robin (so drift and throttling hit all alike)
until each contender's median has a 95% CI within `target_rel_ci` or the time cap is hit. Samples
taken while the clock reports a slowdown are discarded, with a pause and a retry. Candidates whose
medians lie within the noise band of the best are ties, broken by a pinned kernel within the tie
floor of the leader (the key fixes the kernel, unlike PyTorch's cuDNN paths, which pick one in
each process), then smaller workspace, then determinism, then the candidate key, so two runs
agree.
"""

from __future__ import annotations

import math
import os
import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..engines.listing import listing_record
from ..problem import ConvProblem
from .backend import Backend, Candidate, CandidateUnsupported, ClockReading, Runner
from .result import BASELINE_KEYS, CPU_BASELINE_KEYS, CandidateStats, TuneResult, median_ci


@dataclass
class HarnessConfig:
    """The knobs of one tuning run. Times are seconds."""

    budget_s: float = 20.0             # cap on the adaptive sampling phase of one problem
    target_rel_ci: float = 0.01        # stop when the median's 95% CI half-width is within this
    min_samples: int = 10              # per finalist before the stopping rule applies
    min_rounds: int = 6                # paired rounds before a finalist may be dropped as slower
    max_samples: int = 300             # per finalist
    batch: int = 5                     # samples per finalist per round-robin round (at most)
    batch_target_s: float = 0.05       # fewer per round when one run is slow (big CPU problems)
    warmup_reps: int = 3               # samples per warm-up step
    warmup_settle: float = 0.05        # warm: a step's median no more than this below the best
    warmup_max_steps: int = 12
    warmup_cap_s: float = 2.0          # per candidate (host time), for slow CPU problems
    screen_reps: int = 5
    screen_margin: float = 0.30        # hopeless: screen median > (1 + margin) x best screen median
    max_finalists: int = 6
    # The noise band of a tie: `tie_floor` plus the paired ratio's own 95% CI half-width (a
    # candidate not measurably slower than the leader by more than the floor), never wider than
    # `max_tie_band`. Session 5's traces (58 selections): 21 ties were broken away from the leader
    # at ratios 1.001-1.014 with the former 1% floor, a loss of up to 1.4% each that the referee
    # then compounded with process-to-process noise (UNet2D dec2a, 0.973x); the measured
    # half-widths were 0.1-0.8%. With a 0.5% floor 6 of those 21 go to the leader instead. The cap
    # stays at 2%: truly equal candidates under 2% sample noise measure up to ~1.3% apart against
    # the luckiest of them (the leader), and two runs must still agree on them.
    tie_floor: float = 0.005
    max_tie_band: float = 0.02
    # PyTorch's own paths other than the leader (measured even when never chosen) bound a tie: a
    # candidate measured more than `tie_floor` behind one of them is no tie, however wide its
    # band (`Harness._pytorch_bound`). Session 16 (H100, Whisper encoder.conv2 fp32): a plan 1.75%
    # behind the leader won a tie on the tie order (its workspace 131 bytes smaller) while
    # benchmark=True's pick measured 1.6% faster in the same run; the referee read it 2.3% slower
    # than PyTorch.
    pytorch_bounds_ties: bool = True
    # A candidate whose SECOND run (right after the first run's lazy loading) takes more than
    # `hopeless_abs_s` and more than `hopeless_factor` x the fastest second run so far (of
    # candidates that passed their check) is dropped before its check, warm-up and screening
    # (status screened-out). Session 7 (H100, fp32 depthwise
    # dgrad): one cuDNN knob setting ran ~1-2 s per call where others ran in under a millisecond,
    # and its warm-up and 5 screen samples cost 50 s of each 66 s tuning run. The floor was 0.2 s
    # until session 16 (H100, fp16 depthwise fprop, 64x960x7x7 and 64x1152x7x7 5x5): in each run
    # 23 cuDNN plans took 5-60 ms per call (hundreds to thousands of times the 7.7-16 us winner),
    # each under 0.2 s, and went through check, warm-up and screen at 0.2-3.5 s each (34.6 and
    # 38.2 s together): tuning took 48 and 51 s. At a 5 ms floor the same runs took 13.6 and 16.7 s
    # and chose the same plan (7.74 vs 7.76 us, 16.38 vs 16.39 us). 20 ms keeps a margin for a
    # second run still slowed by one-time work (the slowest second run of a plan screened
    # normally there was 4.7 ms, against a 1.4-1.5 ms steady state); of the 23 it drops the 16
    # over 20 ms and leaves 7 to the screen (2.5 and 3.2 s together in the 0.2 s runs).
    hopeless_abs_s: float = 0.02
    hopeless_factor: float = 20.0
    throttle_pause_s: float = 0.5
    max_throttle_retries: int = 6      # in a row, per finalist, before the run is marked degraded
    check: bool = True
    keep_keys: tuple[str, ...] = BASELINE_KEYS + CPU_BASELINE_KEYS   # never screened out
    # Measured as a reference, never chosen: benchmark=True searches again in every process and may
    # pick another engine there (the instability this tuner exists to remove); the engine it finds
    # is among the cuDNN candidates anyway.
    reference_only: tuple[str, ...] = ("torch:benchmark",)
    # Keys still timed when their check fails on the tolerance alone (a finite error; NaN/Inf or a
    # wrong shape still disqualifies), their stats keeping the failed `correctness`; never chosen.
    # The bench's PyTorch arms and referee time PyTorch's own paths this way: benchmark=True's
    # speed is what its users get, whatever our tolerance says. Session 19 (H100, fp32 TF32 wgrad,
    # Inception Mixed_5b.branch5x5_2): benchmark=True's pick erred 2.09e-3 (as did cudnn eng17)
    # against the 2e-3 tolerance, both PyTorch arms dropped it and the row had no benchmark time.
    time_outside_tolerance: tuple[str, ...] = ()
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    # Receives one dict per decision step (screen rounds and verdicts, sampling rounds, the
    # selection with its ratios and ties), for diagnosing a choice: `convdoctor tune --trace FILE`.
    trace: Callable[[dict[str, Any]], None] | None = None


Note = Callable[[str], None]


def _noop(_: str) -> None:
    return None


def _passed(lv: _Live) -> bool:
    """Not timed outside the tolerance (`HarnessConfig.time_outside_tolerance`): choosable."""
    return lv.stats.correctness is None or lv.stats.correctness.ok


@dataclass
class _Live:
    stats: CandidateStats
    runner: Runner | None = None
    clocks: list[float] = field(default_factory=list)
    throttled_in_a_row: int = 0
    active: bool = True


def _ratios(rounds: list[dict[int, float]], lv: _Live, ref: _Live) -> list[float]:
    """Per-round ratios lv/ref over the rounds where both were timed."""
    a, b = id(lv), id(ref)
    return [r[a] / r[b] for r in rounds if a in r and b in r and r[b] > 0]


def _placements(*lives: _Live) -> int:
    """How many buffer placements the rounds cycle through (round r times on placement
    r % count); 1 for runners without placements."""
    n = 1
    for lv in lives:
        if getattr(lv.runner, "slotted", False):
            n = max(n, int(getattr(lv.runner, "placements", 1) or 1))
    return n


def _placement_score(rounds: list[dict[int, float]], lv: _Live, ref: _Live) -> float:
    """lv's time relative to ref at a RANDOM buffer placement: for each placement, the median of
    the paired per-round ratios timed on it, then the mean over placements. The median over all
    rounds ignores a placement where a candidate is slow as long as it is a minority: session 12
    (H100) had split-K plans that ran 147 us on 3 of 4 placements win in tuning and read 154 us
    in the referee. With one placement, or rounds that do not cover every placement yet: the
    median of all the ratios."""
    period = _placements(lv, ref)
    a, b = id(lv), id(ref)
    by_slot: dict[int, list[float]] = {}
    for i, r in enumerate(rounds):  # the pairs of `_ratios`, kept by placement
        if a in r and b in r and r[b] > 0:
            by_slot.setdefault(i % period, []).append(r[a] / r[b])
    if not by_slot:
        return math.inf
    if len(by_slot) < period or period <= 1:
        return statistics.median(x for v in by_slot.values() for x in v)
    return statistics.fmean(statistics.median(v) for v in by_slot.values())


def _rel_halfwidth(values: list[float]) -> float:
    med, lo, hi = median_ci(values)
    if not values or not med > 0:
        return math.inf
    return (hi - lo) / 2.0 / med


def _slow(reading: ClockReading | None) -> bool:
    return bool(reading is not None and reading.slowdown)


class Harness:
    def __init__(self, backend: Backend, config: HarnessConfig | None = None,
                 note: Note | None = None) -> None:
        self.backend = backend
        self.cfg = config or HarnessConfig()
        self.note = note or _noop
        self.degraded = False
        self._rounds: list[dict[int, float]] = []

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
        # The very first run (lazy module loading, plan compilation) is timed on its own.
        t0 = time.perf_counter()
        try:
            live.runner.warmup()
        except CandidateUnsupported as exc:
            self._unsupported(live, exc)
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(live, f"first run failed: {type(exc).__name__}: {exc}")
            return
        live.stats.first_run_s = time.perf_counter() - t0
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

    def _hopeless(self, live: _Live, second: float, best: float | None) -> bool:
        """Drop a candidate far slower than the fastest seen (see `HarnessConfig.hopeless_*`)."""
        cfg = self.cfg
        if (best is None or best <= 0 or second <= cfg.hopeless_abs_s
                or second <= cfg.hopeless_factor * best
                or live.stats.candidate.key in cfg.keep_keys):
            return False
        live.stats.status = "screened-out"
        live.stats.reason = (f"hopeless: its second run took {second * 1e3:.1f} ms, "
                             f"{second / best:.0f}x the fastest so far ({best * 1e3:.2f} ms)")
        self._trace({"phase": "hopeless", "key": live.stats.candidate.key,
                     "second_run_ms": round(second * 1e3, 3), "best_ms": round(best * 1e3, 3)})
        live.active = False
        self._close(live)
        return True

    def _warmup(self, live: _Live) -> None:
        """Run until a step is no faster than the best step so far (by `warmup_settle`)."""
        assert live.runner is not None
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
            if best is not None and med >= best * (1.0 - self.cfg.warmup_settle):
                return
            best = med if best is None else min(best, med)

    def _rotated(self, lives: list[_Live], rnd: int) -> list[_Live]:
        k = rnd % len(lives) if lives else 0
        return lives[k:] + lives[:k]

    def _screen(self, lives: list[_Live]) -> list[_Live]:
        """A few rounds, one sample per candidate per round (rotating order), scored by the
        per-round ratio to the fastest, so drift during the screen cannot favour an early one."""
        cands = [lv for lv in lives if lv.active]
        rounds: list[dict[int, float]] = []
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
            ratios = _ratios(rounds, lv, ref)
            if ratios:
                scored.append((statistics.median(ratios), min(ratios), lv))
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
        """Round-robin batches until every contender's ratio to the leader, and the leader's
        median, have CIs within `target_rel_ci` (or the time cap). Slower ones drop out early."""
        cfg = self.cfg
        deadline = cfg.now() + cfg.budget_s
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
            active = [lv for lv in active if lv.active and lv.stats.n < cfg.max_samples]
            if not active:
                break
            # the leader is one that may be chosen (`_passed`); the others are timed against it
            leader, _ = self._leader([lv for lv in active if _passed(lv)] or active)
            if leader is None:
                break
            scores = {id(lv): _ratios(self._rounds, lv, leader) for lv in active
                      if lv.stats.samples}
            contenders = [leader]
            for lv in active:
                if lv is leader:
                    continue
                ratios = scores.get(id(lv), [])
                enough = len(ratios) >= cfg.min_rounds
                if enough and median_ci(ratios)[1] > 1.0 + cfg.max_tie_band:
                    continue              # can no longer tie with the leader: stop sampling it
                contenders.append(lv)
            converged = (leader.stats.n >= cfg.min_samples
                         and leader.stats.rel_ci <= cfg.target_rel_ci)
            for lv in contenders:
                if lv is leader:
                    continue
                ratios = scores.get(id(lv), [])
                if len(ratios) < cfg.min_rounds or _rel_halfwidth(ratios) > cfg.target_rel_ci:
                    converged = False
            if converged:
                break
            if cfg.now() >= deadline:
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
        have = [lv for lv in lives if lv.stats.samples]
        if not have:
            return None, {}
        # Reference: the candidate sampled in the most rounds (it shares rounds with every other).
        ref = max(have, key=lambda lv: (sum(1 for r in self._rounds if id(lv) in r),
                                        -(lv.stats.median_s or 0.0)))
        score = {id(lv): _placement_score(self._rounds, lv, ref) for lv in have}
        leader = min(have, key=lambda lv: score[id(lv)])
        return leader, {id(lv): _ratios(self._rounds, lv, leader) for lv in have}

    # ------------------------------------------------------------------ selection
    def _select(self, finalists: list[_Live]) -> tuple[Candidate | None, float]:
        measured = [lv for lv in finalists if lv.stats.status == "ok" and lv.stats.samples
                    and lv.stats.candidate.key not in self.cfg.reference_only and _passed(lv)]
        if not measured:
            return None, 0.0
        leader, scores = self._leader(measured)
        assert leader is not None
        rel = {id(lv): _placement_score(self._rounds, lv, leader) for lv in measured}
        lead_s = leader.stats.median_s
        for lv in measured:
            if lead_s is not None and math.isfinite(rel[id(lv)]):
                lv.stats.rank_s = rel[id(lv)] * lead_s
        # A tie: the placement score relative to the leader (`_placement_score`: the mean over
        # placements of the median paired ratio) is within the noise band: the tie floor plus the
        # ratio's own CI half-width, but never more than `max_tie_band` (so noise cannot make us
        # choose a candidate measured clearly slower than the leader).
        band = self.cfg.tie_floor
        ties = [leader]
        for lv in measured:
            if lv is leader:
                continue
            ratios = scores.get(id(lv), [])
            if not ratios:
                continue
            half = _rel_halfwidth(ratios) if len(ratios) >= 3 else math.inf
            lv_band = min(self.cfg.max_tie_band, band + half)
            if rel[id(lv)] <= 1.0 + lv_band:
                ties.append(lv)
        # (only under a pinned leader: when PyTorch's per-process path leads, the order below
        # keeps preferring a pinned kernel, session 9)
        bound = (self._pytorch_bound(finalists, leader)
                 if self.cfg.pytorch_bounds_ties and leader.stats.candidate.pinned else None)
        if bound is not None:
            ties = [lv for lv in ties if lv is leader or rel[id(lv)] <= bound]
        # A pinned kernel is preferred only when its median ratio to the leader is within the
        # tie floor: session 9 (H100, Inception Conv2d_2a) had a plan 0.85% behind PyTorch's
        # heuristic path in both tuning runs win on "pinned" and read 2.3% slower in the
        # referee. Beyond the floor the older order (workspace, determinism, key) decides; among
        # pinned candidates only, it always does.
        def near(lv: _Live) -> bool:
            if lv is leader:
                return True
            return rel[id(lv)] <= 1.0 + band

        mixed = any(not lv.stats.candidate.pinned for lv in ties)
        ties.sort(key=lambda lv: (mixed and not (lv.stats.candidate.pinned and near(lv)),
                                  lv.stats.candidate.workspace_bytes,
                                  not lv.stats.candidate.deterministic, lv.stats.candidate.key))
        if self.cfg.trace is not None:
            trace_ratios: dict[str, dict[str, Any]] = {}
            for lv in measured:
                r = scores.get(id(lv), [])
                trace_ratios[lv.stats.candidate.key] = {
                    "median": round(statistics.median(r), 4) if r else None, "rounds": len(r),
                    "placement_score": (round(rel[id(lv)], 4) if math.isfinite(rel[id(lv)])
                                        else None),
                    "halfwidth": round(_rel_halfwidth(r), 4) if len(r) >= 3 else None,
                    "median_us": round((lv.stats.median_s or 0.0) * 1e6, 2), "n": lv.stats.n,
                    "timing": str(getattr(lv.runner, "timing_mode", "") or "")}
            self._trace({"phase": "select", "leader": leader.stats.candidate.key,
                         "ratios_to_leader": trace_ratios,
                         "ties": [lv.stats.candidate.key for lv in ties],
                         "pytorch_bound": round(bound, 4) if bound is not None else None,
                         "winner": ties[0].stats.candidate.key,
                         "worker_restarts": getattr(self.backend, "restarts", None)})
        return ties[0].stats.candidate, band

    def _pytorch_bound(self, finalists: list[_Live], leader: _Live) -> float | None:
        """How far behind the leader a candidate may be and still tie, as set by PyTorch's own
        paths (`BASELINE_KEYS`, `CPU_BASELINE_KEYS`) other than the leader: the smallest of their
        placement scores relative to the leader, times (1 + the tie floor); None when none was
        measured alongside. The scores are point estimates (no CI half-width): where PyTorch's
        path measures faster than a candidate by more than the floor, the tuner must not take that
        candidate on the tie order. A PyTorch path that leads bounds nothing; `_select` applies
        the bound only under a pinned leader (else the existing order decides, pinned kernels
        first)."""
        scores = [_placement_score(self._rounds, lv, leader) for lv in finalists
                  if lv is not leader and lv.stats.candidate.key in BASELINE_KEYS + CPU_BASELINE_KEYS
                  and lv.stats.status == "ok" and lv.stats.samples and _passed(lv)]
        finite = [x for x in scores if math.isfinite(x)]
        return min(finite) * (1.0 + self.cfg.tie_floor) if finite else None

    # ------------------------------------------------------------------ entry point
    def run(self, problem: ConvProblem, env: dict[str, str]) -> TuneResult:
        t0 = time.monotonic()
        listing_notes: list[str] = []
        cands: list[Candidate] | None
        try:
            cands = self.backend.candidates(problem)
        except Exception as exc:  # noqa: BLE001 - a backend that cannot list costs this problem
            listing_notes.append(f"could not list candidates: {type(exc).__name__}: {exc}")
            lean = getattr(self.backend, "lean_candidates", None)
            cands = None
            if lean is not None:
                try:
                    cands = lean(problem)
                except Exception as exc2:  # noqa: BLE001
                    listing_notes.append(f"nor the short list: {type(exc2).__name__}: {exc2}")
            if cands is None:
                return TuneResult(problem=problem, env=dict(env), backend=self.backend.name,
                                  winner=None, created=time.time(),
                                  tuning_s=time.monotonic() - t0, notes=listing_notes)
            listing_notes.append("tuned from the backend's short list (no engine enumeration, "
                                 "no knob refinement): not stored, tune again for the full list")
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
            best_second: float | None = None
            for lv in lives:
                self.note(f"first run + check {lv.stats.candidate.key}")
                t_cand = self.cfg.now()
                self._prepare_first(problem, lv)
                if lv.active:
                    # the second run comes before the check: a hopeless candidate is dropped
                    # without one more of its (slow) runs
                    second = self._second_run(lv)
                    if second is not None and self._hopeless(lv, second, best_second):
                        lv.stats.cost_s += self.cfg.now() - t_cand
                        continue
                    if lv.active:
                        self._check(lv)
                    if lv.active and second is not None and _passed(lv):
                        best_second = second if best_second is None else min(best_second, second)
                lv.stats.cost_s += self.cfg.now() - t_cand  # warm-up on: counted by _timed
                if lv.active:
                    self.note(f"warm up {lv.stats.candidate.key}")
                    self._warmup(lv)
            finalists = self._screen(lives)
            self._settle(finalists)
            self.note(f"sampling {len(finalists)} finalists")
            self._sample(finalists)
            for lv in lives:
                if lv.clocks:
                    lv.stats.clock_mhz = statistics.median(lv.clocks)
            winner, band = self._select(finalists)
            result.winner, result.noise_band = winner, band
            if self.degraded:
                result.degraded = True
                for lv in lives:
                    if lv.stats.status == "ok" and not lv.stats.samples:
                        lv.stats.status = "not-measured"
                        lv.stats.reason = "the device was slowed down before it was timed"
                result.notes.append("the device reported a slowdown (GPU clock throttling, or CPU "
                                    "time taken by other processes) that did not clear: result "
                                    "not trusted, not stored")
            if winner is None and not self.degraded:
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
TRACE_ENV = "CONVDOCTOR_TUNE_TRACE"
# For experiments: the hopeless drop's absolute floor in seconds per call (`hopeless_abs_s`,
# default 0.02 s since session 16; see HarnessConfig). Not part of the database key: tune with it
# into a scratch `--db` (or `--no-db`).
HOPELESS_ENV = "CONVDOCTOR_TUNE_HOPELESS_ABS_S"


def _env_seconds(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0:
        from ..errors import UsageError

        raise UsageError(f"{name}={raw!r} is not a number of seconds (>= 0); unset it or give "
                         "e.g. 0.005")
    return v


def file_trace(path: str) -> Callable[[dict[str, Any]], None]:
    """A trace sink appending one JSON line per event to `path` (opened per event, so several
    processes may share a file and a crash loses nothing written)."""
    import json

    def write(event: dict[str, Any]) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event, default=str) + "\n")

    return write


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
    if cfg.trace is None and os.environ.get(TRACE_ENV, "").strip():
        cfg.trace = file_trace(os.environ[TRACE_ENV].strip())
    floor = _env_seconds(HOPELESS_ENV)
    if floor is not None:
        cfg.hopeless_abs_s = floor
    cfg.warmup_cap_s = min(cfg.warmup_cap_s, max(0.2, budget_s / 2.0))

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
        # units (cuDNN engines) that hung a listing of this problem's kind on this device and
        # these versions in an earlier process are left out from the start, and new ones are
        # remembered (`TuningDB.left_out`)
        hung = getattr(be, "hung", None) if db is not None else None
        if isinstance(hung, dict):
            _recall_left_out(db, env, hung, note)
        result = Harness(be, cfg, note).run(problem, env)
        if isinstance(hung, dict) and any(hung.values()):
            _remember_left_out(db, env, hung, result)
        if (db is not None and result.winner is not None and not result.degraded
                and not result.short_list):
            db.put(result)
        return result
    finally:
        if owned is not None:
            owned.shutdown()


REMEMBERED = " (remembered by the tuning database)"


def _recall_left_out(db: Any, env: dict[str, str], hung: dict[str, dict[str, str]],
                     note: Callable[[str], None]) -> None:
    from ..errors import UsageError

    try:
        known = db.left_out(env)
    except (UsageError, sqlite3.Error) as exc:   # a locked database costs the memory, not the run
        note(f"could not read the engines left out before: {exc}")
        return
    for kind, units in known.items():
        for unit, why in units.items():
            hung.setdefault(kind, {}).setdefault(unit, why + REMEMBERED)


def _remember_left_out(db: Any, env: dict[str, str], hung: dict[str, dict[str, str]],
                       result: TuneResult) -> None:
    from ..errors import UsageError

    fresh = {k: {u: w for u, w in us.items() if not w.endswith(REMEMBERED)}
             for k, us in hung.items()}
    try:
        db.remember_left_out(env, fresh)
    except (UsageError, sqlite3.Error) as exc:
        result.notes.append(f"could not remember the engines left out in the tuning database: "
                            f"{exc}")


def environment_of(backend: Backend) -> dict[str, str]:
    env = {str(k): str(v) for k, v in backend.environment().items()}
    env.setdefault("backend", backend.name)
    return env


def tune_many(problems: Sequence[ConvProblem], **kwargs: Any) -> list[TuneResult]:
    return [tune_problem(p, **kwargs) for p in problems]
