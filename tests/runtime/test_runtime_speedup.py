"""The speedup optimize reports is the one measured for the model it leaves, against the model as
given, with its interval; a variant is kept only when faster beyond noise, round by round; when
nothing is faster the model runs exactly as PyTorch runs it. Synthetic timers (`rt_clock`): every
step costs exactly what the test says, so none of this depends on the machine's load."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
from rt_clock import Costed, FakeClock, use_clock

from convdoctor.measure.steps import time_interleaved
from convdoctor.runtime import optimizer as O
from convdoctor.runtime import site as S
from convdoctor.runtime.feedback import summary_line
from convdoctor.runtime.options import OptimizeOptions
from convdoctor.runtime.report import OptimizeReport
from convdoctor.runtime.speedup import SPEEDUP_ROUNDS, measure_speedup, steps_per_round
from convdoctor.runtime.verdicts import (
    graphs_choice,
    layout_verdict,
    median_interval,
    per_round,
    round_ratios,
    routing_choice,
    routing_undecided,
    split_rounds,
)


# ---------------------------------------------------------------------- the statistics
def test_median_interval_is_the_order_statistics_with_their_coverage() -> None:
    r = [1.05, 0.97, 1.10, 1.02, 1.01, 1.03, 1.04, 0.99, 1.06]
    lo, hi, cov = median_interval(r)
    assert (lo, hi) == (0.99, 1.06)                 # the 2nd smallest and 2nd largest of nine
    assert cov == pytest.approx(1 - 2 * 10 / 512)  # 96.1%
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0, 0.75)  # too few for 95%: min, max
    lo, hi, cov = median_interval(range(12))
    assert (lo, hi) == (2, 9) and cov >= 0.95       # the 3rd from each end of twelve
    nan_lo, _, c0 = median_interval([])
    assert nan_lo != nan_lo and c0 == 0.0


def test_round_ratios_pair_the_rounds_in_time_order() -> None:
    assert split_rounds([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    fast = [1.0, 1.0, 2.0, 2.0]
    slow = [2.0, 2.0, 2.0, 2.0]
    assert round_ratios(fast, slow, 2) == [2.0, 1.0]
    assert per_round(10) == 3 and per_round(2) == 1


# ---------------------------------------------------------------------- the noisy timer trap
def _bursty_samples(clock: FakeClock, variant_s: float, incumbent_s: float,
                    burst: Callable[[int], float], steps: int = 9) -> dict[str, list[float]]:
    """`time_interleaved` of a challenger costing `variant_s` per step and an incumbent costing
    `incumbent_s` times `burst(i)` on its i-th step (load that comes and goes)."""
    calls = itertools.count()
    variants = {"routed": lambda: clock.advance(variant_s),
                "unrouted": lambda: clock.advance(incumbent_s * burst(next(calls)))}
    return time_interleaved(variants, "cpu", warmup=2, steps=steps, rounds=3)


def test_a_slower_variant_is_not_kept_when_load_slows_the_incumbents_rounds(monkeypatch) -> None:
    """Routes 3.5% slower than PyTorch's path (0.965x), while another process loads the machine
    (15%) during the 2nd and 3rd rounds of PyTorch's path. Each round's samples agree, so the
    spread of all samples is nil and the medians alone read as a 10% win: the old rule kept
    the routes. Round by round the routes lost the first round: not faster beyond noise."""
    clock = use_clock(monkeypatch, FakeClock())
    # the incumbent's steps: 3 before the rounds (2 warm-up, 1 untimed), then 1 warm-up + 3 per
    # round: its 2nd and 3rd rounds are its steps 7 to 14
    samples = _bursty_samples(clock, 1.035e-3, 1.0e-3, lambda i: 1.15 if 7 <= i < 15 else 1.0)
    assert samples["unrouted"] == pytest.approx([1.0] * 3 + [1.15] * 6)
    assert samples["routed"] == pytest.approx([1.035] * 9)
    old_rule = routing_choice(samples, None)  # medians and their spread only
    assert old_rule[2] is True
    best, margin, keep = routing_choice(samples, None, rounds=per_round(9))
    assert best == "routed" and not keep
    # undecided: more rounds can tell; the load is gone in them, and the routes lose
    assert routing_undecided(samples, None, rounds=3)
    more = _bursty_samples(clock, 1.035e-3, 1.0e-3, lambda i: 1.0)
    both = {k: samples[k] + more[k] for k in samples}
    assert not routing_choice(both, None, rounds=3)[2]
    assert not routing_undecided(both, None, rounds=3)


def test_every_decision_uses_the_round_by_round_rule(monkeypatch) -> None:
    clock = use_clock(monkeypatch, FakeClock())
    s = _bursty_samples(clock, 1.035e-3, 1.0e-3, lambda i: 1.15 if 7 <= i < 15 else 1.0)
    slow, fast = s["unrouted"], s["routed"]
    lay = {"as_given": slow, "channels_last": fast}
    assert layout_verdict(lay, None)[0] and not layout_verdict(lay, None, rounds=3)[0]
    g = {"eager": slow, "graphed": fast}
    assert graphs_choice(g, 0.0, None).keep and not graphs_choice(g, 0.0, None, rounds=3).keep
    g = {"eager": [v * 2 for v in slow], "graphed": slow, "graphed_routed": fast}
    c = graphs_choice(g, 0.0, None, rounds=3)
    assert c.keep and not c.routed  # the routes' replay does not beat the plain one beyond noise
    # a fixed margin does not replace the rule
    assert not routing_choice({"routed": fast, "unrouted": slow}, 0.0, rounds=3)[2]


def test_a_real_win_is_kept(monkeypatch) -> None:
    clock = use_clock(monkeypatch, FakeClock())
    s = _bursty_samples(clock, 0.96e-3, 1.0e-3, lambda i: 1.0)
    assert routing_choice(s, None, rounds=3)[2]


# ---------------------------------------------------------------------- optimize end to end
def _optimize(monkeypatch: Any, costs: dict[str, float], **kw: Any
              ) -> tuple[Costed, OptimizeReport]:
    clock = use_clock(monkeypatch, FakeClock())
    m = Costed(clock, costs)
    kw = {"db": False, "tune_missing": False, "channels_last": False, "steps": 9,
          "progress": False, **kw}
    O.optimize(m, torch.randn(1, 3, 8, 8), train=False, **kw)
    rep = O.report_of(m)
    assert rep is not None
    return m, rep


def _as_pytorch_runs_it(m: Costed) -> bool:
    return S.site_of(m.conv) is None and "forward" not in m.conv.__dict__ and \
        not m._forward_hooks and not m._forward_pre_hooks and "forward" not in m.__dict__


def test_the_speedup_is_measured_for_the_model_left_against_the_model_as_given(
        monkeypatch) -> None:
    m, rep = _optimize(monkeypatch, {"given": 1.0, "unrouted": 1.0, "routed": 0.8})
    assert rep.routing and S.site_of(m.conv) is not None
    assert rep.speedup == pytest.approx(1.25)
    assert rep.speedup_ci == pytest.approx([1.25, 1.25])
    assert rep.speedup_samples == pytest.approx([1.25] * SPEEDUP_ROUNDS)
    assert rep.speedup_level == pytest.approx(1 - 2 * 10 / 512)
    assert rep.speedup_ms == pytest.approx({"as_given": 1.0, "optimized": 0.8})
    assert rep.speedup_source.startswith(f"measured: the model as given and as optimized, "
                                         f"{SPEEDUP_ROUNDS} interleaved rounds")
    assert summary_line(rep) == (
        "convdoctor: 1 convolution problem (0 from the database, 1 on PyTorch's path); "
        "measured 1.25x (1.25-1.25) over the model as given: routing on, channels_last off, "
        "CUDA graphs off")


def test_when_every_decision_loses_the_model_runs_as_pytorch_runs_it(monkeypatch) -> None:
    m, rep = _optimize(monkeypatch, {"given": 1.0, "unrouted": 1.0, "routed": 2.0})
    assert not rep.routing and not rep.channels_last and not rep.graphs and not rep.changed
    assert _as_pytorch_runs_it(m)
    assert rep.speedup is None and rep.speedup_ci == [] and rep.speedup_ms == {}
    assert summary_line(rep).endswith(
        "; no layout, routing or graph variant was measured faster: optimize leaves the model "
        "as PyTorch runs it")


def test_changes_not_faster_end_to_end_are_undone(monkeypatch) -> None:
    """Routes 3.5% slower than the model as given, kept by a verify session during which load
    slowed PyTorch's path in every round (no measurement can tell that apart): the last check,
    against the model as given, measures 0.966x and undoes everything; no speedup is reported
    for a model the caller does not get."""
    m, rep = _optimize(monkeypatch, {"given": 1.0, "unrouted": 1.15, "routed": 1.035})
    assert "routing was not faster" not in rep.routing_reason and "undone" in rep.routing_reason
    assert not rep.routing and _as_pytorch_runs_it(m) and O.report_of(m) is rep
    assert rep.speedup is None and rep.speedup_ci == [] and rep.speedup_samples == []
    assert rep.speedup_source == "the changes together were not measured faster end to end"
    note = [n for n in rep.notes if n.startswith("the optimized model (routing) was not")]
    assert note and "as given 1.000 ms, optimized 1.035 ms" in note[0]
    assert "optimize leaves the model as PyTorch runs it" in summary_line(rep)
    with torch.no_grad():
        m(torch.randn(1, 3, 8, 8))  # still runs


def test_a_change_asked_for_is_kept_and_its_figure_reported(monkeypatch) -> None:
    m, rep = _optimize(monkeypatch, {"given": 1.0, "unrouted": 1.0, "routed": 2.0},
                       channels_last=True)
    assert rep.channels_last and not rep.routing and m._forward_pre_hooks
    assert rep.speedup == pytest.approx(1.0) and rep.speedup_ci == pytest.approx([1.0, 1.0])
    assert "measured 1.00x (1.00-1.00) over the model as given: routing off, channels_last on" \
        in summary_line(rep)


def test_graphs_asked_for_where_there_are_none_protect_nothing(monkeypatch) -> None:
    m, rep = _optimize(monkeypatch, {"given": 1.0, "unrouted": 1.15, "routed": 1.035},
                       graphs=True)
    assert not rep.graphs and not rep.routing and _as_pytorch_runs_it(m)


def test_without_verify_nothing_is_timed_and_no_speedup_is_claimed(monkeypatch) -> None:
    m, rep = _optimize(monkeypatch, {"given": 1.0, "unrouted": 1.0, "routed": 1.0},
                       verify=False)
    assert rep.routing and rep.speedup is None
    assert rep.speedup_source == "not measured (verify=False)"
    assert summary_line(rep).endswith("; not measured (verify=False): routing on, "
                                      "channels_last off, CUDA graphs off")


def test_the_old_composite_figure_is_gone() -> None:
    """Timings of the separate decisions (other sessions, other variants) make no speedup."""
    rep = OptimizeReport(device="cpu", train=True, layout_ms={"as_given": 2.0},
                         verify_ms={"chosen": 1.0}, graphs_ms={"chosen": 0.5})
    assert rep.speedup is None


def test_measuring_leaves_the_models_statistics_and_gradients(monkeypatch) -> None:
    clock = use_clock(monkeypatch, FakeClock(tick=1e-4))
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten())
    given = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten())
    for p in m.parameters():
        p.grad = torch.full_like(p, 7.0)
    before = [b.clone() for b in m.buffers()]
    rep = OptimizeReport(device="cpu", train=True)
    assert measure_speedup(given, m, torch.randn(2, 3, 6, 6), OptimizeOptions(steps=5), rep,
                           "cpu")
    assert all(torch.equal(a, b) for a, b in zip(before, m.buffers(), strict=True))
    assert all(torch.equal(p.grad, torch.full_like(p, 7.0)) for p in m.parameters())
    assert len(rep.speedup_samples) == SPEEDUP_ROUNDS and steps_per_round(5) == 1
    assert clock.t > 1000.0


def test_a_step_that_fails_leaves_no_figure() -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    rep = OptimizeReport(device="cpu", train=False)
    assert not measure_speedup(Boom(), Boom(), torch.randn(1), OptimizeOptions(train=False),
                               rep, "cpu")
    assert rep.speedup is None and rep.speedup_source.startswith("not measured: a step failed")


def test_the_summary_goes_to_logging_when_stderr_is_no_terminal(monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO, logger="convdoctor")
    _optimize(monkeypatch, {"given": 1.0, "unrouted": 1.0, "routed": 2.0}, progress=None)
    lines = [r.getMessage() for r in caplog.records if r.name == "convdoctor"]
    assert lines == ["convdoctor: 1 convolution problem (0 from the database, 1 on PyTorch's "
                     "path); no layout, "
                     "routing or graph variant was measured faster: optimize leaves the model "
                     "as PyTorch runs it"]
