"""Knob-space refinement and building a plan by its exact name, against the fake cudnn module."""

from __future__ import annotations

import sys
import types
from typing import Any

import cudnn_fakes as fk
import pytest

from convdoctor.engines import cudnn_enum as cudnn_plan
from convdoctor.engines import cudnn_graph
from convdoctor.engines import cudnn_policy as policy
from convdoctor.engines import cudnn_refine as refine
from convdoctor.problem import ConvProblem


@pytest.fixture(autouse=True)
def fake_cudnn(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "cudnn", fk.make_module())
    monkeypatch.setitem(fk.FRONTEND_TYPES, "on", True)
    fk.GRAPHS.clear()
    cudnn_plan.clear_cache()
    yield
    cudnn_plan.clear_cache()


PROBLEM = ConvProblem.parse("fprop n=8 c=16 h=14 w=14 k=32 r=3 s=3 pad=1 dtype=float16")

# quick times (us) of the fake's plans: engine 4 gets faster with knob 2, slower with knob 24
BASE_US = {"eng0_k2=1": 90.0, "eng0_k2=0": 91.0, "eng1": 120.0, "eng2_k17=0": 200.0, "eng5": 110.0}


def fake_us(name: str) -> float:
    if name in BASE_US:
        return BASE_US[name]
    eng, knobs = policy.parse_plan_name(name)
    if eng == 4:
        return 92.0 - 5.0 * knobs[2] + 3.0 * knobs[24]
    if eng == 2:
        return 200.0 - knobs[17]
    return 150.0


def timer(plan: cudnn_plan.ConvPlan) -> float:
    return fake_us(plan.name)


# ---------------------------------------------------------------- pure logic
def test_knob_axis_is_the_whole_range_when_small() -> None:
    assert policy.knob_axis(0, 3, 1) == [0, 1, 2, 3]
    assert policy.knob_axis(1, 16, 1) == list(range(1, 17))
    assert policy.knob_axis(5, 5, 1) == [5]
    wide = policy.knob_axis(0, 1000, 1, limit=8)
    assert len(wide) == 8 and wide[0] == 0 and wide[-1] == 1000


def test_neighbor_settings_change_one_knob_at_a_time() -> None:
    got = policy.neighbor_settings([[0, 1, 2], [0, 1]], (1, 0))
    assert got == [(0, 0), (2, 0), (1, 1)]
    assert (1, 0) not in got
    with pytest.raises(ValueError):
        policy.neighbor_settings([[0, 1]], (0, 0))


def test_knob_number_map_takes_the_single_changed_number() -> None:
    base = {2: 0, 13: 0, 27: 1}
    changed = {"TILE": {2: 1, 13: 0, 27: 1}, "CGA_M": {2: 0, 13: 0, 27: 2},
               "BOTH": {2: 1, 13: 1, 27: 1}}
    assert policy.knob_number_map(base, changed) == {"TILE": 2, "CGA_M": 27}


def test_seeds_are_the_best_of_each_engine_then_plans_close_to_the_best() -> None:
    quick = {"eng67_k2=0": 100.0, "eng67_k2=3": 103.0, "eng67_k2=9": 104.9, "eng67_k2=7": 106.0,
             "eng38_k2=1": 130.0, "eng38_k2=2": 101.0, "eng5": 99.0}
    ranked = sorted(quick, key=quick.__getitem__)
    # one per engine for the two fastest engines (eng5, eng67), then within 5% of 99 us
    assert refine.pick_seeds(ranked, quick) == ["eng5", "eng67_k2=0", "eng38_k2=2", "eng67_k2=3"]
    # the cap counts the per-engine seeds too; a narrow band keeps only those
    assert refine.pick_seeds(ranked, quick, band=0.001) == ["eng5", "eng67_k2=0"]
    assert refine.pick_seeds(ranked, quick, max_seeds=3) == ["eng5", "eng67_k2=0", "eng38_k2=2"]
    assert refine.pick_seeds([], {}) == []


