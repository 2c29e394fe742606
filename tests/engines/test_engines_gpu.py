"""The engines on a real GPU (skipped without one): cuDNN plans (the default plan, dual plans,
knob refinement, workspace rotation and guard), PyTorch's paths in other layouts, torch:gemm,
torch:im2col and the Triton kernels, each correct against the float64 reference and timed."""

from __future__ import annotations

from typing import Any

import pytest
from cuda_helpers import cuda_backend, torch_candidates

from convdoctor.engines.cudnn_enum import build_plan
from convdoctor.kernels import depthwise, fprop, smallc, wgrad
from convdoctor.problem import ConvProblem
from convdoctor.settings import Settings

pytestmark = pytest.mark.gpu


def P(text: str) -> ConvProblem:
    return ConvProblem.parse(text)


def _runs_correct_and_times(backend, p: ConvProblem, candidate, reps: int) -> None:  # noqa: ANN001
    """`candidate` prepares, passes the float64 check with a poisoned output, and times."""
    runner = backend.prepare(p, candidate)
    runner.warmup()
    ok = runner.check()
    assert ok.ok, (candidate.key, ok.detail)
    ts = runner.time(reps, slot=1)
    assert len(ts) == reps and all(t > 0 for t in ts)
    runner.close()


def _kernel_offered_correct_and_timed(backend, text: str, prefix: str, configs: Any,  # noqa: ANN001
                                      others: list[str]) -> None:
    """One candidate per configuration `configs(problem)` of the kernel keyed `prefix` is offered
    for `text`, each deterministic, passing the float64 check with a poisoned output, and timed;
    none for the problems in `others`."""
    pytest.importorskip("triton")
    p = P(text)
    cands = [c for c in torch_candidates(backend, p) if c.key.startswith(prefix)]
    assert cands and len(cands) == len(configs(p))
    assert all(c.deterministic for c in cands)
    for c in cands:
        _runs_correct_and_times(backend, p, c, 3)
    for other in others:
        assert not any(c.key.startswith(prefix) for c in torch_candidates(backend, P(other)))


@pytest.fixture(scope="module")
def backend():
    return cuda_backend()


@pytest.mark.parametrize("text", [
    "fprop n=4 c=32 h=16 w=16 k=64 r=3 s=3 pad=1 dtype=float16 layout=nhwc",
    "dgrad n=4 c=32 h=16 w=16 k=64 r=3 s=3 stride=2 pad_pre=0 pad_post=1 dtype=float32 math=strict",
    "wgrad n=2 c=1 w=4000 k=32 s=64 stride=16 pad_pre=3 pad_post=5 dtype=bfloat16 layout=nhwc",
    "fprop n=2 c=16 d=8 h=8 w=8 k=16 t=3 r=3 s=3 pad=1 groups=16 dtype=float32",
])
def test_default_convplan_is_correct(backend, text: str) -> None:
    from convdoctor.tune.backend import Candidate

    p = P(text)
    plan = build_plan(p)
    runner = backend.prepare(p, Candidate(plan.key, "cuda", plan.workspace_bytes))
    runner.warmup()
    c = runner.check()
    assert c.ok, c.detail
    ts = runner.time(5)
    assert len(ts) == 5 and all(t > 0 for t in ts)
    runner.close()


@pytest.mark.parametrize("text", [
    "fprop n=4 c=3 h=32 w=32 k=16 r=7 s=7 stride=2 pad=3 dtype=float32",
    "dgrad n=4 c=16 h=12 w=12 k=16 r=3 s=3 pad_pre=0 pad_post=1 dtype=float32 math=strict",
    "wgrad n=2 c=8 d=6 h=6 w=6 k=8 t=3 r=3 s=3 pad=1 dtype=float16",
])
def test_layout_candidate_converts_in_and_back(backend, text: str) -> None:
    import torch

    p = P(text)
    by = {c.key: c for c in torch_candidates(backend, p)}
    r = backend.prepare(p, by["torch:heuristic+nhwc"])
    r.warmup()
    c = r.check()
    assert c.ok, c.detail
    out = r.run()
    assert out.is_contiguous()                       # back in the problem's own layout
    assert out.shape == r.out.shape and not torch.isnan(out).any()
    assert all(t > 0 for t in r.time(3))
    r.close()
    nhwc = P(text + " layout=nhwc") if "layout" not in text else p
    assert "torch:heuristic+nhwc" not in {c.key for c in torch_candidates(backend, nhwc)}


