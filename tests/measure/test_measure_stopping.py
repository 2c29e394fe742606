"""The named stopping criteria (`convdoctor.measure.stopping`), each on its own: the median's
confidence interval, the relative CI, separation, caps on samples and time, a settled warm-up."""

from __future__ import annotations

import math

import pytest

from convdoctor.measure.stopping import (
    RelativeCI,
    SampleCap,
    Separated,
    Settled,
    TimeBudget,
    median_ci,
    rel_ci_halfwidth,
)


def test_the_median_ci_is_the_binomial_order_statistics() -> None:
    # n=10: ranks 5 -+ 1.96 * sqrt(10) / 2 = 3.1 -> the 2nd and 9th smallest
    values = [float(v) for v in (10, 1, 9, 2, 8, 3, 7, 4, 6, 5)]
    assert median_ci(values) == (5.5, 2.0, 9.0)
    assert median_ci([3.0, 1.0]) == (2.0, 1.0, 3.0)     # under 3 values: the range
    assert all(math.isnan(v) for v in median_ci([]))
    assert rel_ci_halfwidth(values) == pytest.approx(3.5 / 5.5)
    assert rel_ci_halfwidth([]) == math.inf and rel_ci_halfwidth([0.0, 0.0, 0.0]) == math.inf


def test_relative_ci_needs_its_samples_and_a_tight_median() -> None:
    rule = RelativeCI(target=0.01, min_samples=10)
    steady = [1e-3] * 9
    assert not rule.enough(steady)                       # 9 < min_samples, however tight
    assert rule.enough(steady + [1e-3])
    noisy = [1e-3 * (1 + 0.05 * ((i * 7) % 5 - 2)) for i in range(40)]   # +-10% spread
    assert not rule.enough(noisy)
    assert RelativeCI(target=0.2, min_samples=10).enough(noisy)


def test_separated_drops_a_contender_only_when_it_cannot_tie() -> None:
    rule = Separated(band=0.02, min_rounds=6)
    assert not rule.enough([1.05] * 5)                   # too few rounds to tell
    assert rule.enough([1.05] * 6)                       # CI's low end 1.05 > 1.02
    assert not rule.enough([1.01] * 20)                  # within the band: may tie
    # one round far behind among rounds near the leader: the CI's low end is what counts
    assert not rule.enough([1.015] * 5 + [3.0] * 2)


def test_caps_on_samples_and_time() -> None:
    assert not SampleCap(max_samples=3).enough([1.0, 1.0])
    assert SampleCap(max_samples=3).enough([1.0, 1.0, 1.0])
    budget = TimeBudget(budget_s=2.0)
    assert not budget.enough(started=10.0, now=11.999)
    assert budget.enough(started=10.0, now=12.0)


def test_warm_up_is_settled_when_a_step_stops_getting_faster() -> None:
    rule = Settled(tolerance=0.05)
    assert not rule.enough(None, 1.0)                    # the first step: nothing to compare
    assert not rule.enough(1.0, 0.94)                    # 6% faster: still warming up
    assert rule.enough(1.0, 0.96)                        # within 5%: settled
    assert rule.enough(1.0, 1.3)                         # slower: settled (noise)
