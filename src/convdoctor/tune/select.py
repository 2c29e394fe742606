"""Choosing: the leader of paired rounds, the winner of a problem with its tie rules, and the
order the runtime tries candidates in.

The sampler (`convdoctor.tune.sampler`) times its finalists in paired rounds: every finalist once
per round, in rotating order, all on the round's buffer placement. A candidate is compared with
another by the per-round ratios of their times (drift between rounds cancels out) and ranked by
its placement score (`placement_score`: the mean over placements of the median paired ratio, its
time at a random placement). `select_winner` takes the fastest (the leader) and the candidates
within the noise band of it (ties), then breaks ties by a pinned kernel within the tie floor of
the leader (the key fixes the kernel, unlike PyTorch's cuDNN paths, which pick one in each
process), then smaller workspace, then determinism, then the candidate key, so two runs agree.

The runtime runs candidates from Python, where some engines pay host time per eager call that
PyTorch's own dispatch does not (a cuDNN plan through the custom autograd Function, a Triton
launcher; `Engine.host_cost_s`), and none inside a CUDA graph. So the route order
(`route_order`) is the tuner's measured times plus each engine's host cost for the way the route
will run: within the tuner's noise band of the best such cost the tuner's winner stays first;
beyond it the measured cost decides. Keys the runtime may not route (`torch:benchmark`, unknown
keys) and, for transposed convolutions, engines that cannot run them are left out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ..engines.registry import engine_of
from ..measure.stopping import rel_ci_halfwidth
from .backend import Candidate, Runner
from .result import BASELINE_KEYS, CPU_BASELINE_KEYS, CandidateStats

# One dict per round: id(candidate) -> its time in that round (a batch's median).
Rounds = list[dict[int, float]]


class Timed(Protocol):
    """A candidate as the sampler holds it: its statistics and its runner (None once closed)."""

    stats: CandidateStats
    runner: Runner | None


T = TypeVar("T", bound=Timed)


def passed(stats: CandidateStats) -> bool:
    """Not timed outside the tolerance (`HarnessConfig.time_outside_tolerance`): choosable."""
    return stats.correctness is None or stats.correctness.ok


# ---------------------------------------------------------------------- paired rounds
def ratios(rounds: Rounds, lv: Timed, ref: Timed) -> list[float]:
    """Per-round ratios lv/ref over the rounds where both were timed."""
    a, b = id(lv), id(ref)
    return [r[a] / r[b] for r in rounds if a in r and b in r and r[b] > 0]


def placements(*lives: Timed) -> int:
    """How many buffer placements the rounds cycle through (round r times on placement
    r % count); 1 for runners without placements."""
    n = 1
    for lv in lives:
        if getattr(lv.runner, "slotted", False):
            n = max(n, int(getattr(lv.runner, "placements", 1) or 1))
    return n


def placement_score(rounds: Rounds, lv: Timed, ref: Timed) -> float:
    """lv's time relative to ref at a RANDOM buffer placement: for each placement, the median of
    the paired per-round ratios timed on it, then the mean over placements. The median over all
    rounds would ignore a placement where a candidate is slow as long as it is a minority: on an
    H100, split-K cuDNN plans that ran 147 us on 3 of 4 placements ranked first by that median and
    measured 154 us in the bench's referee. With one placement, or rounds that do not cover every
    placement yet: the median of all the ratios."""
    period = placements(lv, ref)
    a, b = id(lv), id(ref)
    by_slot: dict[int, list[float]] = {}
    for i, r in enumerate(rounds):  # the pairs of `ratios`, kept by placement
        if a in r and b in r and r[b] > 0:
            by_slot.setdefault(i % period, []).append(r[a] / r[b])
    if not by_slot:
        return math.inf
    if len(by_slot) < period or period <= 1:
        return statistics.median(x for v in by_slot.values() for x in v)
    return statistics.fmean(statistics.median(v) for v in by_slot.values())


def leader(rounds: Rounds, lives: Sequence[T]) -> tuple[T | None, dict[int, list[float]]]:
    """The fastest by placement score, and every candidate's paired ratios to it (by id)."""
    have = [lv for lv in lives if lv.stats.samples]
    if not have:
        return None, {}
    # Reference: the candidate sampled in the most rounds (it shares rounds with every other).
    ref = max(have, key=lambda lv: (sum(1 for r in rounds if id(lv) in r),
                                    -(lv.stats.median_s or 0.0)))
    score = {id(lv): placement_score(rounds, lv, ref) for lv in have}
    best = min(have, key=lambda lv: score[id(lv)])
    return best, {id(lv): ratios(rounds, lv, best) for lv in have}


