"""The end-to-end verify and its margin: routes ranked without host cost can win eagerly (a
GPU-bound step hides the host cost of a plan call), and the default margin comes from the
measurement. CPU, with executors that cost a known time on a synthetic clock (`rt_clock`) standing
in for slow and fast paths."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn as nn
from rt_clock import FakeClock, use_clock

from convdoctor.engines.flag_exec import FlagExec
from convdoctor.measure.steps import MIN_MARGIN, rel_se_of_median, win_margin
from convdoctor.runtime import optimizer as O
from convdoctor.runtime import site as S
from convdoctor.runtime.options import OptimizeOptions
from convdoctor.runtime.record import record_calls
from convdoctor.runtime.report import DirectionChoice, LayerChoice, OptimizeReport
from convdoctor.runtime.verify import verify_routing

CLOCK = FakeClock()


@pytest.fixture(autouse=True)
def _synthetic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    use_clock(monkeypatch, CLOCK)


class SleepExec(FlagExec):
    """PyTorch's path plus a fixed cost on the synthetic clock: a route whose cost we know."""

    def __init__(self, key: str, wait_s: float) -> None:
        super().__init__(key, {})
        self.wait_s = wait_s

    def fprop(self, x, w, b, a):  # type: ignore[no-untyped-def]
        CLOCK.advance(self.wait_s)
        return super().fprop(x, w, b, a)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def _setup(eager_wait: float, graph_wait: float, unrouted_wait: float
           ) -> tuple[Net, torch.Tensor, dict[str, S.Site], OptimizeReport]:
    torch.manual_seed(0)
    m, x = Net(), torch.randn(1, 3, 8, 8)
    site = S.install(m.conv, "conv", "cpu")
    sites = {"conv": site}
    key = record_calls(m, x, False, sites)["conv"][0]["key"]

    def route(ex: FlagExec) -> S.Route:
        chain = S.build_chain([ex], "cpu")
        return S.Route({"fprop": chain, "dgrad": chain, "wgrad": chain}, source="tuned")

    site.routes[key] = route(SleepExec("cudnn:slow-eager", eager_wait))
    site.graph_routes[key] = route(SleepExec("cudnn:fast", graph_wait))
    # every step pays 1 ms (the rest of the model); PyTorch's path (routing off) pays
    # `unrouted_wait` more (a pre-hook that sees the shared site)
    m.register_forward_pre_hook(lambda mod, args: CLOCK.advance(0.001))
    m.register_forward_pre_hook(lambda mod, args: None if site.enabled
                                else CLOCK.advance(unrouted_wait))
    report = OptimizeReport(device="cpu", train=False)
    report.layers.append(LayerChoice(
        layer="conv", x_shape=(1, 3, 8, 8), dtype="float32", memory_format="contiguous",
        directions=[DirectionChoice(
            direction="fprop", key="cudnn:slow-eager", source="db", winner_ms=0.5,
            chain=["cudnn:slow-eager", "torch:default"], graph_key="cudnn:fast",
            graph_chain=["cudnn:fast", "torch:default"], graph_winner_ms=0.1)]))
    return m, x, sites, report


def _opts(margin: float | None = None) -> OptimizeOptions:
    return OptimizeOptions(train=False, steps=6, margin=margin)


def test_routes_without_host_cost_win_eagerly_and_become_the_routes() -> None:
    m, x, sites, report = _setup(eager_wait=0.048, graph_wait=0.0, unrouted_wait=0.024)
    verify_routing(m, x, sites, report, _opts(), "cpu",
                   keep_sites=True)
    assert set(report.verify_ms) == {"routed", "unrouted", "routed_nohost", "chosen"}
    assert report.routing, report.routing_reason
    assert "routed without host cost per plan call" in report.routing_reason
    assert report.verify_ms["chosen"] == report.verify_ms["routed_nohost"]
    s = sites["conv"]
    assert s.enabled and not s.graph_routes
    assert [r.current(0).key for r in s.routes.values()] == ["cudnn:fast"]
    d = report.layers[0].directions[0]
    assert (d.key, d.graph_key, d.chain, d.winner_ms) == (
        "cudnn:fast", "", ["cudnn:fast", "torch:default"], 0.1)
    with torch.no_grad():  # the adopted route runs (and computes the same convolution)
        torch.testing.assert_close(m(x), torch.nn.functional.conv2d(
            x, m.conv.weight, m.conv.bias, padding=1))


def test_eager_routes_stay_when_they_win_and_nothing_is_kept_when_nothing_wins() -> None:
    m, x, sites, report = _setup(eager_wait=0.0, graph_wait=0.048, unrouted_wait=0.024)
    verify_routing(m, x, sites, report, _opts(), "cpu",
                   keep_sites=True)
    assert report.routing and "-> routed" in report.routing_reason, report.routing_reason
    s = sites["conv"]
    assert [r.current(0).key for r in s.routes.values()] == ["cudnn:slow-eager"]
    assert s.graph_routes  # still there for the graphs decision
    assert report.layers[0].directions[0].graph_key == "cudnn:fast"

    m, x, sites, report = _setup(eager_wait=0.048, graph_wait=0.048, unrouted_wait=0.0)
    verify_routing(m, x, sites, report, _opts(), "cpu",
                   keep_sites=False)
    assert not report.routing and "routing was not faster" in report.routing_reason
    assert S.site_of(m.conv) is None  # no wrapper left: exactly PyTorch's path


def test_a_fixed_margin_is_honoured() -> None:
    # routes 5 ms faster on a 6 ms step: a win by the measured margin, not by a 99% one
    m, x, sites, report = _setup(eager_wait=0.001, graph_wait=0.001, unrouted_wait=0.006)
    verify_routing(m, x, sites, report, _opts(margin=0.99), "cpu",
                   keep_sites=True)
    assert not report.routing and report.margins["routing"] == 0.99


def test_win_margin_follows_the_noise() -> None:
    rng = random.Random(3)

    def draw(mu: float, rel_sd: float, n: int = 9) -> list[float]:
        return [mu * (1 + rng.gauss(0, rel_sd)) for _ in range(n)]

    quiet = win_margin(draw(1.05, 0.002), draw(1.03, 0.002))
    noisy = win_margin(draw(3.8, 0.05), draw(3.8, 0.05))
    assert quiet == MIN_MARGIN                  # steady GPU-bound steps: the 1% floor
    assert 0.02 < noisy < 0.5                   # a host-bound step's noise asks for more
    assert win_margin([1.0, 2.0], [1.0, 2.0, 3.0]) == 0.5   # too few samples to tell
    assert rel_se_of_median([2.0] * 5) == 0.0
    assert rel_se_of_median([1.0, 1.0]) == float("inf")


def test_optimize_rejects_a_bad_margin() -> None:
    from convdoctor.errors import UsageError

    with pytest.raises(UsageError, match="margin"):
        O.optimize(Net(), torch.randn(1, 3, 8, 8), margin=1.5)