@pytest.mark.parametrize("text", [
    "fprop n=8 c=64 h=14 w=14 k=128 r=1 s=1 dtype=float32",
    "fprop n=8 c=64 h=14 w=14 k=128 r=1 s=1 stride=2 dtype=float16 layout=nhwc",
    "dgrad n=8 c=64 h=15 w=15 k=32 r=1 s=1 stride=2 dtype=float32 math=strict",
    "dgrad n=4 c=32 d=4 h=6 w=6 k=16 t=1 r=1 s=1 dtype=bfloat16 layout=nhwc",
    "wgrad n=8 c=64 h=14 w=14 k=128 r=1 s=1 dtype=float32",
    "wgrad n=8 c=64 h=14 w=14 k=128 r=1 s=1 stride=2 dtype=float16 layout=nhwc",
    "fprop n=8 c=64 w=100 k=32 s=1 dtype=float32",
])
def test_gemm_candidate_is_correct(backend, text: str) -> None:
    """torch:gemm (1x1 convolution as cuBLAS products) passes the float64 check and runs in the
    problem's layout; it is offered only for 1x1 / no padding / one group."""
    import torch

    p = P(text)
    by = {c.key: c for c in torch_candidates(backend, p)}
    r = backend.prepare(p, by["torch:gemm"])
    r.warmup()
    c = r.check()
    assert c.ok, c.detail
    out = r.run()
    assert out.shape == r.out.shape and not torch.isnan(out).any()
    if p.layout == "nhwc":
        fmt = torch.channels_last if out.dim() == 4 else torch.channels_last_3d
        assert out.is_contiguous(memory_format=fmt)
    assert all(t > 0 for t in r.time(3))
    r.close()
    for other in ("fprop n=2 c=8 h=7 w=7 k=4 r=3 s=3 pad=1", "fprop n=2 c=8 h=7 w=7 k=4 r=1 s=1 "
                  "pad=1", "fprop n=2 c=8 h=7 w=7 k=8 r=1 s=1 groups=2"):
        assert "torch:gemm" not in {c.key for c in torch_candidates(backend, P(other))}


def test_a_plan_runner_rotates_its_workspace_address_with_the_placement(backend) -> None:
    from convdoctor.measure.placement import DEFAULT_COUNT, WORKSPACE_STEP

    p = P("fprop n=8 c=512 k=512 w=3199 s=3 stride=2 dtype=float32 math=tf32")
    cands = backend.candidates(p)
    c = next(c for c in cands if c.key.startswith("cudnn:") and c.workspace_bytes > 0)
    r = backend.prepare(p, c)
    seen = []
    for slot in range(DEFAULT_COUNT):
        r._cur = slot
        seen.append(r.workspace.data_ptr())
        assert r.workspace.numel() >= c.workspace_bytes
    r._cur = 0
    assert [b - seen[0] for b in seen] == [i * WORKSPACE_STEP for i in range(DEFAULT_COUNT)]
    r.warmup()
    for slot in range(DEFAULT_COUNT):
        assert all(t > 0 for t in r.time(2, slot=slot))
    assert r.check().ok
    r.close()


# a wgrad whose eng68/eng67 plans keep NHWC copies of x and dy in a workspace of ~10 MB
WS_PROBLEM = "wgrad n=8 c=64 h=56 w=56 k=64 r=3 s=3 pad=1 dtype=float32 math=tf32"


def _guarded_plan(backend, p: ConvProblem):  # noqa: ANN202, ANN001
    from convdoctor.measure import wsguard

    cands = backend.candidates(p)
    c = next((c for c in cands if c.key.startswith("cudnn:")
              and c.workspace_bytes >= wsguard.GUARD_MIN_BYTES), None)
    if c is None:
        pytest.skip(f"no plan with a workspace of >= 1 MiB for {p.short()} here")
    return c