def test_seeds_include_the_best_of_each_knob_family_of_the_fastest_engines() -> None:
    # wav2vec2's pos_conv: eng27 listed in two knob families; the 184 us plan lies one knob from
    # the slower family's plan (364 us), none from the fastest eng27 plan (291 us)
    quick = {"eng27_k2=1_k5=3_k14=5": 291.0, "eng27_k14=4_k2=0": 364.0,
             "eng27_k14=6_k2=1": 380.0, "eng4": 591.0, "eng28_k2=4_k3=0": 803.0,
             "eng28_k2=4": 900.0}
    ranked = sorted(quick, key=quick.__getitem__)
    assert refine.pick_seeds(ranked, quick) == ["eng27_k2=1_k5=3_k14=5", "eng27_k14=4_k2=0",
                                                "eng4"]
    # with three engines eng28 is seeded, but its other family is over 1.5x the fastest
    assert refine.pick_seeds(ranked, quick, engines=3) == [
        "eng27_k2=1_k5=3_k14=5", "eng27_k14=4_k2=0", "eng4", "eng28_k2=4_k3=0"]


def test_family_seeds_leave_the_band_seeds_their_places() -> None:
    # near-best plans stay seeds (so runs do not walk from different seeds); the
    # families come on top, at most two, and none beyond 1.5x the fastest
    quick = {"eng62_k2=0_k5=1": 100.0, "eng62_k2=1_k5=1": 101.0, "eng62_k2=2_k5=1": 102.0,
             "eng62_k2=3_k5=1": 103.0, "eng67_k2=0": 104.0, "eng62_k2=0": 120.0,
             "eng62_k5=0": 130.0, "eng62_k7=0": 140.0, "eng62": 500.0}
    ranked = sorted(quick, key=quick.__getitem__)
    seeds = refine.pick_seeds(ranked, quick)
    assert seeds[:4] == ["eng62_k2=0_k5=1", "eng62_k2=1_k5=1", "eng62_k2=2_k5=1", "eng67_k2=0"]
    assert seeds[4:] == ["eng62_k2=0", "eng62_k5=0"]
    assert "eng62" not in refine.pick_seeds(ranked, quick, max_families=9)
    assert refine.pick_seeds(ranked, quick, max_families=0) == seeds[:4]


# ---------------------------------------------------------------- knob numbers and named builds
def test_engine_knobs_learns_plan_name_numbers_of_frontend_types() -> None:
    spec, mapping = cudnn_plan.engine_knobs(PROBLEM, 1, 4)
    assert [int(t) for t, *_ in spec] == [102, 124]  # the frontend's numbering...
    # TILE_SIZE from the name table, K24 learned from plan names
    assert {str(t): n for t, n in mapping.items()} == {"knob_type.TILE_SIZE": 2,
                                                       "knob_type.K24": 24}
    spec, mapping = cudnn_plan.engine_knobs(PROBLEM, 1, 2)  # K17: learned alone
    assert {str(t): n for t, n in mapping.items()} == {"knob_type.K17": 17}


def test_knob_numbers_by_name_follow_the_backend_enum() -> None:
    assert policy.knob_number_by_name("knob_type.TILE_SIZE") == 2
    assert policy.knob_number_by_name("knob_type.TILEK") == 13
    assert policy.knob_number_by_name("<knob_type.TILE_CGA_N: 15>") == 28
    assert policy.knob_number_by_name("knob_type.SOMETHING_NEW") is None


def test_build_by_name_reaches_a_setting_the_bounded_enumeration_skips() -> None:
    # engine 2's knob 17 runs 0..8: the bounded search tries 0, 4, 8 only
    plan = cudnn_plan.build_plan(PROBLEM, "eng2_k17=5", handle=1, device=0)
    assert plan.name == "eng2_k17=5"
    with pytest.raises((LookupError, RuntimeError)):
        cudnn_plan.build_plan(PROBLEM, "eng2_k17=9", handle=1, device=0)  # out of range


# ---------------------------------------------------------------- refinement
def enumeration() -> cudnn_plan.Enumeration:
    return cudnn_plan.enumerate_plans(PROBLEM, device=0, handle=1, enumerate_engines=False)


