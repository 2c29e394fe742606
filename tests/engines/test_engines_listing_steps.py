"""Listing steps on the CUDA side, without a GPU: what a listing reports, and the engines it leaves
out (on an H100, a cuDNN plan that never returned from its quick time cost 3D fp16 wgrad problems
their full listing)."""

from __future__ import annotations

from typing import Any

import pytest

from convdoctor.engines import cudnn_enum as cp
from convdoctor.engines import listing
from convdoctor.engines.cudnn import excluded_engines
from convdoctor.problem import ConvProblem

PROBLEM = ConvProblem.parse("wgrad n=2 c=32 d=32 h=32 w=32 k=64 r=3 s=3 t=3 pad=1 dtype=float16 "
                            "layout=nhwc")


class _FakeGraph:
    """The part of a cudnn-frontend graph `_build_index` touches."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.built: list[int] = []

    def get_plan_name_at_index(self, i: int) -> str:
        return self.names[i]

    def build_plan_at_index(self, i: int) -> None:
        self.built.append(i)

    def get_workspace_size_plan_at_index(self, i: int) -> int:
        return 0


class _G:
    def __init__(self, names: list[str]) -> None:
        self.graph = _FakeGraph(names)
        self.source = "enum"
        self.tensors = {"x": object(), "w": object(), "y": object(), "dy": object(),
                        "dx": object(), "dw": object()}
        self.handle = None


@pytest.fixture()
def steps() -> Any:
    heard: list[tuple[str, str, str]] = []
    old = listing.set_step_sink(lambda k, u, n: heard.append((k, u, n)))
    yield heard
    listing.set_step_sink(old)
    cp.clear_cache()


def test_a_build_is_reported_with_its_engine_and_an_excluded_engine_is_not_built(steps) -> None:
    g = _G(["eng69_k24=0_k17=65", "eng65_k2=5_k13=1"])
    with cp.excluding({69: "hung before"}):
        info, plan = cp._build_index(PROBLEM, g, 0, 0, "enum")  # type: ignore[arg-type]
        assert plan is None and not info.built and info.reason == "left out: hung before"
        info2, plan2 = cp._build_index(PROBLEM, g, 1, 0, "enum")  # type: ignore[arg-type]
    assert info2.built and plan2 is not None
    assert g.graph.built == [1]
    assert steps == [("build", "eng65", "eng65_k2=5_k13=1")]
    assert cp.excluded_engine("eng69_k1=0") is None  # the exclusion ended with the block


def test_an_excluded_engine_lists_no_knob_settings(steps) -> None:
    with cp.excluding({7: "hung"}):
        assert list(cp._engine_plans(PROBLEM, None, 7, 0)) == []
    assert steps == []


def test_a_sink_that_raises_never_costs_the_listing() -> None:
    def bad(kind: str, unit: str, name: str) -> None:
        raise OSError("disk full")

    old = listing.set_step_sink(bad)
    try:
        listing.listing_step("time", "eng1", "eng1_k2=0")
    finally:
        listing.set_step_sink(old)


def test_units_name_engines() -> None:
    assert cp.plan_unit("eng69_k24=0_k17=65") == "eng69"
    assert cp.plan_unit("not-a-plan") == ""  # nothing a listing could leave out
    assert cp.unit_engine("eng69") == 69 and cp.unit_engine("engX") is None
    assert excluded_engines({"eng69", "eng7", "torch:heuristic", "engX", ""},
                            {"eng7": "crashed"}) == {
        7: "crashed", 69: "a step of an earlier listing with this engine failed"}
