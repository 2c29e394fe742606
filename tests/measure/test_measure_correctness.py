"""Correctness checks (`convdoctor.measure.correctness`): the tolerance per dtype and math mode,
growing with long reductions in strict fp32, the relative error, and the float64 reference's
comparison flagging NaN and error."""

from __future__ import annotations

import math

import pytest
import torch

from convdoctor.engines.torch_ops import reference_cuda as reference
from convdoctor.measure import correctness
from convdoctor.measure.correctness import compare_norm as compare
from convdoctor.problem import ConvProblem


def P(text: str) -> ConvProblem:
    return ConvProblem.parse(text)


def test_tolerance_table_per_dtype_and_math() -> None:
    base = "n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1"
    assert correctness.tolerance(P(f"fprop {base} dtype=float32 math=strict")) == pytest.approx(1e-5)
    assert correctness.tolerance(P(f"fprop {base} dtype=float32 math=tf32")) == pytest.approx(5e-3)
    assert correctness.tolerance(P(f"fprop {base} dtype=float16")) == pytest.approx(5e-3)
    assert correctness.tolerance(P(f"fprop {base} dtype=bfloat16")) == pytest.approx(2e-2)


def test_strict_tolerance_grows_with_long_reductions_only() -> None:
    mid = P("wgrad n=8 c=8 h=28 w=28 k=8 r=3 s=3 pad=1 dtype=float32 math=strict")
    red = correctness.reduction_length(mid)
    assert red == 8 * 28 * 28
    assert correctness.tolerance(mid) == pytest.approx(4 * math.sqrt(red) * 2.0 ** -24)
    big = P("wgrad n=64 c=8 h=112 w=112 k=8 r=3 s=3 pad=1 dtype=float32 math=strict")
    assert correctness.tolerance(big) == pytest.approx(5e-5)  # capped: TF32 errors (>=2e-4) still fail


def test_rel_error_zero_reference() -> None:
    assert correctness.rel_error(0.0, 0.0) == 0.0
    assert correctness.rel_error(1.0, 0.0) == math.inf
    assert correctness.rel_error(1.0, 4.0) == 0.25


def test_reference_is_float64_and_compare_flags_nan_and_error() -> None:
    torch.manual_seed(1)
    p = P("fprop n=2 c=4 h=6 w=6 k=3 r=3 s=3 pad=1 dtype=float16")
    x = torch.randn(p.x_shape()).half()
    w = torch.randn(p.w_shape()).half()
    ref = reference(p, x, w, None, None)
    assert ref.dtype == torch.float64
    good = ref.half()
    c = compare(p, good, ref)
    assert c.ok and c.max_rel_err < 1e-3 and c.tolerance == pytest.approx(5e-3)
    bad = good.clone()
    bad[0, 0, 0, 0] = float("nan")
    c = compare(p, bad, ref)
    assert not c.ok and "NaN" in c.detail
    c = compare(p, (ref * 1.05).half(), ref)
    assert not c.ok and c.max_rel_err == pytest.approx(0.05, rel=0.05)