def test_refine_walks_the_knobs_of_the_fastest_engines_and_keeps_the_winner() -> None:
    en = enumeration()
    res = refine.refine(PROBLEM, en, timer, device=0, handle=1, engines=2)
    # seeds: the fastest plan of each of the two fastest engines
    assert res.seeds == ["eng0_k2=1", "eng4_k2=0_k24=0"]
    # eng4 k2=3 (77 us) beats every listed plan (best 90 us); its k24=1 neighbour (80 us) is
    # more than 2% behind it, so only the one is kept
    assert [p.name for p in res.plans] == ["eng4_k2=3_k24=0"]
    assert res.plans[0].source == "refine" and res.plans[0].built
    assert res.origin == {"eng4_k2=3_k24=0": "eng4_k2=0_k24=0"}
    assert res.quick_us["eng4_k24=1_k2=3" if "eng4_k24=1_k2=3" in res.quick_us
                        else "eng4_k2=3_k24=1"] == 80.0
    # the kept plan stays buildable from the cache; the others were dropped
    assert cudnn_graph.cached_plan(PROBLEM, "eng4_k2=3_k24=0", 0) is not None
    assert cudnn_graph.cached_plan(PROBLEM, "eng4_k2=1_k24=0", 0) is None
    # heuristic plans are never offered again under refine
    assert not {p.name for p in res.plans} & {p.name for p in en.plans}


def test_refinement_summary_names_seeds_and_kept_plans_as_candidate_keys() -> None:
    res = refine.refine(PROBLEM, enumeration(), timer, device=0, handle=1, engines=2)
    s = res.summary()
    assert s["seeds"] == [["cudnn:eng0_k2=1", 90.0], ["cudnn:eng4_k2=0_k24=0", 92.0]]
    assert s["kept"] == [["cudnn:eng4_k2=3_k24=0", 77.0, "cudnn:eng4_k2=0_k24=0"]]
    assert s["timed"] == len(res.quick_us) and s["tried"] == res.tried > 0
    assert s["built"] == res.built and s["notes"] == [] and s["seconds"] >= 0
    assert s["budget_spent"] is False
    import json

    assert json.loads(json.dumps(s)) == s
    spent = refine.refine(PROBLEM, enumeration(), timer, device=0, handle=1, budget_s=0.0)
    assert spent.summary()["budget_spent"] is True
    # the flag survives a long note list cut to 10 (plans that failed to run come first)
    crowded = refine.Refinement(plans=[], notes=[f"eng{i}: quick run failed" for i in range(12)]
                                + [refine.BUDGET_NOTE])
    assert crowded.summary()["budget_spent"] is True and len(crowded.summary()["notes"]) == 10


def test_refine_adds_nothing_when_no_neighbour_comes_close() -> None:
    slow = {**BASE_US, "eng0_k2=0": 140.0}  # (91 us would be within 2% of the best: kept)

    def t(plan: cudnn_plan.ConvPlan) -> float:
        if plan.name in slow:
            return slow[plan.name]
        return 95.0 if plan.name == "eng4_k2=0_k24=0" else 140.0

    res = refine.refine(PROBLEM, enumeration(), t, device=0, handle=1)
    assert res.plans == [] and res.built > 0


def test_refine_stops_at_its_time_budget() -> None:
    res = refine.refine(PROBLEM, enumeration(), timer, device=0, handle=1, budget_s=0.0)
    assert res.plans == [] and res.built == 0
    assert "refinement time budget spent" in res.notes


def test_refine_survives_a_plan_that_fails_to_run() -> None:
    def t(plan: cudnn_plan.ConvPlan) -> float:
        if plan.name == "eng4_k2=3_k24=0":
            raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")
        return timer(plan)

    res = refine.refine(PROBLEM, enumeration(), t, device=0, handle=1)
    assert "eng4_k2=3_k24=0" not in [p.name for p in res.plans]
    assert [p.name for p in res.plans] == ["eng4_k2=2_k24=0"]  # 82 us, next best
    # the plan that built but did not run is not left in the plan cache either
    assert cudnn_graph.cached_plan(PROBLEM, "eng4_k2=3_k24=0", 0) is None
    assert cudnn_graph.cached_plan(PROBLEM, "eng4_k2=2_k24=0", 0) is not None


