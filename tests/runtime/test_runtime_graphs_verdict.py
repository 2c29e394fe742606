"""The rule that keeps or drops whole-model CUDA graphs after measuring them (pure logic)."""

from __future__ import annotations

import pytest

from convdoctor.runtime.optimizer import GRAPHS_HOST_BOUND, GRAPHS_TIE, graphs_verdict


@pytest.mark.parametrize("graphed,eager,host,keep", [
    (9.0, 10.0, 1.0, True),      # clearly faster
    (9.8, 10.0, 1.0, False),     # 2% faster, not host-bound: within the 3% margin
    (3.381, 3.404, 2.82, True),  # tie, host-bound eager step (speech train, session 3 run 2)
    (3.43, 3.404, 2.82, True),   # 0.8% slower: still a tie, host-bound
    (3.46, 3.404, 2.82, False),  # 1.6% slower: not a tie
    (1.101, 1.102, 0.44, False),  # tie but the eager step is not host-bound
])
def test_graphs_verdict(graphed: float, eager: float, host: float, keep: bool) -> None:
    got, why = graphs_verdict(graphed, eager, host, 0.03)
    assert got is keep
    if got and graphed >= eager * 0.97:
        assert "host-bound" in why


def test_forced_and_constants() -> None:
    assert graphs_verdict(20.0, 10.0, 0.0, 0.03, forced=True) == (True, "asked for")
    assert 0 < GRAPHS_TIE < 0.03 and 0.5 <= GRAPHS_HOST_BOUND < 1.0
    # host time exactly at the threshold counts as host-bound
    assert graphs_verdict(10.0, 10.0, GRAPHS_HOST_BOUND * 10.0, 0.03)[0]
