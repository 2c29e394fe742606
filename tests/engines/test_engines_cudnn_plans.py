"""cuDNN plan enumeration, note filtering, dedupe and lookup by name, against a fake cudnn module."""

from __future__ import annotations

import sys

import cudnn_fakes as fk
import pytest

from convdoctor.engines import cudnn_enum as cudnn_plan
from convdoctor.engines import cudnn_graph
from convdoctor.engines import cudnn_policy as policy
from convdoctor.problem import ConvProblem


@pytest.fixture(autouse=True)
def fake_cudnn(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "cudnn", fk.make_module())
    fk.GRAPHS.clear()
    cudnn_plan.clear_cache()
    yield
    cudnn_plan.clear_cache()


def P(text: str) -> ConvProblem:
    return ConvProblem.parse(text)


BASE = "n=8 c=16 h=14 w=14 k=32 r=3 s=3 pad=1"


def built_names(en: cudnn_plan.Enumeration) -> list[str]:
    return [p.name for p in en.built()]


def test_heuristic_modes_deduped_in_rank_order_tf32() -> None:
    en = cudnn_plan.enumerate_plans(P(f"fprop {BASE} dtype=float32 math=tf32"), device=0,
                                    handle=1, enumerate_engines=False)
    # A: eng0_k2=1, eng1, [eng3 down-convert: dropped], eng2_k17=0; B adds eng4...; FALLBACK eng5
    assert built_names(en) == ["eng0_k2=1", "eng1", "eng2_k17=0", "eng4_k2=0_k24=0", "eng5"]
    by = {p.name: p for p in en.plans}
    assert by["eng0_k2=1"].source == "A" and by["eng4_k2=0_k24=0"].source == "B"
    assert not by["eng3"].built and "DOWN_CONVERT_INPUTS" in by["eng3"].reason
    assert not by["eng6"].built and "not supported" in by["eng6"].reason


def test_strict_fp32_drops_tensor_core_engines() -> None:
    en = cudnn_plan.enumerate_plans(P(f"fprop {BASE} dtype=float32 math=strict"), device=0,
                                    handle=1, enumerate_engines=False)
    assert built_names(en) == ["eng1", "eng2_k17=0", "eng4_k2=0_k24=0"]


def test_fp16_keeps_tensor_core_engines_and_det_drops_nondeterministic() -> None:
    en = cudnn_plan.enumerate_plans(P(f"wgrad {BASE} dtype=float16 det=1"), device=0,
                                    handle=1, enumerate_engines=False)
    assert "eng0_k2=1" in built_names(en) and "eng5" in built_names(en)
    assert "eng2_k17=0" not in built_names(en)


def test_probed_notes_mark_determinism_and_tensor_cores() -> None:
    en = cudnn_plan.enumerate_plans(P(f"fprop {BASE} dtype=float16"), device=0, handle=1,
                                    enumerate_engines=False)
    notes = {p.name: p.notes for p in en.built()}
    assert notes["eng2_k17=0"] == ("NONDETERMINISTIC",)
    assert notes["eng0_k2=1"] == ("TENSOR_CORE",)
    assert notes["eng1"] == ()


def test_engine_enumeration_adds_bounded_knob_variants() -> None:
    en = cudnn_plan.enumerate_plans(P(f"fprop {BASE} dtype=float16"), device=0, handle=1,
                                    enumerate_engines=True, max_extra=4)
    names = built_names(en)
    assert names[:6] == ["eng0_k2=1", "eng1", "eng2_k17=0", "eng4_k2=0_k24=0", "eng5",
                         "eng0_k2=0"]
    assert en.enum_added == 4
    assert len(names) == len(set(names))
    extra = [p for p in en.built() if p.source == "enum"]
    assert len(extra) == 4


def test_enumerated_engine_without_heuristic_notes_is_probed() -> None:
    fk.ENGINES[7] = {"notes": {"NONDETERMINISTIC"}, "ws": 0, "knobs": []}
    try:
        fk_graph_count = fk.FakeGraph.get_engine_count
        fk.FakeGraph.get_engine_count = lambda self: 8  # type: ignore[method-assign]
        en = cudnn_plan.enumerate_plans(P(f"fprop {BASE} dtype=float16"), device=0, handle=1,
                                        max_extra=50)
        by = {p.name: p for p in en.built()}
        assert by["eng7"].notes == ("NONDETERMINISTIC",)
        en = cudnn_plan.enumerate_plans(P(f"fprop {BASE} dtype=float16"), device=0, handle=1,
                                        max_extra=50, probe=False)
        assert {p.name: p for p in en.built()}["eng7"].notes == ("notes-unknown",)
    finally:
        fk.FakeGraph.get_engine_count = fk_graph_count  # type: ignore[method-assign]
        del fk.ENGINES[7]