def test_backend_offers_refined_plans_with_their_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    # the problem's own listing (the dual's: test_engines_cudnn_plans.py)
    be = fk.listing_backend(enumerate_engines=False, max_extra=0, enum_budget_s=1.0,
                            refine_budget_s=4.0, dual=False)
    en = enumeration()
    monkeypatch.setattr(cudnn_plan, "enumerate_plans", lambda *a, **k: en)
    monkeypatch.setattr(refine, "event_timer", lambda p, bufs: timer)
    real = refine.refine
    monkeypatch.setattr(refine, "refine", lambda *a, **k: real(*a, **{**k, "handle": 1}))
    cands = fk.cudnn_candidates(be, PROBLEM)
    by = {c.key: c for c in cands}
    assert "cudnn:eng4_k2=3_k24=0" in by
    notes = by["cudnn:eng4_k2=3_k24=0"].notes
    assert "source=refine" in notes
    assert any(n.startswith("one knob from eng4_k2=0_k24=0: quick 77.0 us vs 92.0 us")
               for n in notes)
    # the listing's record: the enumeration's counts and the walk's seeds and kept plans
    info = be.listing_info()
    assert info["lean"] is False and info["enumeration"] == en.summary()
    assert info["enumeration"]["built"] == len(en.built()) > 0
    assert info["refinement"]["kept"][0][0] == "cudnn:eng4_k2=3_k24=0"
    assert ["cudnn:eng4_k2=0_k24=0", 92.0] in info["refinement"]["seeds"]
    # refinement off: the listing is the enumeration's alone
    be.settings = be.settings.replace(cudnn_refine=False)
    assert "cudnn:eng4_k2=3_k24=0" not in {c.key for c in fk.cudnn_candidates(be, PROBLEM)}
    assert "refinement" not in be.listing_info()
    # a listing cuDNN refuses leaves its error, not the previous problem's record

    def refuse(*a: object, **k: object) -> None:
        raise RuntimeError("CUDNN_STATUS_NOT_SUPPORTED")

    monkeypatch.setattr(cudnn_plan, "enumerate_plans", refuse)
    assert fk.cudnn_candidates(be, PROBLEM) == [] and be.last_enumeration is None
    assert be.listing_info() == {"lean": False,
                                 "error": "RuntimeError: CUDNN_STATUS_NOT_SUPPORTED"}


def _bare_backend(*, enumerate_engines: bool, max_extra: int) -> Any:
    """A CudaBackend without a GPU (no __init__): what cudnn_candidates reads, on the fake cudnn."""
    # the problem's own listing (the dual's: test_engines_cudnn_plans.py)
    return fk.listing_backend(enumerate_engines=enumerate_engines, max_extra=max_extra,
                              enum_budget_s=1.0, refine_budget_s=4.0, dual=False)


def test_backend_short_list_has_neither_enumeration_nor_refinement(monkeypatch) -> None:

    be = _bare_backend(enumerate_engines=True, max_extra=8)
    asked: list[bool] = []
    real_enum = cudnn_plan.enumerate_plans

    def enum(*a: object, **k: object) -> cudnn_plan.Enumeration:
        asked.append(bool(k["enumerate_engines"]))
        return real_enum(PROBLEM, device=0, handle=1, enumerate_engines=bool(k["enumerate_engines"]))

    monkeypatch.setattr(cudnn_plan, "enumerate_plans", enum)
    monkeypatch.setattr(refine, "event_timer", lambda p, bufs: timer)
    real = refine.refine
    monkeypatch.setattr(refine, "refine", lambda *a, **k: real(*a, **{**k, "handle": 1}))
    full = fk.cudnn_candidates(be, PROBLEM)
    assert asked == [True] and be.last_refinement is not None
    assert any("source=enum" in c.notes for c in full)
    short = fk.cudnn_candidates(be, PROBLEM, lean=True)
    assert asked == [True, False] and be.last_refinement is None
    assert be.listing_info()["lean"] is True and "refinement" not in be.listing_info()
    assert short and all("source=refine" not in c.notes and "source=enum" not in c.notes
                         for c in short)