def test_a_plan_runner_guards_each_slot_workspace_gpu(backend, monkeypatch) -> None:
    """A cuDNN plan's speed can follow the memory behind its workspace (+22%); settled (the
    harness settles finalists), the runner holds every slot's workspace to the fastest it saw, as
    `optimize` does. With the tolerance
    below zero every workspace counts as slow, so each slot tries `TRIES` and keeps the fastest
    - the replacing path runs for real, and the plan stays correct on what it kept."""
    from convdoctor.measure import wsguard

    p = P(WS_PROBLEM)
    c = _guarded_plan(backend, p)
    r = backend.prepare(p, c)
    r.warmup()
    assert all(t > 0 for t in r.time(2, slot=0))
    assert r.ws_guard == []                         # the guard waits for the harness's settle()
    r.settle()
    assert len(r.ws_guard) == r.placements
    ref = r.ws_guard[0].reference_s
    for res in r.ws_guard:
        assert res.reference_s == ref
        slow = res.times_s[0] > ref * (1 + wsguard.TOLERANCE)
        # a slow slot tried fresh workspaces and kept the fastest (which may be its own)
        if not slow:
            assert len(res.times_s) == 1
        assert res.times_s[res.kept] == min(res.times_s)
        assert not res.replaced or slow
    r.close()
    monkeypatch.setattr(wsguard, "TOLERANCE", -1.0)
    r = backend.prepare(p, c)
    r.warmup()
    r.time(1, slot=0)   # a timer (maybe a captured CUDA graph) on the slot's first workspace
    assert r._timers
    r.settle()
    assert r._timers == {}   # dropped: a captured graph would keep the replaced workspace
    r.time(1, slot=0)
    assert len(r.ws_guard) == r.placements
    for slot, res in enumerate(r.ws_guard):
        assert len(res.times_s) == wsguard.TRIES
        assert res.times_s[res.kept] == min(res.times_s)
        r._cur = slot
        assert r.workspace.numel() >= c.workspace_bytes
    r._cur = 0
    assert ("wsguard" in r.timing_mode) == any(x.replaced for x in r.ws_guard)
    for slot in range(r.placements):
        assert all(t > 0 for t in r.time(2, slot=slot))
    assert r.check().ok
    r.close()
    monkeypatch.setattr(backend, "settings", backend.settings.replace(ws_guard=False))
    r = backend.prepare(p, c)
    r.warmup()
    r.settle()
    assert r.ws_guard == []
    r.close()


def test_the_runtime_plan_guards_its_workspace_gpu(monkeypatch) -> None:
    """`PlanExec` with a reference: a reference it meets keeps the plan's workspace; one it cannot
    meet makes it try `TRIES` workspaces, adopt the fastest, and still compute the gradient."""
    import torch

    from convdoctor.engines.cudnn_exec import PlanExec
    from convdoctor.measure import wsguard
    from convdoctor.tune.cuda_backend import CudaBackend

    pytest.importorskip("cudnn")
    p = P(WS_PROBLEM)
    c = _guarded_plan(CudaBackend(settings=Settings().replace(cudnn_enum_extra=0, cudnn_enum_budget_s=1.0)), p)
    ex = PlanExec.build(c.key, p, reference_s=10.0)
    assert ex.guard is not None and not ex.guard.replaced and len(ex.guard.times_s) == 1
    ex = PlanExec.build(c.key, p, reference_s=1e-9)
    g = ex.guard
    assert g is not None and len(g.times_s) == wsguard.TRIES
    assert g.times_s[g.kept] == min(g.times_s)
    assert ex.plan.workspace() is ex.workspace
    x = torch.randn(8, 64, 56, 56, device="cuda")
    dy = torch.randn(8, 64, 56, 56, device="cuda")
    dw = torch.empty(64, 64, 3, 3, device="cuda")
    ex._run(x, dy, dw)
    ref = torch.ops.aten.convolution_backward(dy.double(), x.double(), dw.double(), None, [1, 1],
                                              [1, 1], [1, 1], False, [0, 0], 1,
                                              [False, True, False])[1]
    assert torch.allclose(dw.double(), ref, rtol=5e-3, atol=5e-3 * ref.abs().max().item())


