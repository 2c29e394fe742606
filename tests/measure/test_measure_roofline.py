"""The roofline (`convdoctor.measure.roofline`): percent of the attainable speed, compute or
memory bound, per problem and math mode."""

from __future__ import annotations

import pytest

from convdoctor.measure import roofline
from convdoctor.problem import ConvProblem


def P(text: str) -> ConvProblem:
    return ConvProblem.parse(text)


def test_percent_of_roofline_compute_and_memory_bound() -> None:
    r = roofline.percent_of_roofline(1e12, 1e9, 0.01, peak_flops=200e12, peak_bw=2e12)
    # intensity 1000 FLOP/B * 2e12 B/s = 2e15 > 2e14 -> compute bound; achieved 1e14 -> 50 %
    assert r["bound"] == "compute" and r["percent"] == pytest.approx(50.0)
    r = roofline.percent_of_roofline(1e9, 1e9, 1e-3, peak_flops=200e12, peak_bw=2e12)
    # intensity 1 -> attainable 2e12 FLOP/s; achieved 1e12 -> 50 %, memory bound
    assert r["bound"] == "memory" and r["percent"] == pytest.approx(50.0)
    assert roofline.percent_of_roofline(1, 1, 0, 1, 1)["percent"] is None
    p = P("fprop n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1 dtype=float16")
    pk = roofline.Peaks("dev", {"float16": 1e12}, 1e9)
    assert roofline.roofline_for(p, 1e-3, pk)["percent"] > 0
    assert roofline.math_key("float32", "strict") == "float32/strict"