def test_backend_refinement_failure_is_a_note_not_an_error(monkeypatch) -> None:
    be = fk.listing_backend(enumerate_engines=False, max_extra=0, enum_budget_s=1.0,
                            refine_budget_s=4.0, dual=False)

    def boom(p: ConvProblem) -> None:
        raise RuntimeError("CUDA out of memory")

    be.placements_for = boom  # type: ignore[method-assign]
    en = enumeration()
    monkeypatch.setattr(cudnn_plan, "enumerate_plans", lambda *a, **k: en)
    cands = fk.cudnn_candidates(be, PROBLEM)
    assert cands and all("source=refine" not in c.notes for c in cands)
    assert "refinement failed: RuntimeError: CUDA out of memory" in be.last_refinement.notes[0]


def test_backend_passes_its_refinement_budget_to_refine(monkeypatch: pytest.MonkeyPatch) -> None:
    be = fk.listing_backend(enumerate_engines=False, max_extra=0, enum_budget_s=1.0,
                            refine_budget_s=4.0, dual=False)
    en = enumeration()
    monkeypatch.setattr(cudnn_plan, "enumerate_plans", lambda *a, **k: en)
    monkeypatch.setattr(refine, "event_timer", lambda p, bufs: timer)
    seen: dict = {}
    real = refine.refine

    def spy(*a, **k):
        seen.clear()
        seen.update(k)
        return real(*a, **{**k, "handle": 1})

    monkeypatch.setattr(refine, "refine", spy)
    fk.cudnn_candidates(be, PROBLEM)
    assert seen["budget_s"] == 4.0 and "max_seeds" not in seen and "rounds" not in seen
    assert be.last_refinement.tried > 0


class _FakeGpu:
    """A host clock and a GPU timeline: each plan call costs `host_s` of host time and then
    `kernel_s` of GPU time once the GPU is free; a spin keeps the GPU busy; an event completes
    when the GPU reaches it. `stall_s` is added once to the host time of call number `stall_at`."""

    def __init__(self, host_s: float, kernel_s: float, stall_at: int = -1,
                 stall_s: float = 0.0) -> None:
        self.host_s, self.kernel_s, self.stall_at, self.stall_s = host_s, kernel_s, stall_at, stall_s
        self.h = 0.0  # host now
        self.g = 0.0  # GPU busy until
        self.calls = 0
        self.spins: list[float] = []
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.t = 0.0

            def record(self) -> None:
                self.t = max(fake.g, fake.h)

            def synchronize(self) -> None:
                fake.h = max(fake.h, self.t)

            def elapsed_time(self, end: Event) -> float:
                return (end.t - self.t) * 1e3  # ms

        self.Event = Event

    def clock(self) -> float:
        return self.h

    def spin(self, device: int, seconds: float) -> None:
        self.spins.append(seconds)
        self.g = max(self.g, self.h) + seconds

    def synchronize(self, device: object = None) -> None:
        self.h = max(self.h, self.g)

    def execute(self, *a: object, **k: object) -> None:
        self.h += self.host_s + (self.stall_s if self.calls == self.stall_at else 0.0)
        self.calls += 1
        self.g = max(self.g, self.h) + self.kernel_s


def _fake_timer(monkeypatch: pytest.MonkeyPatch, gpu: _FakeGpu, **kw: object):
    import torch

    from convdoctor.measure import timing

    monkeypatch.setattr(torch.cuda, "Event", gpu.Event)
    monkeypatch.setattr(torch.cuda, "synchronize", gpu.synchronize)
    monkeypatch.setattr(timing, "spin", gpu.spin)
    monkeypatch.setattr(timing, "spin_rate", lambda device: 1.0e9)
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=gpu.clock))
    buf = types.SimpleNamespace(device=types.SimpleNamespace(index=0))
    plan = types.SimpleNamespace(execute=gpu.execute, workspace=lambda: None,
                                 release_workspace=lambda: None)
    return refine.event_timer(PROBLEM, {"x": buf, "w": buf, "y": buf}, **kw), plan