def test_build_default_is_first_buildable_heuristic_plan() -> None:
    plan = cudnn_plan.build_plan(P(f"fprop {BASE} dtype=float32 math=strict"), handle=1,
                                     device=0)
    assert plan.name == "eng1" and plan.key == "cudnn:eng1" and plan.source == "A"


def test_build_by_name_builds_the_named_configuration_and_caches() -> None:
    p = P(f"dgrad {BASE} dtype=float16")
    # a plan heuristic mode B lists is built from its own configuration, without the queries
    b = cudnn_plan.build_plan(p, "eng4_k2=0_k24=0", handle=1, device=0)
    assert b.source == "enum" and b.workspace_bytes == 64
    assert cudnn_plan.build_plan(p, "eng4_k2=0_k24=0", handle=1, device=0) is b
    e = cudnn_plan.build_plan(p, "eng4_k2=3_k24=1", handle=1, device=0)
    assert e.source == "enum"


def test_build_errors_are_specific() -> None:
    p = P(f"fprop {BASE} dtype=float32 math=strict")
    with pytest.raises(ValueError):
        cudnn_plan.build_plan(p, "not-a-plan", handle=1, device=0)
    with pytest.raises(LookupError):
        cudnn_plan.build_plan(p, "eng1_k99=5", handle=1, device=0)
    with pytest.raises(RuntimeError, match="does not build"):
        cudnn_plan.build_plan(p, "eng0_k2=1", handle=1, device=0)  # TF32 engine, strict


def test_graph_gets_cudnn_dims_strides_and_asymmetric_padding_1d_nhwc() -> None:
    p = P("wgrad n=2 c=4 w=50 k=6 s=5 stride=2 pad_pre=1 pad_post=3 dtype=bfloat16 layout=nhwc")
    plan = cudnn_plan.build_plan(p, handle=1, device=0)
    op = plan._g.graph.op
    assert op["kind"] == "wgrad"
    assert op["pre_padding"] == [0, 1] and op["post_padding"] == [0, 3]
    assert op["stride"] == [1, 2] and op["dilation"] == [1, 1]
    assert op["a"].dim == [2, 4, 1, 50] and op["a"].stride == [200, 1, 200, 4]
    out_w = (50 + 1 + 3 - 5) // 2 + 1
    assert op["b"].dim == [2, 6, 1, out_w]
    assert op["out"].dim == [6, 4, 1, 5] and op["out"].output
    assert plan._g.graph.io_data_type == "BFLOAT16"


def test_execute_by_role_and_positional_passes_the_right_tensors() -> None:
    p = P(f"dgrad {BASE} dtype=float16")
    plan = cudnn_plan.build_plan(p, "eng1", handle=1, device=0)
    plan._workspace = "WS"
    dy, w, dx = object(), object(), object()
    plan.execute({"dy": dy, "w": w}, dx, check=False)
    plan.execute(dy, w, dx, check=False)
    t = plan._g.tensors
    for pack, ws, index, handle in plan._g.graph.executed:
        assert pack == {t["dy"]: dy, t["w"]: w, t["dx"]: dx}
        assert ws == "WS" and index == plan.index and handle == 1
    with pytest.raises(TypeError):
        plan.execute(dy, check=False)


