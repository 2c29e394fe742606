"""Stopping criteria for adaptive sampling: small named rules, each deciding one thing, "enough?".

Like nvbench's `stdrel`, a criterion is a value with its parameters and one method, `enough`, so
the rule a measurement stopped by is visible and can be swapped or tuned in one place. The
statistics are distribution-free: the 95% confidence interval of a median from binomial order
statistics (`median_ci`), valid whatever the shape of the noise (GPU timings are skewed, with
outliers).

The tuner's sampler (`convdoctor.tune.sampler`) applies them after every round-robin round:
`RelativeCI` to the leader's samples and to each contender's paired ratios to the leader,
`Separated` to stop sampling a contender that can no longer tie, `SampleCap` per finalist and
`TimeBudget` to the whole sampling phase; `Settled` ends a candidate's warm-up.
`convdoctor.tune.config.HarnessConfig.stopping()` builds them from the tuner's knobs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def median_ci(samples: Sequence[float], z: float = 1.96) -> tuple[float, float, float]:
    """(median, low, high): order-statistic CI of the median, valid for any distribution."""
    if not samples:
        return (math.nan, math.nan, math.nan)
    s = sorted(samples)
    n = len(s)
    med = statistics.median(s)
    if n < 3:
        return (med, s[0], s[-1])
    half = z * math.sqrt(n) / 2.0
    lo = max(0, int(math.floor(n / 2.0 - half)))
    hi = min(n - 1, int(math.ceil(n / 2.0 + half)) - 1)
    return (med, s[lo], s[hi])


def rel_ci_halfwidth(samples: Sequence[float]) -> float:
    """The median's 95% CI half-width relative to the median; inf without a positive median."""
    med, lo, hi = median_ci(samples)
    if not samples or med <= 0 or math.isnan(med):
        return math.inf
    return (hi - lo) / 2.0 / med


@dataclass(frozen=True)
class RelativeCI:
    """Enough once there are `min_samples` values and the 95% CI half-width of their median is
    within `target` of the median (0.01: the median is known to +-1%)."""

    target: float = 0.01
    min_samples: int = 10

    def enough(self, values: Sequence[float]) -> bool:
        return len(values) >= self.min_samples and rel_ci_halfwidth(values) <= self.target


@dataclass(frozen=True)
class Separated:
    """Enough to stop sampling a contender: after `min_rounds` paired ratios to the leader, even
    the low end of their median's 95% CI lies more than `band` above 1 (it can no longer tie)."""

    band: float = 0.02
    min_rounds: int = 6

    def enough(self, ratios: Sequence[float]) -> bool:
        return len(ratios) >= self.min_rounds and median_ci(ratios)[1] > 1.0 + self.band


@dataclass(frozen=True)
class SampleCap:
    """Enough samples of one candidate, however noisy: `max_samples`."""

    max_samples: int = 300

    def enough(self, values: Sequence[float]) -> bool:
        return len(values) >= self.max_samples


@dataclass(frozen=True)
class TimeBudget:
    """Enough time spent: `budget_s` seconds since `started` (same clock as `now`)."""

    budget_s: float = 20.0

    def enough(self, started: float, now: float) -> bool:
        return now >= started + self.budget_s


@dataclass(frozen=True)
class Settled:
    """Warm-up is over when a step's median is no more than `tolerance` below the best step so
    far (first-run effects, lazy loading and clocks ramping up make early steps slower)."""

    tolerance: float = 0.05

    def enough(self, best: float | None, step: float) -> bool:
        return best is not None and step >= best * (1.0 - self.tolerance)


@dataclass(frozen=True)
class StoppingRule:
    """The criteria one sampling phase stops by."""

    leader: RelativeCI          # the leader's samples
    paired: RelativeCI          # each contender's paired ratios to the leader
    separated: Separated        # a contender that can no longer tie drops out
    cap: SampleCap              # per finalist
    budget: TimeBudget          # the whole phase