def test_quick_timer_times_kernels_not_launch_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    # a 17 us kernel behind 25 us of host launch cost per call (an fp16 ResNet-50 layer3 shape)
    gpu = _FakeGpu(host_s=25e-6, kernel_s=17e-6)
    t, plan = _fake_timer(monkeypatch, gpu)
    assert t(plan) == pytest.approx(17.0)
    # the two timed batches (the last two spins) each behind a spin covering 3 launches
    assert len(gpu.spins) >= 2 and min(gpu.spins[-2:]) >= 3 * 25e-6
    # the plain timer (spin=False) reads mostly launch cost
    gpu = _FakeGpu(host_s=25e-6, kernel_s=17e-6)
    t, plan = _fake_timer(monkeypatch, gpu, spin=False)
    assert t(plan) > 24.0 and not gpu.spins


def test_quick_timer_retakes_a_batch_its_spin_did_not_cover(monkeypatch) -> None:
    # the first-call probe (2 calls), LaunchTimer's estimate (5) and preparation (2 batches of
    # 3) come first; a 1 ms host stall on the 13th call (the first timed one): that batch ran dry
    # and is retaken behind a longer spin
    gpu = _FakeGpu(host_s=25e-6, kernel_s=17e-6, stall_at=13, stall_s=1e-3)
    t, plan = _fake_timer(monkeypatch, gpu)
    assert t(plan) == pytest.approx(17.0)
    assert max(gpu.spins) > 1e-3  # the retake's spin covers the stall


def test_quick_timer_cuts_a_plan_far_slower_than_the_fastest(monkeypatch) -> None:
    # Depthwise layers' slow plans, each timed with ~20 calls, made the candidate listing
    # outlast the worker's 30 s. After a 17 us plan (probe: 17 us + 25 us launch), a 5 ms
    # plan gets 3 calls (warm-up, probe, re-probe) and that reading; a 40 us plan (probe within
    # 2x + 50 us of the fastest probe) is timed in full.
    gpu = _FakeGpu(host_s=25e-6, kernel_s=17e-6)
    t, plan = _fake_timer(monkeypatch, gpu)
    assert t(plan) == pytest.approx(17.0)
    full = gpu.calls
    assert full > 10
    gpu.kernel_s, gpu.calls = 5e-3, 0
    assert t(plan) == pytest.approx(5000.0, rel=0.02)
    assert gpu.calls == 3
    gpu.kernel_s, gpu.calls = 40e-6, 0
    assert t(plan) == pytest.approx(40.0)
    assert gpu.calls == full
    # a host hiccup on a fast plan's probe (15 us kernel, 200 us stall) is not a cut: the
    # re-probe reads it right and the plan is timed in full
    gpu.kernel_s, gpu.calls, gpu.stall_at, gpu.stall_s = 15e-6, 0, 1, 200e-6
    assert t(plan) == pytest.approx(15.0)
    assert gpu.calls == full + 1
    # without a fastest plan yet nothing is cut
    gpu = _FakeGpu(host_s=25e-6, kernel_s=5e-3)
    t, plan = _fake_timer(monkeypatch, gpu)
    assert t(plan) == pytest.approx(5000.0) and gpu.calls > 3
    # the plain timer cuts alike
    gpu = _FakeGpu(host_s=25e-6, kernel_s=17e-6)
    t, plan = _fake_timer(monkeypatch, gpu, spin=False)
    assert t(plan) > 17.0
    gpu.kernel_s, gpu.calls = 5e-3, 0
    assert t(plan) == pytest.approx(5000.0, rel=0.02) and gpu.calls == 3


def test_quick_timer_keeps_the_probe_of_a_plan_over_half_a_second_per_call(monkeypatch) -> None:
    # the worker's step watchdog gives one quick-time step 30 s; a plan at 0.6 s per call with
    # no fastest plan yet runs 3 calls in one step (warm-up, probe, re-probe), not ~16, and each part of a quick time reports its own step
    from convdoctor.engines import listing

    heard: list[tuple[str, str, str]] = []
    old = listing.set_step_sink(lambda k, u, n: heard.append((k, u, n)))
    try:
        gpu = _FakeGpu(host_s=25e-6, kernel_s=0.6)
        t, plan = _fake_timer(monkeypatch, gpu)
        plan.name = "eng69_k24=0_k17=65"
        assert t(plan) == pytest.approx(600_000.0, rel=0.02) and gpu.calls == 3
        assert heard == [("time", "eng69", "eng69_k24=0_k17=65")]
        heard.clear()
        gpu = _FakeGpu(host_s=25e-6, kernel_s=0.4)  # under the cut: timed in full
        t, plan = _fake_timer(monkeypatch, gpu)
        plan.name = "eng7"
        assert t(plan) == pytest.approx(400_000.0, rel=0.02) and gpu.calls > 3
        assert heard == [("time", "eng7", "eng7")]
    finally:
        listing.set_step_sink(old)


