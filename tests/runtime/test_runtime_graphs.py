"""Whole-model CUDA graphs (`optimize(..., graphs=...)`, `runtime.graphs`): a graphed training loop
gives the eager losses and gradients, outputs kept across steps stay valid, gradients accumulate
over two backward calls, other shapes/modes/contexts run eagerly, and restore() removes it all.
The capture itself needs CUDA: those tests are marked `gpu`; the CPU ones check the decisions."""

from __future__ import annotations

import copy
import gc
from typing import Any

import pytest
import torch
import torch.nn as nn

import convdoctor
from convdoctor.errors import UsageError
from convdoctor.runtime import graphs as G
from convdoctor.runtime.optimizer import report_of


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 8, 1), nn.ReLU())
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean(dim=(2, 3)))


def _opt(model: nn.Module, x: torch.Tensor, train: bool, graphs: object = True) -> nn.Module:
    return convdoctor.optimize(model, x, train=train, db=False, tune_missing=False,
                               graphs=graphs, channels_last=False, steps=3)


def test_cpu_model_keeps_eager_with_reason() -> None:
    m = Net()
    _opt(m, torch.randn(2, 3, 8, 8), train=True, graphs="auto")
    rep = report_of(m)
    assert rep is not None and not rep.graphs and "CUDA" in rep.graphs_reason
    assert G.installed(m) is None


def test_bad_graphs_argument_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="graphs"):
        _opt(Net(), torch.randn(2, 3, 8, 8), train=True, graphs="yes")


