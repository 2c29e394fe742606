"""`convdoctor.tune.gemm`: 1x1 convolutions as matrix products give PyTorch's convolution results
(fprop, dgrad, wgrad) in every layout, dimensionality and stride, on the CPU in float64."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from convdoctor.engines import gemm as engines_gemm
from convdoctor.engines import gemm_math as gemm
from convdoctor.problem import ConvProblem

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _fmt(t: torch.Tensor) -> torch.memory_format:
    return gemm._cl_format(t.dim()) or torch.contiguous_format


@pytest.mark.parametrize("nd,cl,stride,n", [
    c for c in itertools.product((1, 2, 3), (False, True), (1, 2, 3), (1, 3)) if not (c[0] == 1
                                                                                 and c[1])])
def test_matches_convolution(nd: int, cl: bool, stride: int, n: int) -> None:
    g = torch.Generator().manual_seed(nd * 100 + stride * 10 + n)
    sp = [7, 6, 5][:nd]
    x = torch.randn(n, 4, *sp, dtype=torch.float64, generator=g)
    w = torch.randn(5, 4, *[1] * nd, dtype=torch.float64, generator=g)
    b = torch.randn(5, dtype=torch.float64, generator=g)
    if cl:
        x, w = x.contiguous(memory_format=_fmt(x)), w.contiguous(memory_format=_fmt(w))
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    st = [stride] * nd
    y = CONV[nd](xr, wr, b, st)
    gy = torch.randn(y.shape, dtype=torch.float64, generator=g)
    if cl:
        gy = gy.contiguous(memory_format=_fmt(gy))
    rx, rw = torch.autograd.grad(y, (xr, wr), gy)

    y2 = gemm.fprop(x, w, st, b)
    dx = gemm.dgrad(gy, w, sp, st)
    dw = gemm.wgrad(x, gy, st)
    assert y2.shape == y.shape and torch.allclose(y2, y.detach())
    assert dx.shape == rx.shape and torch.allclose(dx, rx)
    assert dw.shape == rw.shape and torch.allclose(dw, rw)
    if cl:  # the caller's layout comes back
        assert gemm.is_channels_last(y2) and gemm.is_channels_last(dx)
    else:
        assert y2.is_contiguous() and dx.is_contiguous()


def test_dgrad_zero_at_skipped_positions() -> None:
    dy = torch.ones(1, 2, 2, 2, dtype=torch.float64)
    w = torch.ones(2, 3, 1, 1, dtype=torch.float64)
    dx = gemm.dgrad(dy, w, (4, 4), (2, 2))
    assert dx[:, :, 1::2, :].abs().sum() == 0 and dx[:, :, ::2, ::2].eq(2).all()


@pytest.mark.parametrize("text,ok", [
    ("fprop n=2 c=8 h=7 w=7 k=4 r=1 s=1", True),
    ("fprop n=2 c=8 h=7 w=7 k=4 r=1 s=1 stride=2", True),
    ("dgrad n=2 c=8 h=7 w=7 k=4 r=1 s=1 dtype=float16 layout=nhwc", True),
    ("fprop n=2 c=8 h=7 w=7 k=4 r=1 s=1 pad=1", False),
    ("fprop n=2 c=8 h=7 w=7 k=8 r=1 s=1 groups=2", False),
    ("fprop n=2 c=8 h=7 w=7 k=4 r=3 s=1", False),
    ("fprop n=2 c=8 d=3 h=7 w=7 k=4 t=3 r=1 s=1", False),
])
def test_eligibility(text: str, ok: bool) -> None:
    p = ConvProblem.parse(text)
    assert engines_gemm.eligible(p) is ok
    assert gemm.eligible(p.kernel, p.pad_pre, p.pad_post, p.groups) is ok


def test_reduced_precision_restores_flags() -> None:
    m = torch.backends.cuda.matmul
    before = (m.allow_tf32, m.allow_fp16_reduced_precision_reduction)
    with gemm.reduced_precision(not before[0]):
        assert m.allow_tf32 is (not before[0])
        assert m.allow_fp16_reduced_precision_reduction is False
    assert (m.allow_tf32, m.allow_fp16_reduced_precision_reduction) == before