def test_refine_checks_its_budget_before_each_plan(monkeypatch) -> None:
    # each quick time costs 1 s of a fake clock; with a 2.5 s budget the walk stops after the
    # third timing, not at the end of a chunk of 32 neighbours nor of the listed plans
    clock = [0.0]
    monkeypatch.setattr(refine, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    timed: list[str] = []

    def t(plan: cudnn_plan.ConvPlan) -> float:
        clock[0] += 1.0
        timed.append(plan.name)
        return timer(plan)

    en = enumeration()
    listed = [p.name for p in en.built() if refine._canon(p.name) is not None]
    assert len(listed) > 3
    res = refine.refine(PROBLEM, en, t, device=0, handle=1, budget_s=2.5)
    assert len(timed) == 3 and timed == listed[:3]
    assert refine.BUDGET_NOTE in res.notes and res.built == 0
    # with time for the listed plans and two more, the walk stops inside its first chunk
    clock[0] = 0.0
    timed.clear()
    cudnn_plan.clear_cache()
    en = enumeration()
    res = refine.refine(PROBLEM, en, t, device=0, handle=1, budget_s=len(listed) + 1.5)
    assert len(timed) == len(listed) + 2 and res.built == 2
    assert refine.BUDGET_NOTE in res.notes


def test_backend_listing_reports_its_steps_and_leaves_an_excluded_engine_out(monkeypatch) -> None:
    # on an H100, a plan of one engine never returned from its quick time while listing
    # 3D fp16 wgrad problems; the worker names such a step and asks the next listing to leave
    # the engine out (`listing_exclude`)
    from convdoctor.engines import listing

    be = _bare_backend(enumerate_engines=True, max_extra=8)
    real_enum = cudnn_plan.enumerate_plans
    monkeypatch.setattr(cudnn_plan, "enumerate_plans", lambda *a, **k: real_enum(
        PROBLEM, device=0, handle=1, enumerate_engines=bool(k["enumerate_engines"])))
    monkeypatch.setattr(refine, "event_timer", lambda p, bufs: timer)
    real = refine.refine
    monkeypatch.setattr(refine, "refine", lambda *a, **k: real(*a, **{**k, "handle": 1}))
    heard: list[tuple[str, str, str]] = []
    old = listing.set_step_sink(lambda k, u, n: heard.append((k, u, n)))
    try:
        full = {c.key for c in fk.cudnn_candidates(be, PROBLEM)}
        assert any(k.startswith("cudnn:eng4_") for k in full)
        assert ("time", "eng4", "eng4_k2=0_k24=0") in heard          # a listed plan
        assert ("time", "eng4", "eng4_k2=3_k24=0") in heard          # a neighbour of the walk
        assert heard[-1] == ("setup", "", "listing done")
        assert {k for k, _u, _n in heard} >= {"build", "time", "engine", "knobs"}
        assert all(u == f"eng{policy.parse_plan_name(n)[0]}" for k, u, n in heard
                   if k in ("build", "time"))
        assert "left_out" not in be.listing_info()
        cudnn_plan.clear_cache()
        heard.clear()
        be.listing_exclude = {"eng4"}
        left = {c.key for c in fk.cudnn_candidates(be, PROBLEM)}
    finally:
        listing.set_step_sink(old)
    assert left and not any(k.startswith("cudnn:eng4_") for k in left)
    assert not any(u == "eng4" for _k, u, _n in heard)
    assert be.listing_info()["left_out"] == ["eng4"]
    assert cudnn_plan.excluded_engine("eng4_k2=0_k24=0") is None  # only for that listing