def test_the_runtime_dual_plan_guards_its_workspace_with_the_transform_gpu(monkeypatch) -> None:
    """`DualPlanExec`: the guard times the weight's transform and the dual plan together, as the
    route runs them (and as the tuner timed the `cudnn-dual:` key), then the executor computes
    the forward output right on the workspace it kept."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    from convdoctor.engines import cudnn_policy as policy
    from convdoctor.engines.cudnn_enum import enumerate_plans
    from convdoctor.engines.cudnn_exec import DualPlanExec
    from convdoctor.measure import wsguard

    pytest.importorskip("cudnn")
    p = P("fprop n=8 c=64 h=56 w=56 k=64 r=3 s=3 pad=1 dtype=float32 math=tf32")
    dual = policy.dual_problem(p)
    assert dual is not None
    en = enumerate_plans(dual, max_extra=4, time_budget_s=2.0)
    info = next((i for i in en.built() if i.workspace_bytes >= wsguard.GUARD_MIN_BYTES), None)
    if info is None:
        pytest.skip("no dual plan with a workspace of >= 1 MiB here")
    plan = build_plan(dual, info.name)
    ex = DualPlanExec(policy.dual_key(info.name), p, plan, reference_s=1e-9)
    g = ex.guard
    assert g is not None and not ex.guard_error and len(g.times_s) == wsguard.TRIES
    assert g.times_s[g.kept] == min(g.times_s)
    x = torch.randn(8, 64, 56, 56, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    y = ex.fprop(x, w, None, None)
    ref = F.conv2d(x.double(), w.double(), padding=1)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 5e-3


def test_refinement_learns_knob_numbers_and_its_plans_rebuild_by_name(backend) -> None:
    """Knob-space refinement on a layer where a probe found a faster neighbour:
    every knob type of the fastest engine maps to a plan-name number, every kept plan is new,
    builds again by its name alone (what the database and `optimize` do) and computes the
    convolution correctly."""
    import torch

    from convdoctor.engines import cudnn_enum as cp
    from convdoctor.engines import cudnn_policy as policy
    from convdoctor.engines import cudnn_refine as refine
    from convdoctor.tune.backend import Candidate

    p = P("fprop n=32 c=256 h=14 w=14 k=256 r=3 s=3 pad=1 dtype=float32 math=tf32")
    backend.release(p)
    en = cp.enumerate_plans(p, device=0, enumerate_engines=False)
    sets = backend.placements_for(p).sets
    res = refine.refine(p, en, refine.event_timer(p, sets[0]), device=0, budget_s=10.0)
    assert res.seeds, res.notes
    eng, _ = policy.parse_plan_name(res.seeds[0])
    spec, mapping = cp.engine_knobs(p, cp.get_handle(0), eng)
    assert spec and len(mapping) == len(spec), (spec, mapping)
    assert res.built > 0 and res.quick_us, res.notes
    listed = {p_.name for p_ in en.plans}
    for info in res.plans:
        assert info.name not in listed and info.source == "refine"
    names = [i.name for i in res.plans]
    cp.clear_cache()
    for name in names:
        plan = cp.build_plan(p, name)
        assert policy.parse_plan_name(plan.name) == policy.parse_plan_name(name)
        r = backend.prepare(p, Candidate(plan.key, "cuda", plan.workspace_bytes))
        r.warmup()
        c = r.check()
        assert c.ok, (name, c.detail)
        r.close()
    backend.release(None)
    torch.cuda.synchronize()


@pytest.mark.parametrize("text", [
    "dgrad n=4 c=32 h=14 w=14 k=48 r=3 s=3 pad=1 dtype=float32",
    "dgrad n=4 c=64 h=14 w=14 k=64 r=3 s=3 pad=1 groups=64 dtype=float16 layout=nhwc",
    "dgrad n=2 c=64 w=49 k=64 s=16 pad_pre=8 pad_post=7 groups=4 dtype=float32",
    "fprop n=4 c=32 h=14 w=14 k=48 r=3 s=3 pad_pre=0,1 pad_post=2,1 dil=2 dtype=bfloat16 "
    "layout=nhwc",
])
def test_dual_plan_runner_is_correct(backend, text: str) -> None:
    """A `cudnn-dual:` candidate (the dual problem's plan, the weight transformed inside the run)
    passes the float64 check with a poisoned output, and times."""
    from convdoctor.engines import cudnn_policy as policy
    from convdoctor.tune.backend import Candidate

    p = P(text)
    dual = policy.dual_problem(p)
    assert dual is not None
    plan = build_plan(dual)
    _runs_correct_and_times(backend, p, Candidate(policy.dual_key(plan.name), "cuda",
                                                  plan.workspace_bytes), 5)


def test_listing_offers_dual_plans_that_run(backend, monkeypatch) -> None:
    """The full listing of a stride-1 depthwise dgrad records its dual listing; the dual plans it
    offers (a band wide enough that some are) build by name and are correct."""
    from convdoctor.engines import cudnn_dual
    from convdoctor.engines import cudnn_policy as policy

    monkeypatch.setattr(cudnn_dual, "BAND", 10.0)
    p = P("dgrad n=8 c=96 h=28 w=28 k=96 r=3 s=3 pad=1 groups=96 dtype=float32")
    cands = backend.candidates(p)
    rec = backend.listing_info().get("dual")
    assert rec is not None and "error" not in rec, rec
    duals = [c for c in cands if c.key.startswith(policy.DUAL_PREFIX)]
    assert [k for k, _us in rec["kept"]] == [c.key for c in duals]
    assert duals, rec
    for c in duals[:2]:
        r = backend.prepare(p, c)
        r.warmup()
        assert r.check().ok
        r.close()
    strided = P("dgrad n=8 c=96 h=28 w=28 k=96 r=3 s=3 stride=2 pad=1 dtype=float32")
    assert not [c for c in backend.candidates(strided) if c.key.startswith(policy.DUAL_PREFIX)]
    assert "dual" not in backend.listing_info()


@pytest.mark.parametrize("text", [
    "fprop n=4 c=64 h=14 w=14 k=64 r=3 s=3 pad=1 groups=64 dtype=float32",
    "dgrad n=4 c=48 h=15 w=13 k=48 r=5 s=5 stride=2 pad_pre=1 pad_post=2 groups=48 dtype=float32 "
    "math=strict",
    "dgrad n=4 c=64 h=14 w=14 k=64 r=3 s=3 pad=2 dil=2 groups=64 dtype=float16 layout=nhwc",
    "fprop n=2 c=32 w=200 k=32 s=31 pad=15 groups=32 dtype=bfloat16",
])
def test_triton_depthwise_candidates_are_listed_correct_and_timed(backend, text: str) -> None:
    """The depthwise kernel's configurations are offered for depthwise fprop/dgrad, each passes
    the float64 check with a poisoned output, and times; wgrad gets none."""
    pytest.importorskip("triton")

    p = P(text)
    keys = [c.key for c in torch_candidates(backend, p) if c.key.startswith(depthwise.PREFIX)]
    assert keys and len(keys) == len(depthwise.offered(p))
    for c in torch_candidates(backend, p):
        if c.key.startswith(depthwise.PREFIX):
            _runs_correct_and_times(backend, p, c, 3)
    w = P(text.replace("fprop", "wgrad").replace("dgrad", "wgrad"))
    assert not any(c.key.startswith(depthwise.PREFIX) for c in torch_candidates(backend, w))


@pytest.mark.parametrize("text", [
    "wgrad n=8 c=32 h=37 w=37 k=32 r=3 s=3 dtype=float32",
    "wgrad n=4 c=3 h=64 w=64 k=64 r=7 s=7 stride=2 pad_pre=3 pad_post=2 dtype=float32 math=strict",
    "wgrad n=4 c=64 h=28 w=28 k=64 r=3 s=3 pad=2 dil=2 dtype=float16 layout=nhwc",
    "wgrad n=2 c=32 d=8 h=16 w=16 k=64 t=3 r=3 s=3 pad=1 dtype=float32",
    "wgrad n=2 c=1 w=4000 k=32 s=64 stride=16 pad_pre=3 pad_post=5 dtype=bfloat16 layout=nhwc",
])
def test_triton_wgrad_candidates_are_listed_correct_and_timed(backend, text: str) -> None:
    """The wgrad kernel's configurations are offered for ungrouped wgrad with a small weight, each
    passes the float64 check with a poisoned output (TF32 only where allowed), and times; fprop,
    dgrad and a grouped wgrad get none."""
    others = [text.replace("wgrad", "fprop"), text.replace("wgrad", "dgrad")]
    if P(text).c % 2 == 0:
        others.append(text.replace("k=", "groups=2 k="))
    _kernel_offered_correct_and_timed(backend, text, wgrad.PREFIX,
                                      wgrad.offered, others)


@pytest.mark.parametrize("text", [
    "fprop n=8 c=512 w=99 k=512 s=2 stride=2 dtype=float32",
    "fprop n=4 c=19 h=17 w=15 k=33 r=3 s=3 stride=2 pad_pre=1 pad_post=0 dtype=float32 math=strict",
    "fprop n=4 c=64 h=28 w=28 k=64 r=3 s=3 pad=2 dil=2 dtype=float32 layout=nhwc",
    "fprop n=4 c=40 h=7 w=7 k=24 r=1 s=1 dtype=float32",
])
def test_triton_forward_candidates_are_listed_correct_and_timed(backend, text: str) -> None:
    """The forward kernel's configurations are offered for ungrouped 1D/2D fprop in fp32, and in
    fp16/bf16 where NCHW; each passes the float64 check with a poisoned output (TF32 only where
    allowed), and times; dgrad, wgrad, half precision in NHWC and grouped problems get none."""
    half_nhwc = text.replace("float32", "float16").replace(" layout=nhwc", "") + " layout=nhwc"
    others = [text.replace("fprop", "dgrad"), text.replace("fprop", "wgrad"), half_nhwc]
    if P(text).layout == "nchw":
        for dt in ("float16", "bfloat16"):
            half = text.replace("float32", dt).replace(" math=strict", "")
            _kernel_offered_correct_and_timed(backend, half, fprop.PREFIX, fprop.offered, [])
    if P(text).c % 2 == 0 and P(text).k % 2 == 0:
        others.append(text.replace("k=", "groups=2 k="))
    _kernel_offered_correct_and_timed(backend, text, fprop.PREFIX,
                                      fprop.offered, others)


@pytest.mark.parametrize("text", [
    "dgrad n=2 c=1 d=16 h=16 w=16 k=32 t=3 r=3 s=3 pad=1 dtype=float32",
    "dgrad n=4 c=3 h=64 w=64 k=64 r=7 s=7 stride=2 pad_pre=3 pad_post=2 dtype=float32",
    "dgrad n=4 c=3 h=33 w=33 k=32 r=3 s=3 stride=2 dtype=float16 layout=nhwc",
    "dgrad n=2 c=1 w=4000 k=32 s=64 stride=16 pad_pre=3 pad_post=5 dtype=bfloat16",
])
def test_triton_small_c_dgrad_candidates_are_listed_correct_and_timed(backend, text: str) -> None:
    """The small-C dgrad kernel's configurations (sub-pixel ones only where strided) are offered
    for ungrouped dgrad with at most 4 input channels, each passes the float64 check with a
    poisoned output, and times; fprop, wgrad and a 5-channel dgrad get none."""
    _kernel_offered_correct_and_timed(
        backend, text, smallc.PREFIX, smallc.offered,
        [text.replace("dgrad", "fprop"), text.replace("dgrad", "wgrad"),
         text.replace(" c=1 ", " c=5 ").replace(" c=3 ", " c=5 ")])


@pytest.mark.parametrize("text", [
    "dgrad n=4 c=64 w=49 k=64 s=16 pad=8 groups=4 dtype=float32",
    "fprop n=4 c=32 h=14 w=14 k=48 r=3 s=3 stride=2 pad_pre=0 pad_post=1 groups=4 dtype=float16 "
    "layout=nhwc",
    "wgrad n=2 c=32 h=12 w=12 k=32 r=3 s=3 pad=1 groups=8 dtype=bfloat16",
    "dgrad n=2 c=32 h=12 w=12 k=64 r=5 s=5 stride=2 pad=2 dil=1 groups=8 dtype=float32 math=strict",
])
def test_im2col_candidate_is_listed_correct_and_timed(backend, text: str) -> None:
    """`torch:im2col` is offered for grouped layers, passes the float64 check with a poisoned
    output, and times."""
    p = P(text)
    c = next(c for c in torch_candidates(backend, p) if c.key == "torch:im2col")
    assert c.workspace_bytes > 0
    _runs_correct_and_times(backend, p, c, 3)