def _losses(model: nn.Module, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    out = []
    for x, y in zip(xs, ys, strict=True):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        out.append(float(loss))
    return out


@pytest.mark.gpu
def test_graphed_training_matches_eager_gpu() -> None:
    torch.manual_seed(0)
    ref = Net().cuda()
    m = copy.deepcopy(ref)
    xs = [torch.randn(4, 3, 16, 16, device="cuda") for _ in range(6)]
    ys = [torch.randint(0, 5, (4,), device="cuda") for _ in range(6)]
    _opt(m, xs[0], train=True)
    g = G.installed(m)
    assert g is not None and report_of(m).graphs
    before = g.replays
    want = _losses(ref, xs, ys)
    got = _losses(m, xs, ys)
    assert g.replays - before == 6
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    for a, b in zip(ref.state_dict().values(), m.state_dict().values(), strict=True):
        torch.testing.assert_close(b.float(), a.float(), rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
def test_graphed_bf16_autocast_training_matches_eager_gpu() -> None:
    """Captured under autocast (its cast cache off), the graphs replay under the same autocast
    and cast the updated weights at every replay; without autocast the call runs eagerly."""
    torch.manual_seed(0)
    ref = Net().cuda()
    m = copy.deepcopy(ref)
    xs = [torch.randn(4, 3, 16, 16, device="cuda") for _ in range(6)]
    ys = [torch.randint(0, 5, (4,), device="cuda") for _ in range(6)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _opt(m, xs[0], train=True)
        g = G.installed(m)
        assert g is not None and report_of(m).graphs, report_of(m).graphs_reason
        before = g.replays
        want = _losses(ref, xs, ys)
        got = _losses(m, xs, ys)
    assert g.replays - before == 6
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=2e-2, atol=2e-2)
    n = g.replays
    m(xs[0])   # autocast off: not the captured state, eager
    assert g.replays == n


@pytest.mark.gpu
def test_outputs_survive_next_replay_and_grads_accumulate_gpu() -> None:
    torch.manual_seed(0)
    ref = Net().cuda()
    m = copy.deepcopy(ref)
    x1, x2 = torch.randn(4, 3, 16, 16, device="cuda"), torch.randn(4, 3, 16, 16, device="cuda")
    _opt(m, x1, train=True)
    g = G.installed(m)
    assert g is not None
    y1 = m(x1)
    keep = y1.detach().clone()
    n = g.replays
    y2 = m(x2)  # y1 still waits for its backward: this call runs eagerly
    assert g.replays == n
    torch.testing.assert_close(y1.detach(), keep)  # not overwritten
    (y1.sum() + 0 * y2.sum()).backward()
    y3 = m(x2)
    y3.sum().backward()  # accumulates onto the first gradients
    r1 = ref(x1)
    ref(x2)
    r1.sum().backward()
    ref(x2).sum().backward()
    for p, q in zip(ref.parameters(), m.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-4)


def _graphed_inference() -> tuple[Any, Any, torch.Tensor, G.GraphedForward]:
    """A stock net, its optimized copy with an inference graph installed, the input, the graph."""
    torch.manual_seed(0)
    ref = Net().cuda().eval()
    m = copy.deepcopy(ref)
    x = torch.randn(4, 3, 16, 16, device="cuda")
    _opt(m, x, train=False)
    g = G.installed(m)
    assert g is not None
    return ref, m, x, g


@pytest.mark.gpu
def test_inference_graph_and_eager_fallbacks_gpu() -> None:
    ref, m, x, g = _graphed_inference()
    with torch.no_grad():
        n0 = g.replays
        torch.testing.assert_close(m(x), ref(x))
        assert g.replays == n0 + 1
        other = torch.randn(2, 3, 16, 16, device="cuda")  # another shape: eager
        torch.testing.assert_close(m(other), ref(other))
        with torch.autocast("cuda", dtype=torch.bfloat16):  # autocast: eager, autocast numerics
            assert m(x).dtype == ref(x).dtype
    with torch.inference_mode():
        torch.testing.assert_close(m(x), ref(x))
    assert g.replays == n0 + 1 and g.eager_calls >= 3
    y = m(x)  # grad mode on while captured without: eager, differentiable
    assert y.requires_grad


@pytest.mark.gpu
def test_replaced_parameters_run_eagerly_in_place_updates_replay_gpu() -> None:
    """The graph reads the captured storage: a weight loaded in place is replayed with, a
    parameter replaced (assignment, `.data` swap) sends the call to the eager path."""
    _, m, x, g = _graphed_inference()
    other = Net().cuda().eval()
    with torch.no_grad():
        n0 = g.replays
        m.load_state_dict(other.state_dict())
        torch.testing.assert_close(m(x), other(x))
        assert g.replays == n0 + 1
        w = nn.Parameter(torch.randn_like(m.head.weight))
        m.head.weight = w
        other.head.weight = nn.Parameter(w.detach().clone())
        torch.testing.assert_close(m(x), other(x))
        assert g.replays == n0 + 1
        m.body[3].weight.data = m.body[3].weight.data.clone() * 2
        other.body[3].weight.data *= 2
        torch.testing.assert_close(m(x), other(x))
        assert g.replays == n0 + 1 and g.eager_calls >= 2


@pytest.mark.gpu
def test_no_warning_of_convdoctors_own_machinery_gpu() -> None:
    """optimize's capture and timing (graphs asked for, so captured and timed in training), and
    the caller's steps after it (a replay, then an eager call of another shape), raise neither
    of the warnings `runtime.quiet` names."""
    import warnings

    from convdoctor.runtime.quiet import OWN_WARNINGS

    torch.manual_seed(0)
    m = Net().cuda()
    x = torch.randn(4, 3, 16, 16, device="cuda")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _opt(m, x, train=True)
        g = G.installed(m)
        assert g is not None
        before = g.replays
        for xx in (x, torch.randn(2, 3, 16, 16, device="cuda")):
            m(xx).sum().backward()
        torch.cuda.synchronize()
    assert g.replays == before + 1 and g.eager_calls >= 1
    own = [str(w.message) for w in got if str(w.message).startswith(OWN_WARNINGS)]
    assert own == []


@pytest.mark.gpu
@pytest.mark.parametrize("train", [True, False])
def test_layout_is_decided_under_graphs_too_gpu(train: bool) -> None:
    """With graphs possible, each layout is also timed as a replay and judged by its faster mode;
    the model keeps the eager model's outputs and gradients in whatever layout won."""
    torch.manual_seed(0)
    ref = Net().cuda()
    if not train:
        ref.eval()
    m = copy.deepcopy(ref)
    x = torch.randn(8, 3, 32, 32, device="cuda")
    before = {id(o) for o in gc.get_objects() if isinstance(o, G.GraphedForward)}
    convdoctor.optimize(m, x, train=train, db=False, tune_missing=False, graphs="auto",
                        channels_last="auto", steps=6)
    # the layout copies' graphs are gone (a copy and its graph form a cycle: broken, collected)
    new = [o for o in gc.get_objects() if isinstance(o, G.GraphedForward) and id(o) not in before]
    assert all(o.model is m for o in new), [type(o.model).__name__ for o in new]
    rep = report_of(m)
    assert rep is not None
    assert {"as_given", "channels_last", "as_given_graphed",
            "channels_last_graphed"} <= set(rep.layout_ms), rep.channels_last_reason
    ms = rep.layout_ms
    best_a = min(ms["as_given"], ms["as_given_graphed"])
    best_c = min(ms["channels_last"], ms["channels_last_graphed"])
    if rep.channels_last:  # kept only when faster beyond noise (medians and round by round)
        assert best_c < best_a * (1 - rep.margins["layout"])
    assert "graphed" in rep.channels_last_reason
    if train:
        torch.testing.assert_close(m(x), ref(x), rtol=1e-3, atol=1e-3)
        m(x).sum().backward()
        ref(x).sum().backward()
        for p, q in zip(ref.parameters(), m.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-3)
    else:
        with torch.no_grad():
            torch.testing.assert_close(m(x), ref(x), rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_restore_and_state_dict_gpu() -> None:
    torch.manual_seed(0)
    m = Net().cuda()
    keys = list(m.state_dict())
    x = torch.randn(4, 3, 16, 16, device="cuda")
    _opt(m, x, train=True)
    assert list(m.state_dict()) == keys
    twin = copy.deepcopy(m)  # a copy runs eagerly
    assert G.installed(twin) is None
    twin(x).sum().backward()
    convdoctor.restore(m)
    assert G.installed(m) is None and "forward" not in m.__dict__
    fresh = Net().cuda()
    fresh.load_state_dict(m.state_dict())


@pytest.mark.gpu
def test_torch_compile_of_graphed_model_runs_gpu() -> None:
    torch.manual_seed(0)
    ref = Net().cuda()
    m = copy.deepcopy(ref)
    x = torch.randn(4, 3, 16, 16, device="cuda")
    _opt(m, x, train=True)
    c = torch.compile(m)
    torch.testing.assert_close(c(x), ref(x), rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_dropout_masks_change_between_replays_gpu() -> None:
    """The graph's random numbers advance on every replay (a frozen dropout mask would be a silent
    training bug)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Dropout(0.5), nn.Flatten()).cuda()
    x = torch.randn(4, 3, 16, 16, device="cuda")
    _opt(m, x, train=True)
    g = G.installed(m)
    assert g is not None
    outs = []
    for _ in range(3):
        y = m(x)
        y.sum().backward()
        outs.append((y.detach() == 0).float())
    assert g.replays >= 3
    assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[1], outs[2])
    assert 0.35 < float(outs[0].mean()) < 0.65


def test_routes_win_under_graphs_only_beyond_the_margin() -> None:
    from convdoctor.runtime.verdicts import routed_graphs_verdict

    assert routed_graphs_verdict(3.40, 3.20, 0.03)                # 6% faster replay: routes
    assert not routed_graphs_verdict(3.454, 3.382, 0.03)          # 2.1% < a 3% margin
    assert routed_graphs_verdict(3.454, 3.382, 0.01)              # ... > a 1% margin
    assert not routed_graphs_verdict(3.40, 3.40 * (1 - 0.01 / 2), 0.01)
    assert not routed_graphs_verdict(3.40, 3.50, 0.0)             # slower


class DwNet(nn.Module):
    """A depthwise 1D layer (conformer-like, k=31): cuDNN plans beat PyTorch's pick 1.5-3x there
    on an H100, so its graph route is a plan."""

    def __init__(self) -> None:
        super().__init__()
        self.pw = nn.Conv1d(16, 128, 1)
        self.dw = nn.Conv1d(128, 128, 31, padding=15, groups=128)
        self.head = nn.Linear(128, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.dw(self.pw(x))).mean(dim=2))


@pytest.mark.gpu
def test_graph_routes_are_timed_under_graphs_gpu(tmp_path, monkeypatch) -> None:
    # The eager verify runs with margin=0.9: routing can never win it (it would need to be 10x
    # faster), so only the graph routes can bring plans in (the graphs decision keeps the default
    # margin); whichever wins, training stays the same function.
    import dataclasses

    from convdoctor.runtime import optimizer as O
    from convdoctor.runtime import site as S
    from convdoctor.runtime.graphs_decision import graph_route_differs

    verify = O.verify_routing

    def verify_at_90(model, inputs, sites, report, opts, *a, **k):  # type: ignore[no-untyped-def]
        return verify(model, inputs, sites, report, dataclasses.replace(opts, margin=0.9), *a, **k)

    monkeypatch.setattr(O, "verify_routing", verify_at_90)

    torch.manual_seed(0)
    ref = DwNet().cuda()
    m = copy.deepcopy(ref)
    xs = [torch.randn(8, 16, 512, device="cuda") for _ in range(6)]
    ys = [torch.randint(0, 5, (8,), device="cuda") for _ in range(6)]
    convdoctor.optimize(m, xs[0], train=True, db=tmp_path / "db.sqlite", tune_missing=True,
                        budget_s=0.2, graphs=True, channels_last=False, steps=6)
    rep = report_of(m)
    assert rep is not None and rep.tuned > 0 and rep.graphs, rep.graphs_reason
    graph_keys = [d.graph_key or d.key for lay in rep.layers for d in lay.directions]
    assert any(k.startswith("cudnn:") for k in graph_keys), graph_keys
    assert graph_route_differs(rep) or rep.routing
    assert "graphed_routed" in rep.graphs_ms, rep.graphs_reason
    assert "graphed with the routes" in rep.graphs_reason
    sites = [S.site_of(mod) for mod in m.modules() if S.site_of(mod) is not None]
    if rep.routing:
        assert "under CUDA graphs" in rep.routing_reason
        # outside the graph, routes run only where they won eagerly
        assert all(s.enabled == bool(rep.routing_variant) for s in sites)
    else:
        assert not sites          # routes uninstalled: exactly PyTorch's path between replays
    g = G.installed(m)
    assert g is not None
    before = g.replays
    want = _losses(ref, xs, ys)
    got = _losses(m, xs, ys)
    assert g.replays - before == 6
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=5e-3, atol=1e-3)


PLAN = "cudnn:eng67_k2=8"


def _unet_result(plan_us: float, *extra: tuple[str, float]) -> object:
    """3D U-Net on an H100: fprop 2x128x8x16x16 k256 2x2x2/2, eng67 (plan_us) vs torch:heuristic
    17.8 us; the plan is the tuner's winner."""
    from convdoctor.problem import ConvProblem
    from convdoctor.tune.backend import Candidate
    from convdoctor.tune.result import CandidateStats, TuneResult

    def st(key: str, us: float) -> CandidateStats:
        return CandidateStats(candidate=Candidate(key, "cuda"), samples=[us * 1e-6] * 5)

    return TuneResult(problem=ConvProblem.parse("fprop n=2 c=128 h=16 w=16 k=256 r=2 s=2 stride=2"),
                      env={}, backend="cuda", winner=Candidate(PLAN, "cuda"),
                      candidates=[st(PLAN, plan_us), st("torch:heuristic", 17.8),
                                  *(st(k, us) for k, us in extra)])


def test_routes_rank_by_the_tuners_ranked_time_not_the_median() -> None:
    # a split-K plan: median 143 us (fast on 3 of 4 placements), ranked 148.5 us (the mean over
    # placements); a steady plan 145 us, the tuner's winner. The route follows the tuner.
    from convdoctor.problem import ConvProblem
    from convdoctor.tune.backend import Candidate
    from convdoctor.tune.result import CandidateStats, TuneResult
    from convdoctor.tune.select import route_order

    def st(key: str, med_us: float, rank_us: float | None) -> CandidateStats:
        return CandidateStats(candidate=Candidate(key, "cuda"), samples=[med_us * 1e-6] * 5,
                              rank_s=None if rank_us is None else rank_us * 1e-6)

    def res(rank_split: float | None, rank_steady: float | None) -> TuneResult:
        return TuneResult(problem=ConvProblem.parse("fprop n=8 c=512 k=512 w=3199 s=3 stride=2"),
                          env={}, backend="cuda", winner=Candidate("cudnn:steady", "cuda"),
                          candidates=[st("cudnn:split-k", 143.0, rank_split),
                                      st("cudnn:steady", 145.0, rank_steady)])

    assert route_order(res(148.5, 145.0), transposed=False, train=True,
                       graphed=True)[0] == "cudnn:steady"
    # entries stored before the ranked time existed: the median decides, as before
    assert route_order(res(None, None), transposed=False, train=True,
                       graphed=True)[0] == "cudnn:split-k"


def test_graph_routes_rank_plans_without_their_host_cost() -> None:
    # Eager: a plan call costs the plan engine's host cost, so PyTorch's path ranks first (7.1 vs
    # 17.8 us); in a CUDA graph replay there is no host cost, so the plan does.
    from convdoctor.engines.cudnn import TRAIN_HOST_COST_S as PLAN_PENALTY_S
    from convdoctor.tune.select import route_order

    res = _unet_result(7.1, ("torch:benchmark", 7.4))
    assert PLAN_PENALTY_S > 17.8e-6 - 7.1e-6
    assert route_order(res, transposed=False, train=True, graphed=False)[0] == "torch:heuristic"
    assert route_order(res, transposed=False, train=True, graphed=True) == [PLAN, "torch:heuristic"]


def test_inference_routes_charge_a_plan_only_its_call_cost() -> None:
    # Eager TRAINING pays the autograd Function (PLAN_PENALTY_S, so PyTorch's path ranks first);
    # eager INFERENCE calls the plan directly, measured ~5 us more than PyTorch's dispatch, so the
    # plan that is 10.7 us faster ranks first.
    from convdoctor.tune.select import route_order

    res = _unet_result(7.1)
    assert route_order(res, transposed=False, train=True, graphed=False)[0] == "torch:heuristic"
    assert route_order(res, transposed=False, train=False, graphed=False) == [
        PLAN, "torch:heuristic"]
    # a plan faster by less than its call cost still loses in inference
    assert route_order(_unet_result(12.0), transposed=False, train=False, graphed=False)[0] == \
        "torch:heuristic"


def test_dual_routes_pay_their_gather_outside_graphs_only() -> None:
    # A dual plan 5 us faster than a plan of the problem itself: in a graph replay (no host cost)
    # it ranks first; eagerly its per-call gather (DUAL_PENALTY_S) is charged and it does not.
    from convdoctor.engines.cudnn_dual import EXTRA_HOST_COST_S as DUAL_PENALTY_S
    from convdoctor.problem import ConvProblem
    from convdoctor.tune.backend import Candidate
    from convdoctor.tune.result import CandidateStats, TuneResult
    from convdoctor.tune.select import route_order

    def st(key: str, us: float) -> CandidateStats:
        return CandidateStats(candidate=Candidate(key, "cuda"), samples=[us * 1e-6] * 5)

    res = TuneResult(problem=ConvProblem.parse("dgrad n=8 c=64 h=28 w=28 k=64 r=3 s=3 pad=1"),
                     env={}, backend="cuda", winner=None,
                     candidates=[st("cudnn-dual:eng67", 45.0), st("cudnn:eng71", 50.0)])
    assert DUAL_PENALTY_S > 5e-6
    assert route_order(res, transposed=False, train=True, graphed=True) == [
        "cudnn-dual:eng67", "cudnn:eng71"]
    assert route_order(res, transposed=False, train=True, graphed=False) == [
        "cudnn:eng71", "cudnn-dual:eng67"]
    # transposed: no plan of either kind
    assert route_order(res, transposed=True, train=True, graphed=True) == []


def test_a_dual_key_that_does_not_apply_is_a_note_not_an_error() -> None:
    from convdoctor.problem import ConvProblem
    from convdoctor.runtime.routes import executors

    notes: list[str] = []
    strided = ConvProblem.parse("dgrad n=8 c=64 h=28 w=28 k=64 r=3 s=3 stride=2 pad=1")
    assert executors(["cudnn-dual:eng67", "torch:heuristic"], strided, "cuda", notes)[0].key == \
        "torch:heuristic"
    assert len(notes) == 1 and "stride-1 fprop and dgrad only" in notes[0]
    assert executors(["cudnn-dual:eng67"], strided, "cpu", []) == []  # plans are CUDA-only


def test_triton_routes_pay_their_launcher_outside_graphs_only() -> None:
    # A depthwise kernel 30 us faster than PyTorch's path: in a graph replay it ranks first;
    # eagerly its Triton launcher (TRITON_PENALTY_S, measured ~48.5 us more than F.conv2d) is
    # charged and it does not; transposed convolutions never get it.
    from convdoctor.engines.triton import HOST_COST_S as TRITON_PENALTY_S
    from convdoctor.problem import ConvProblem
    from convdoctor.tune.backend import Candidate
    from convdoctor.tune.result import CandidateStats, TuneResult
    from convdoctor.tune.select import route_order

    def st(k: str, us: float) -> CandidateStats:
        return CandidateStats(candidate=Candidate(k, "cuda"), samples=[us * 1e-6] * 5)

    # the same for the wgrad kernel's routes
    for key, text in (("triton:dw_c2p256w4",
                       "fprop n=64 c=576 h=14 w=14 k=576 r=3 s=3 pad=1 groups=576"),
                      ("triton:wg_m64n64l64w4s3r", "wgrad n=32 c=64 h=56 w=56 k=64 r=3 s=3 pad=1")):
        res = TuneResult(problem=ConvProblem.parse(text), env={}, backend="cuda",
                         winner=Candidate(key, "cuda"),
                         candidates=[st(key, 33.4), st("torch:heuristic", 70.9)])
        assert TRITON_PENALTY_S > 70.9e-6 - 33.4e-6
        assert route_order(res, transposed=False, train=True, graphed=True) == [
            key, "torch:heuristic"]
        assert route_order(res, transposed=False, train=True,
                           graphed=False)[0] == "torch:heuristic"
        assert route_order(res, transposed=False, train=False,
                           graphed=False)[0] == "torch:heuristic"
        assert route_order(res, transposed=True, train=True, graphed=True) == ["torch:heuristic"]


def test_matrix_product_routes_are_never_ranked_for_transposed_layers() -> None:
    # their executors raise for a transposed convolution, so offering them would only move the
    # layer to PyTorch's default with a warning, skipping the other tuned routes
    from convdoctor.problem import ConvProblem
    from convdoctor.tune.backend import Candidate
    from convdoctor.tune.result import CandidateStats, TuneResult
    from convdoctor.tune.select import route_order

    def st(k: str, us: float) -> CandidateStats:
        return CandidateStats(candidate=Candidate(k, "cuda"), samples=[us * 1e-6] * 5)

    for key in ("torch:im2col", "torch:gemm"):
        res = TuneResult(problem=ConvProblem.parse(
            "dgrad n=8 c=768 k=768 w=49 s=128 pad=64 groups=16"), env={}, backend="cuda",
            winner=Candidate(key, "cuda"), candidates=[st(key, 150.0),
                                                       st("torch:heuristic", 296.0)])
        assert route_order(res, transposed=False, train=True, graphed=True) == [
            key, "torch:heuristic"]
        assert route_order(res, transposed=True, train=True, graphed=True) == ["torch:heuristic"]