# ---------------------------------------------------------------------- the winner
@dataclass(frozen=True)
class TieRules:
    """What counts as a tie and who wins one (`HarnessConfig.tie_rules()` maps the knobs)."""

    tie_floor: float = 0.005
    max_tie_band: float = 0.02
    pytorch_bounds_ties: bool = True
    reference_only: tuple[str, ...] = ("torch:benchmark",)


@dataclass
class Selection(Generic[T]):
    """A problem's choice and what it was made from (`rel` and `scores` are keyed by id)."""

    leader: T
    measured: list[T]                  # the choosable, measured finalists
    ties: list[T]                      # in tie order: the winner first
    rel: dict[int, float]              # placement score relative to the leader
    scores: dict[int, list[float]]     # paired ratios to the leader
    bound: float | None                # `pytorch_bound`, where it applied
    band: float                        # the tie floor: `TuneResult.noise_band`

    @property
    def winner(self) -> Candidate:
        return self.ties[0].stats.candidate

    def event(self) -> dict[str, Any]:
        """The trace record of this choice (`convdoctor tune --trace`)."""
        table: dict[str, dict[str, Any]] = {}
        for lv in self.measured:
            r = self.scores.get(id(lv), [])
            rel = self.rel[id(lv)]
            table[lv.stats.candidate.key] = {
                "median": round(statistics.median(r), 4) if r else None, "rounds": len(r),
                "placement_score": round(rel, 4) if math.isfinite(rel) else None,
                "halfwidth": round(rel_ci_halfwidth(r), 4) if len(r) >= 3 else None,
                "median_us": round((lv.stats.median_s or 0.0) * 1e6, 2), "n": lv.stats.n,
                "timing": str(getattr(lv.runner, "timing_mode", "") or "")}
        return {"phase": "select", "leader": self.leader.stats.candidate.key,
                "ratios_to_leader": table, "ties": [lv.stats.candidate.key for lv in self.ties],
                "pytorch_bound": round(self.bound, 4) if self.bound is not None else None,
                "winner": self.winner.key}


def select_winner(finalists: Sequence[T], rounds: Rounds,
                  rules: TieRules) -> Selection[T] | None:
    """The choice among the measured, choosable finalists: the leader, or the first of its ties
    in tie order (`tie_order`); None when none was measured."""
    measured = [lv for lv in finalists if lv.stats.status == "ok" and lv.stats.samples
                and lv.stats.candidate.key not in rules.reference_only and passed(lv.stats)]
    if not measured:
        return None
    best, scores = leader(rounds, measured)
    assert best is not None
    rel = {id(lv): placement_score(rounds, lv, best) for lv in measured}
    ties = within_band(measured, best, rel, scores, rules)
    # only under a pinned leader: when PyTorch's per-process path leads, the tie order keeps
    # preferring a pinned kernel
    bound = (pytorch_bound(finalists, best, rounds, rules.tie_floor)
             if rules.pytorch_bounds_ties and best.stats.candidate.pinned else None)
    if bound is not None:
        ties = [lv for lv in ties if lv is best or rel[id(lv)] <= bound]
    ties = tie_order(ties, best, rel, rules.tie_floor)
    return Selection(leader=best, measured=measured, ties=ties, rel=rel, scores=scores,
                     bound=bound, band=rules.tie_floor)


def within_band(measured: Sequence[T], best: T, rel: dict[int, float],
                scores: dict[int, list[float]], rules: TieRules) -> list[T]:
    """The leader and every candidate whose placement score relative to it is within the noise
    band: the tie floor plus the paired ratio's own CI half-width, but never more than
    `max_tie_band` (so noise cannot make a candidate measured clearly slower a tie). Candidates
    without paired ratios are no ties."""
    ties = [best]
    for lv in measured:
        if lv is best:
            continue
        r = scores.get(id(lv), [])
        if not r:
            continue
        half = rel_ci_halfwidth(r) if len(r) >= 3 else math.inf
        if rel[id(lv)] <= 1.0 + min(rules.max_tie_band, rules.tie_floor + half):
            ties.append(lv)
    return ties


