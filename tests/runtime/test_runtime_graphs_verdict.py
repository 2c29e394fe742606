"""The rule that keeps or drops whole-model CUDA graphs after measuring them (pure logic)."""

from __future__ import annotations

import pytest

from convdoctor.runtime.verdicts import graphs_choice, graphs_verdict


@pytest.mark.parametrize("graphed,eager,host,keep", [
    (9.0, 10.0, 1.0, True),      # clearly faster
    (9.8, 10.0, 1.0, False),     # 2% faster, not host-bound: within the 3% margin
    (9.8, 10.0, 9.5, False),     # ... nor when the eager step is host-bound
    (3.381, 3.404, 2.82, False),  # a tie with a host-bound eager step is not a win
    (3.43, 3.404, 2.82, False),  # 0.8% slower
    (1.101, 1.102, 0.44, False),  # tie, not host-bound
])
def test_graphs_verdict(graphed: float, eager: float, host: float, keep: bool) -> None:
    assert graphs_verdict(graphed, eager, host, 0.03) == (keep, "")


def test_forced() -> None:
    assert graphs_verdict(20.0, 10.0, 0.0, 0.03, forced=True) == (True, "asked for")


def test_a_tied_replay_is_not_kept_whatever_the_host_time() -> None:
    """A replay within noise of a host-bound eager step (speech front end, training, on an
    H100: 3.381 vs 3.404 ms with 2.82 ms of host CPU) is not faster beyond noise."""
    s = {"eager": _steps(3.404), "graphed": _steps(3.381)}
    c = graphs_choice(s, 2.82, None, rounds=3)
    assert not c.keep and c.why == ""
    assert graphs_choice(s, 2.82, None, forced=True, rounds=3).keep


# ---------------------------------------------------------------- layout under CUDA graphs
from convdoctor.runtime.verdicts import layout_verdict  # noqa: E402


def _steps(ms: float, n: int = 9, jitter: float = 0.001) -> list[float]:
    return [ms * (1 + jitter * ((i % 3) - 1)) for i in range(n)]


def test_layout_eager_only_is_the_eager_comparison() -> None:
    win, m, a, c = layout_verdict({"as_given": _steps(3.156), "channels_last": _steps(2.902)},
                                  0.03)
    assert (win, m, a, c) == (True, 0.03, "as_given", "channels_last")
    assert not layout_verdict({"as_given": _steps(3.0), "channels_last": _steps(2.95)}, 0.03)[0]


def test_layout_is_judged_by_each_layouts_faster_mode() -> None:
    # 3D U-Net inference on an H100: channels_last wins eagerly on a host-bound step, but the
    # NCHW kernels replay faster than the channels_last ones: as given.
    s = {"as_given": _steps(3.156), "channels_last": _steps(2.902),
         "as_given_graphed": _steps(2.35), "channels_last_graphed": _steps(2.79)}
    win, _, a, c = layout_verdict(s, 0.03)
    assert not win and (a, c) == ("as_given_graphed", "channels_last_graphed")
    # the other way round: eager says as given, the replays say channels_last
    s = {"as_given": _steps(26.5), "channels_last": _steps(27.0),
         "as_given_graphed": _steps(21.5), "channels_last_graphed": _steps(18.0)}
    assert layout_verdict(s, 0.03)[0]


def test_layout_graphed_on_one_side_only() -> None:
    # channels_last could not be captured: its eager time against as given's faster mode
    s = {"as_given": _steps(10.0), "channels_last": _steps(8.0), "as_given_graphed": _steps(7.0)}
    win, _, a, c = layout_verdict(s, 0.03)
    assert not win and (a, c) == ("as_given_graphed", "channels_last")


def test_layout_margin_from_the_samples() -> None:
    # no fixed margin: at least 1%, wider for noisy samples
    quiet = {"as_given": _steps(10.0), "channels_last": _steps(9.8)}
    noisy = {"as_given": _steps(10.0, jitter=0.2), "channels_last": _steps(9.8, jitter=0.2)}
    wq, mq, _, _ = layout_verdict(quiet, None)
    wn, mn, _, _ = layout_verdict(noisy, None)
    assert wq and mq == pytest.approx(0.01)
    assert not wn and mn > 0.02


# ---------------------------------------------------------------- what the graphs decision captures
from convdoctor.runtime.graphs_decision import decide_graphs, graph_route_differs  # noqa: E402
from convdoctor.runtime.layout import graph_args  # noqa: E402
from convdoctor.runtime.options import OptimizeOptions  # noqa: E402
from convdoctor.runtime.report import DirectionChoice, LayerChoice, OptimizeReport  # noqa: E402


def _report(routing: bool, *dirs: DirectionChoice) -> OptimizeReport:
    r = OptimizeReport(device="cuda", train=True, routing=routing)
    r.layers.append(LayerChoice("conv", (1, 3, 8, 8), "float32", "contiguous", list(dirs)))
    return r


def test_graph_route_differs() -> None:
    plan = DirectionChoice("fprop", "cudnn:eng1", "db")
    plan_g = DirectionChoice("fprop", "cudnn:eng1", "db", graph_key="cudnn:eng2")
    torch_ = DirectionChoice("fprop", "torch:heuristic", "tuned")
    torch_g = DirectionChoice("fprop", "torch:heuristic", "tuned", graph_key="cudnn:eng2")
    untuned = DirectionChoice("fprop", "torch:default", "pytorch", graph_key="cudnn:eng2")
    # routing on: the plain capture runs the eager routes; only a graph route differs
    assert not graph_route_differs(_report(True, plan, torch_))
    assert graph_route_differs(_report(True, plan_g))
    # routing off: the plain capture runs PyTorch's path; any tuned non-PyTorch route differs
    assert graph_route_differs(_report(False, plan))
    assert graph_route_differs(_report(False, torch_g))
    assert not graph_route_differs(_report(False, torch_))
    assert not graph_route_differs(_report(False, untuned))  # no tuned choice at all


def test_graphs_are_not_tried_where_they_cannot_be() -> None:
    import torch

    m, x = torch.nn.Conv2d(3, 4, 3), torch.randn(1, 3, 8, 8)
    for opts, dev, inputs, why in (
            (OptimizeOptions(graphs=False), "cuda", x, "not asked for"),
            (OptimizeOptions(), "cpu", x, "CUDA graphs need a CUDA device"),
            (OptimizeOptions(graphs=True), "cuda", {"x": x}, "graphs need positional tensor")):
        r = OptimizeReport(device=dev, train=True)
        assert decide_graphs(m, inputs, opts, False, r, dev) is False
        assert r.graphs_reason.startswith(why) and not r.graphs
    assert "forward" not in m.__dict__


def test_graph_args_follow_the_layout() -> None:
    import torch

    x, y = torch.randn(2, 3, 4, 4), torch.randn(2, 5)
    assert graph_args(x, False) == (x,)
    got = graph_args([x, y], True)
    assert got is not None and got[0].is_contiguous(memory_format=torch.channels_last)
    assert got[1] is y
    assert graph_args((x, 3), False) is None