class _Buf:
    """A tensor stand-in with a device pointer."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


def test_launch_passes_device_pointers_and_one_handle_per_stream() -> None:
    p = P(f"fprop {BASE} dtype=float16")
    plan = cudnn_plan.build_plan(p, "eng1", handle=1, device=0)
    x, w, y, ws = _Buf(0x100), _Buf(0x200), _Buf(0x300), _Buf(0x400)
    plan.launch(x, w, y, ws, 77)
    plan.launch(x, w, y, ws, 77)
    plan.launch(x, w, y, ws, 88)
    t = plan._g.tensors
    runs = plan._g.graph.executed
    assert [r[0] for r in runs] == [{t["x"]: 0x100, t["w"]: 0x200, t["y"]: 0x300}] * 3
    assert [r[1] for r in runs] == [0x400] * 3 and {r[2] for r in runs} == {plan.index}
    # a handle bound to each stream, made once per stream
    assert set(plan._stream_handles) == {77, 88}
    assert cudnn_graph._HANDLES[(0, 77)] is plan._stream_handles[77]


def test_launch_falls_back_to_tensors_once_when_the_frontend_wants_dlpack() -> None:
    p = P(f"fprop {BASE} dtype=float16")
    plan = cudnn_plan.build_plan(p, "eng1", handle=1, device=0)
    graph = plan._g.graph
    real = graph.execute_plan_at_index
    calls: list[str] = []

    def older_frontend(pack, ws, index, handle=None):  # type: ignore[no-untyped-def]
        if any(isinstance(v, int) for v in pack.values()):
            calls.append("ints")
            raise TypeError("Object does not have the __dlpack__() method")
        calls.append("tensors")
        return real(pack, ws, index, handle=handle)

    graph.execute_plan_at_index = older_frontend
    x, w, y, ws = _Buf(1), _Buf(2), _Buf(3), _Buf(4)
    plan.launch(x, w, y, ws, 5)
    plan.launch(x, w, y, ws, 5)
    assert calls == ["ints", "tensors", "tensors"]  # pointers tried once, then never again
    t = plan._g.tensors
    assert graph.executed[-1][0] == {t["x"]: x, t["w"]: w, t["y"]: y}


def test_launch_does_not_hide_a_failure_once_pointers_worked() -> None:
    p = P(f"fprop {BASE} dtype=float16")
    plan = cudnn_plan.build_plan(p, "eng1", handle=1, device=0)
    x, w, y, ws = _Buf(1), _Buf(2), _Buf(3), _Buf(4)
    plan.launch(x, w, y, ws, 5)

    def failing(pack, ws, index, handle=None):  # type: ignore[no-untyped-def]
        raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")

    plan._g.graph.execute_plan_at_index = failing
    with pytest.raises(RuntimeError, match="EXECUTION_FAILED"):
        plan.launch(x, w, y, ws, 5)


def test_a_first_call_failure_does_not_pin_the_slower_tensor_path() -> None:
    """A real cuDNN failure on the very first call fails both forms: it is raised, and the next
    call tries device pointers again (it does not stay on tensors for good)."""
    p = P(f"fprop {BASE} dtype=float16")
    plan = cudnn_plan.build_plan(p, "eng1", handle=1, device=0)
    graph = plan._g.graph
    real = graph.execute_plan_at_index
    calls: list[str] = []
    fail = [True]

    def flaky(pack, ws, index, handle=None):  # type: ignore[no-untyped-def]
        calls.append("ints" if any(isinstance(v, int) for v in pack.values()) else "tensors")
        if fail[0]:
            raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")
        return real(pack, ws, index, handle=handle)

    graph.execute_plan_at_index = flaky
    x, w, y, ws = _Buf(1), _Buf(2), _Buf(3), _Buf(4)
    with pytest.raises(RuntimeError, match="EXECUTION_FAILED") as info:
        plan.launch(x, w, y, ws, 5)
    assert calls == ["ints", "tensors"] and plan._pointers is None
    assert isinstance(info.value.__cause__, RuntimeError)  # the pointer call's error, chained
    fail[0] = False
    plan.launch(x, w, y, ws, 5)
    plan.launch(x, w, y, ws, 5)
    assert calls[2:] == ["ints", "ints"] and plan._pointers is True


def test_policy_filter_matches_pytorch_rule() -> None:
    assert policy.note_filter(P(f"fprop {BASE} dtype=float32 math=tf32")).numeric == (
        "DOWN_CONVERT_INPUTS",)
    assert policy.note_filter(P(f"fprop {BASE} dtype=float32 math=strict det=1")).numeric == (
        "DOWN_CONVERT_INPUTS", "TENSOR_CORE", "NONDETERMINISTIC")
    # strict only matters for fp32: fp16 engines with tensor cores are exact-input
    assert "TENSOR_CORE" not in policy.note_filter(
        P(f"fprop {BASE} dtype=float16 math=strict")).numeric


def test_backend_candidates_cap_keeps_rank_order_and_marks_determinism(monkeypatch) -> None:
    be = fk.listing_backend(enumerate_engines=True, max_extra=8, enum_budget_s=1.0, refine=False,
                            dual=True)
    en = cudnn_plan.enumerate_plans(P(f"fprop {BASE} dtype=float16"), device=0, handle=1,
                                    max_extra=4)
    monkeypatch.setattr(cudnn_plan, "enumerate_plans", lambda *a, **k: en)
    cands = fk.cudnn_candidates(be, P(f"fprop {BASE} dtype=float16"))
    own = [c for c in cands if c.key.startswith("cudnn:")]
    assert [c.key for c in own] == [policy.cudnn_key(p.name) for p in en.built()]
    # no refinement, so no quick times: the dual problem's first heuristic plans are offered
    dual = be.listing_info()["dual"]
    assert dual.get("heuristic_order") and len(dual["kept"]) == 3
    assert [c.key for c in cands if c.key.startswith("cudnn-dual:")] == [k for k, _ in dual["kept"]]
    by = {c.key: c for c in cands}
    assert not by["cudnn:eng2_k17=0"].deterministic and by["cudnn:eng1"].deterministic
    assert "tensor_core" in by["cudnn:eng0_k2=1"].notes
    # a refinement budget of 0 (quick tuning's) is no refinement either
    be.settings = be.settings.replace(cudnn_refine=True, cudnn_refine_budget_s=0.0)
    cands = fk.cudnn_candidates(be, P(f"fprop {BASE} dtype=float16"))
    dual = be.listing_info()["dual"]
    assert dual.get("heuristic_order") and len(dual["kept"]) == 3
    be.settings = be.settings.replace(cudnn_max_plans=4, cudnn_dual=False)
    capped = [c.key for c in fk.cudnn_candidates(be, P(f"fprop {BASE} dtype=float16"))]
    assert capped == ["cudnn:eng0_k2=1", "cudnn:eng1", "cudnn:eng2_k17=0", "cudnn:eng0_k2=0"]


def _dual_backend(monkeypatch: pytest.MonkeyPatch, quick: dict[str, dict[str, float]]):
    """A CudaBackend over the fake cudnn whose refinement 'times' plans from `quick` (by the
    problem's direction) and allocates nothing."""
    from convdoctor.engines import cudnn_refine as refine
    from convdoctor.measure import placement

    be = fk.listing_backend(enumerate_engines=False, max_extra=0, enum_budget_s=1.0,
                            refine_budget_s=6.0, dual=True)
    budgets: dict[str, float] = {}

    def fake_refine(problem, en, timer, *, budget_s, **kw):
        budgets[problem.direction] = budget_s
        times = quick[problem.direction]
        return refine.Refinement(plans=[], quick_us={p.name: times[p.name] for p in en.built()
                                                     if p.name in times})

    monkeypatch.setattr(cudnn_plan, "get_handle", lambda *a, **k: 1)  # no CUDA stream here
    monkeypatch.setattr(refine, "refine", fake_refine)
    monkeypatch.setattr(refine, "event_timer", lambda problem, buffers: None)
    monkeypatch.setattr(placement, "allocate",
                        lambda problem, device, **kw: type("S", (), {"sets": [{}],
                                                                     "key": problem.key()})())
    return be, budgets


def test_dual_plans_offered_within_the_band_with_their_weight_as_workspace(monkeypatch) -> None:
    from convdoctor.engines import listing

    p = P(f"dgrad {BASE} dtype=float32")  # stride 1: its dual is a forward convolution
    be, budgets = _dual_backend(monkeypatch, {
        "dgrad": {"eng1": 100.0, "eng0_k2=1": 130.0},
        "fprop": {"eng0_k2=1": 95.0, "eng1": 109.0, "eng2_k17=0": 104.0}})
    units: list[str] = []
    old = listing.set_step_sink(lambda kind, unit, name: units.append(unit))
    try:
        cands = fk.cudnn_candidates(be, p)
    finally:
        listing.set_step_sink(old)
    duals = [c for c in cands if c.key.startswith(policy.DUAL_PREFIX)]
    # the band is 10% of the fastest of either kind (95 us): 95 and 104 in, 109 out
    assert [c.key for c in duals] == ["cudnn-dual:eng0_k2=1", "cudnn-dual:eng2_k17=0"]
    rec = be.listing_info()["dual"]
    assert rec["kept"] == [["cudnn-dual:eng0_k2=1", 95.0], ["cudnn-dual:eng2_k17=0", 104.0]]
    assert rec["best_own_us"] == 100.0 and rec["best_dual_us"] == 95.0
    # the dual weight (16 x 32 x 3 x 3 fp32) counts as workspace on top of the plan's
    own_ws = {c.key: c.workspace_bytes for c in cands if c.key.startswith("cudnn:")}
    assert duals[0].workspace_bytes == own_ws["cudnn:eng0_k2=1"] + 16 * 32 * 9 * 4
    # half the refinement budget for the second listing; its steps are named "dual:engN"
    assert budgets == {"dgrad": 6.0, "fprop": 3.0}
    assert "dual:eng0" in units and "eng0" in units


def test_a_dual_engine_that_hung_is_left_out_of_the_dual_listing_only(monkeypatch) -> None:
    p = P(f"dgrad {BASE} dtype=float32")
    be, _ = _dual_backend(monkeypatch, {"dgrad": {"eng1": 100.0, "eng0_k2=1": 101.0},
                                        "fprop": {"eng0_k2=1": 95.0, "eng1": 96.0}})
    be.listing_exclude = {"dual:eng0"}
    be.listing_exclude_why = {"dual:eng0": "hung while listing"}
    keys = [c.key for c in fk.cudnn_candidates(be, p)]
    assert "cudnn:eng0_k2=1" in keys            # the problem's own eng0 is untouched
    assert "cudnn-dual:eng1" in keys and not any(k.startswith("cudnn-dual:eng0") for k in keys)
    assert be.listing_info()["left_out"] == ["dual:eng0"]


def test_pick_dual() -> None:
    from convdoctor.engines import cudnn_dual

    quick = {f"eng{i}": 100.0 + i for i in range(10)}
    assert cudnn_dual.pick_dual(quick, {"x": 100.0}, set(quick)) == [f"eng{i}" for i in range(6)]
    assert cudnn_dual.pick_dual(quick, {"x": 50.0}, set(quick)) == []          # the own plan is far ahead
    assert cudnn_dual.pick_dual(quick, {}, set(quick)) == []                   # nothing to compare with
    assert cudnn_dual.pick_dual(quick, {"x": 100.0}, {"eng3"}) == ["eng3"]    # only plans that built


def test_quick_tunings_enumeration_stops_at_the_plans_its_cap_keeps(monkeypatch) -> None:
    """Under a cap of 8 the listing keeps the first 2 enumerated plans, so enumerating 2 (quick
    tuning) offers exactly what enumerating 8 would, having built fewer plans."""
    from convdoctor.settings import QUICK

    monkeypatch.setattr(cudnn_plan, "get_handle", lambda *a, **k: 1)
    p = P(f"fprop {BASE} dtype=float16")
    seen = {}
    for extra in (8, QUICK["cudnn_enum_extra"]):
        be = fk.listing_backend(enumerate_engines=True, max_extra=extra, enum_budget_s=10.0,
                                max_plans=QUICK["cudnn_max_plans"], refine=False, dual=False)
        seen[extra] = ([c.key for c in fk.cudnn_candidates(be, p)],
                       be.listing_info()["enumeration"]["enum_added"])
    assert seen[8][0] == seen[2][0]
    assert seen[8][1] > seen[2][1] == 2


def test_with_no_heuristic_plan_quick_enumeration_fills_the_cap(monkeypatch) -> None:
    from convdoctor.settings import QUICK

    monkeypatch.setattr(cudnn_plan, "get_handle", lambda *a, **k: 1)
    monkeypatch.setattr(cudnn_plan, "_mode_plans", lambda *a, **k: iter(()))
    p = P(f"fprop {BASE} dtype=float16")
    be = fk.listing_backend(enumerate_engines=True, max_extra=QUICK["cudnn_enum_extra"],
                            enum_budget_s=10.0, max_plans=QUICK["cudnn_max_plans"], refine=False,
                            dual=False)
    keys = [c.key for c in fk.cudnn_candidates(be, p)]
    added = be.listing_info()["enumeration"]["enum_added"]
    assert added > QUICK["cudnn_enum_extra"] and len(keys) == added <= QUICK["cudnn_max_plans"]
