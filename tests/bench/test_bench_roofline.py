"""A bench row's best time against the roofline, the layer classes that stay far from it, and how
the summary and the human report carry them. Synthetic peaks and times: pure arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from convdoctor.bench.report import _roofline_lines
from convdoctor.bench.roofline import (
    FAR,
    add_roofline,
    far_classes,
    layer_class,
    roofline_summary,
    row_roofline,
)
from convdoctor.bench.summary import summarize
from convdoctor.problem import ConvProblem

# 100 TFLOP/s for TF32 and 1 TB/s: a ridge at an intensity of 100 FLOP/byte
PEAKS = {"device": "test", "flops": {"float32/tf32": 100e12, "float16": 400e12}, "bandwidth": 1e12}
DW = "wgrad n=64 c=96 k=96 h=56 w=56 r=7 s=7 pad=3 groups=96 dtype=float32 layout=nhwc"
DENSE = "fprop n=64 c=256 k=256 h=28 w=28 r=3 s=3 pad=1 dtype=float32 layout=nhwc"


def P(text: str) -> ConvProblem:
    return ConvProblem.parse(text)


def _row(text: str, heur: float | None, bench: float | None, tuned: float | None) -> dict[str, Any]:
    return {"problem_key": P(text).key(), "heuristic_s": heur, "benchmark_s": bench,
            "tuned_s": tuned}


def test_layer_classes_name_direction_kind_kernel_and_stride() -> None:
    assert layer_class(P(DW)) == "wgrad depthwise 7x7"
    assert layer_class(P(DENSE)) == "fprop 3x3"
    assert layer_class(P("dgrad n=8 c=64 k=128 h=28 w=28 r=1 s=1 stride=2 dtype=float16 "
                         "layout=nhwc")) == "dgrad 1x1 s2"
    assert layer_class(P("fprop n=8 c=64 k=64 h=28 w=28 r=3 s=3 pad=1 groups=4")) == \
        "fprop grouped 3x3"
    assert layer_class(P("fprop n=2 c=8 k=8 d=8 h=8 w=8 t=3 r=3 s=3 pad=1")) == "fprop 3D 3x3x3"


def test_the_best_of_the_three_times_is_held_to_the_bound_that_limits() -> None:
    p = P(DW)
    best = 1e-3
    rf = row_roofline(_row(DW, 4e-3, 2e-3, best), PEAKS)
    assert rf is not None and rf["best_s"] == best and rf["bound"] == "memory"
    assert rf["percent"] == pytest.approx(100 * (p.min_bytes() / best) / 1e12)
    dense = P(DENSE)
    rf2 = row_roofline(_row(DENSE, 1e-3, None, 2e-3), PEAKS)
    assert rf2 is not None and rf2["bound"] == "compute"
    assert rf2["percent"] == pytest.approx(100 * dense.flops() / 1e-3 / 100e12)


def test_no_peaks_no_time_or_no_peak_for_the_dtype_give_no_figure() -> None:
    assert row_roofline(_row(DW, 1e-3, 1e-3, 1e-3), None) is None
    assert row_roofline(_row(DW, None, None, None), PEAKS) is None
    bf16 = DW.replace("float32", "bfloat16")
    assert row_roofline(_row(bf16, 1e-3, None, None), PEAKS) is None


def test_a_class_is_far_only_when_every_row_of_it_is_below_the_limit() -> None:
    def rf(cls: str, pct: float) -> dict[str, Any]:
        return {"roofline": {"class": cls, "percent": pct, "bound": "memory", "best_s": 1.0}}

    rows = [rf("wgrad depthwise 7x7", 5.0), rf("wgrad depthwise 7x7", 12.0),
            rf("fprop 3x3", 10.0), rf("fprop 3x3", FAR + 1), rf("dgrad 1x1", 29.9),
            {"roofline": None}, {}]
    far = far_classes(rows)
    assert [c["class"] for c in far] == ["wgrad depthwise 7x7", "dgrad 1x1"]
    assert far[0]["rows"] == 2 and far[0]["max_percent"] == 12.0 and far[0]["median_percent"] == 8.5


def test_the_summary_and_the_report_carry_the_roofline_figures() -> None:
    rows = [_row(DW, 4e-3, 2e-3, 1e-3), _row(DENSE, 1e-3, 1e-3, 1e-3)]
    add_roofline(rows, PEAKS)
    s = roofline_summary(rows)
    assert s["roofline_rows_below_30pct"] == sum(1 for r in rows if r["roofline"]["percent"] < 30)
    lines = _roofline_lines(s)
    assert lines and "median" in lines[0]
    assert _roofline_lines({}) == []


def test_summarize_adds_nothing_without_roofline_rows() -> None:
    assert "roofline_median_percent" not in summarize([])