def pytorch_bound(finalists: Sequence[T], best: T, rounds: Rounds,
                  tie_floor: float) -> float | None:
    """How far behind the leader a candidate may be and still tie, as set by PyTorch's own
    paths (`BASELINE_KEYS`, `CPU_BASELINE_KEYS`) other than the leader: the smallest of their
    placement scores relative to the leader, times (1 + the tie floor); None when none was
    measured alongside. The scores are point estimates (no CI half-width): where PyTorch's
    path measures faster than a candidate by more than the floor, the tuner must not take that
    candidate on the tie order. A PyTorch path that leads bounds nothing; `select_winner`
    applies the bound only under a pinned leader (else the tie order decides, pinned kernels
    first)."""
    scores = [placement_score(rounds, lv, best) for lv in finalists
              if lv is not best and lv.stats.candidate.key in BASELINE_KEYS + CPU_BASELINE_KEYS
              and lv.stats.status == "ok" and lv.stats.samples and passed(lv.stats)]
    finite = [x for x in scores if math.isfinite(x)]
    return min(finite) * (1.0 + tie_floor) if finite else None


def tie_order(ties: Sequence[T], best: T, rel: dict[int, float], tie_floor: float) -> list[T]:
    """Ties sorted winner first. Where some tie is not pinned, a pinned kernel within the tie
    floor of the leader comes first (one beyond the floor can be measurably slower: on an H100,
    for Inception's Conv2d_2a, a plan 0.85% behind PyTorch's heuristic path in two tuning runs,
    preferred as pinned, measured 2.3% slower in the bench's referee); then smaller workspace,
    then deterministic, then the candidate key. Among pinned candidates only, the last three
    decide."""
    def near(lv: T) -> bool:
        return lv is best or rel[id(lv)] <= 1.0 + tie_floor

    mixed = any(not lv.stats.candidate.pinned for lv in ties)
    return sorted(ties, key=lambda lv: (mixed and not (lv.stats.candidate.pinned and near(lv)),
                                        lv.stats.candidate.workspace_bytes,
                                        not lv.stats.candidate.deterministic,
                                        lv.stats.candidate.key))


# ---------------------------------------------------------------------- the runtime's order
def route_order(result: Any, *, transposed: bool, train: bool, graphed: bool) -> list[str]:
    """Correct, measured candidate keys of `result`, best first, for a route that runs eagerly
    (`graphed=False`: engines' host costs count) or inside a CUDA graph (they do not), in training
    (`train`) or inference."""
    win = getattr(result, "winner", None)

    def usable(key: str) -> bool:
        e = engine_of(key)
        return e is not None and e.routes(key) and not (transposed and not e.runs_transposed)

    ok = [s for s in getattr(result, "candidates", []) if s.status == "ok"
          and s.median_s is not None and (s.correctness is None or s.correctness.ok)
          and usable(s.candidate.key)]

    def cost(s: Any) -> tuple[float, int]:
        key = s.candidate.key
        e = engine_of(key)
        host = 0.0 if graphed or e is None else e.host_cost_s(key, train=train)
        t = getattr(s, "rank_s", None)
        return ((s.median_s if t is None else t) + host,
                0 if win is not None and key == win.key else 1)

    ok.sort(key=cost)
    # Within the tuner's noise band of the best cost, the tuner's winner is trusted (its tie rules:
    # a pinned kernel within the tie floor, smaller workspace, deterministic); beyond it, the
    # measured cost decides.
    band = float(getattr(result, "noise_band", 0.0) or 0.0)
    if ok and win is not None:
        wi = next((i for i, s in enumerate(ok) if s.candidate.key == win.key), None)
        if wi is not None and cost(ok[wi])[0] <= cost(ok[0])[0] * (1.0 + band):
            ok.insert(0, ok.pop(wi))
    keys = [s.candidate.key for s in ok]
    if not keys and win is not None and usable(win.key):
        keys = [win.key]
    return keys
