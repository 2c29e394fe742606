"""The graphs decision's timing and what it installs, on the CPU: stand-in graphs whose replay and
eager costs are known (a synthetic clock, `rt_clock`) take the place of captured CUDA graphs."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
from rt_clock import FakeClock, use_clock

from convdoctor.runtime import graphs as G
from convdoctor.runtime import graphs_decision as D
from convdoctor.runtime import site as S
from convdoctor.runtime.options import OptimizeOptions
from convdoctor.runtime.report import OptimizeReport
from convdoctor.runtime.verdicts import graphs_choice

CLOCK = FakeClock()


@pytest.fixture(autouse=True)
def _synthetic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    use_clock(monkeypatch, CLOCK)


class FakeGraph(G.GraphedForward):
    """A model's forward that 'replays' (costs `replay_s`, counted in `replays`) when enabled
    and runs eagerly (costs `eager_s`) when not; `replays_counted=False`: a graph whose replay
    never happens (every call takes the eager path). Nothing is captured."""

    def __init__(self, model: nn.Module, replay_s: float, eager_s: float,
                 replays_counted: bool = True) -> None:
        self.orig_forward = type(model).forward.__get__(model)
        self.replay_s, self.eager_s, self.counted = replay_s, eager_s, replays_counted
        self.enabled, self.replays = True, 0

    def __call__(self, *args: Any) -> Any:
        if self.enabled and self.counted:
            self.replays += 1
            CLOCK.advance(self.replay_s)
        else:
            CLOCK.advance(self.eager_s)
        return self.orig_forward(*args)


def _model() -> tuple[nn.Module, torch.Tensor, dict[str, S.Site]]:
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1))
    return m, torch.randn(1, 3, 8, 8), {"0": S.install(m[0], "0", "cpu")}


def _decide(g: FakeGraph, g_routed: FakeGraph | None, sites: dict[str, S.Site], m: nn.Module,
            x: torch.Tensor, routing: bool) -> tuple[OptimizeReport, bool]:
    opts = OptimizeOptions(train=False, steps=9, margin=0.2)
    report = OptimizeReport(device="cpu", train=False, routing=routing, routing_reason="r")
    samples, host, ok = D._time_graphs(m, x, opts, report, "cpu", g, g_routed)
    assert ok
    G.attach(m, g)  # as decide_graphs does after timing
    c = graphs_choice(samples, 0.0, opts.margin)
    ms = {k: sum(v) / len(v) for k, v in samples.items()}
    D._report_graphs(report, ms, c, 0.0)
    return report, D._apply(m, report, c, ms, g, g_routed, sites)


def test_the_routes_capture_is_kept_when_its_replay_wins() -> None:
    m, x, sites = _model()
    sites["0"].enabled = False  # routing lost eagerly
    g = FakeGraph(m, replay_s=0.020, eager_s=0.040)
    g_routed = FakeGraph(m, replay_s=0.002, eager_s=0.040)
    report, routed = _decide(g, g_routed, sites, m, x, routing=False)
    assert routed and report.graphs and report.routing
    assert "graphed with the routes" in report.graphs_reason
    assert "-> graph routes" in report.routing_reason and "PyTorch's path" in report.routing_reason
    assert m.forward is g_routed and g_routed.enabled
    # outside the graph (other shapes, torch.compile) the eager verdict holds: PyTorch's path
    assert not sites["0"].enabled and "outside the graph, PyTorch's path" in report.routing_reason
    assert set(report.margins) == {"graphs", "graph_routes"}


def test_routes_that_won_eagerly_too_run_outside_the_graph() -> None:
    m, x, sites = _model()
    g = FakeGraph(m, replay_s=0.020, eager_s=0.040)
    g_routed = FakeGraph(m, replay_s=0.002, eager_s=0.040)
    report, routed = _decide(g, g_routed, sites, m, x, routing=True)
    assert routed and sites["0"].enabled
    assert "outside the graph, the eager routes" in report.routing_reason


def test_under_torch_compile_the_graphs_step_aside_before_any_untraceable_check(
        monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def untraceable() -> bool:
        raise AssertionError("checked under torch.compile: a graph break")

    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(torch, "is_inference_mode_enabled", untraceable)
    g = object.__new__(G.GraphedForward)
    assert g.matches((torch.zeros(1),), {}) is False


def test_a_routes_capture_that_never_replays_decides_nothing() -> None:
    m, x, sites = _model()
    g = FakeGraph(m, replay_s=0.002, eager_s=0.030)
    dead = FakeGraph(m, replay_s=0.0, eager_s=0.0, replays_counted=False)  # eager, yet "fast"
    report, routed = _decide(g, dead, sites, m, x, routing=True)
    assert not routed and report.graphs and "graphed_routed" not in report.graphs_ms
    assert m.forward is g and g.enabled


def test_graphs_that_lose_are_uninstalled() -> None:
    m, x, sites = _model()
    g = FakeGraph(m, replay_s=0.030, eager_s=0.002)
    report, routed = _decide(g, None, sites, m, x, routing=True)
    assert not routed and not report.graphs and report.graphs_reason.endswith("-> eager")
    assert "forward" not in m.__dict__


@pytest.mark.parametrize("error,failed", [
    ("CUDA error: operation failed due to a previous error during capture", False),
    ("CUDA out of memory. Tried to allocate 2.00 GiB", True),
])
def test_a_step_that_cannot_be_captured_is_a_verdict_but_out_of_memory_a_failed_step(
        monkeypatch: pytest.MonkeyPatch, error: str, failed: bool) -> None:
    """A model whose step invalidates a capture stays eager in every process (its decision may
    be stored and reused); out of memory may pass, so that run's decisions are not stored."""
    m, x, _ = _model()

    def install(*a: Any, **k: Any) -> Any:
        raise RuntimeError(error)

    tries: list[int] = []

    def counted(*a: Any, **k: Any) -> Any:
        tries.append(1)
        return install(*a, **k)

    monkeypatch.setattr(G, "install", counted)
    report = OptimizeReport(device="cuda", train=False)
    kept = D.decide_graphs(m, x, OptimizeOptions(train=False), False, report, "cuda")
    assert not kept and report.graphs_reason.startswith("not capturable")
    assert ("graphs" in report.failed_steps) is failed
    assert len(tries) == (1 if failed else 2)     # a verdict only after a second failure


class _Reached(BaseException):
    pass


def test_a_capture_that_fails_once_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    m, x, _ = _model()
    calls: list[int] = []

    def flaky(*a: Any, **k: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        raise _Reached   # the second attempt ran (its result is not needed here)

    monkeypatch.setattr(G, "install", flaky)
    report = OptimizeReport(device="cuda", train=False)
    with pytest.raises(_Reached):
        D.decide_graphs(m, x, OptimizeOptions(train=False), False, report, "cuda")
    assert len(calls) == 2 and not report.failed_steps
