"""PyTorch's convolution ops by direction (`convdoctor.engines.torch_ops.torch_conv`): the
direction and padding mapping checked against autograd on the CPU in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from convdoctor.engines.torch_ops import torch_conv
from convdoctor.problem import ConvProblem


def P(text: str) -> ConvProblem:
    return ConvProblem.parse(text)


CASES = [
    "n=2 c=4 h=9 w=8 k=6 r=3 s=3 pad=1",
    "n=2 c=4 h=9 w=8 k=6 r=3 s=2 stride=2 pad_pre=0 pad_post=1",
    "n=2 c=6 h=7 w=7 k=6 r=3 s=3 groups=6 stride=2 pad_pre=1,0 pad_post=0,2 dil=1",
    "n=2 c=3 w=40 k=5 s=7 stride=3 pad_pre=2 pad_post=4",
    "n=1 c=2 d=5 h=6 w=7 k=4 t=3 r=3 s=3 pad=1 dil=2",
]


def _autograd(p: ConvProblem, x, w):
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    pad = []
    for a, b in zip(reversed(p.pad_pre), reversed(p.pad_post), strict=True):
        pad += [a, b]
    conv = (F.conv1d, F.conv2d, F.conv3d)[p.ndim - 1]
    y = conv(F.pad(x, pad), w, None, p.stride, 0, p.dilation, p.groups)
    dy = torch.randn_like(y)
    y.backward(dy)
    return y.detach(), dy, x.grad, w.grad


@pytest.mark.parametrize("text", CASES)
def test_torch_conv_matches_autograd_for_all_directions(text: str) -> None:
    torch.manual_seed(0)
    p = P("fprop " + text + " dtype=float32")
    x = torch.randn(p.x_shape(), dtype=torch.float64)
    w = torch.randn(p.w_shape(), dtype=torch.float64)
    y, dy, dx, dw = _autograd(p, x, w)
    assert tuple(y.shape) == p.y_shape()
    assert torch.allclose(torch_conv(p, x, w), y, atol=1e-10)
    pd = p.with_direction("dgrad")
    assert torch.allclose(torch_conv(pd, dy, w, torch.empty_like(x)), dx, atol=1e-10)
    pw = p.with_direction("wgrad")
    assert torch.allclose(torch_conv(pw, x, dy, torch.empty_like(w)), dw, atol=1e-10)
