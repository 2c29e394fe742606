"""`torch:im2col`: grouped convolutions as a patch copy and one batched product (CPU, float64),
its eligibility, and the runtime executor."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from convdoctor.problem import ConvProblem
from convdoctor.tune import im2col
from convdoctor.tune.gpu import policy

CASES = [  # x shape, w shape, stride, pad_pre, pad_post, dilation, groups
    ((2, 8, 9, 11), (6, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 2),
    ((2, 6, 10, 9), (9, 2, 5, 5), (2, 2), (1, 2), (2, 1), (1, 1), 3),
    ((2, 8, 13, 12), (8, 2, 3, 3), (2, 1), (0, 1), (1, 0), (2, 1), 4),
    ((2, 6, 17), (4, 3, 7), (3,), (2,), (4,), (1,), 2),
    ((2, 8, 7), (8, 4, 8), (1,), (4,), (4,), (1,), 2),   # wav2vec2 pos_conv's shape, small
]


def _reference(x, w, st, pp, po, dl, g):
    nd = x.dim() - 2
    conv = {1: F.conv1d, 2: F.conv2d}[nd]
    xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    y = conv(F.pad(xr, [v for i in reversed(range(nd)) for v in (pp[i], po[i])]), wr,
             stride=st, dilation=dl, groups=g)
    dy = torch.randn(y.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(3))
    y.backward(dy)
    return y.detach(), dy, xr.grad, wr.grad


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_three_directions_match_pytorch_in_float64(case: int, channels_last: bool) -> None:
    xs, ws, st, pp, po, dl, g = CASES[case]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(xs, dtype=torch.float64, generator=gen)
    w = torch.randn(ws, dtype=torch.float64, generator=gen)
    cl = channels_last and x.dim() == 4
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    y_ref, dy, dx_ref, dw_ref = _reference(x, w, st, pp, po, dl, g)
    if cl:
        dy = dy.contiguous(memory_format=torch.channels_last)
    y = im2col.fprop(x, w, st, pp, po, dl, g)
    dx = im2col.dgrad(dy, w, x.shape[2:], st, pp, po, dl, g)
    dw = im2col.wgrad(x, dy, w.shape, st, pp, po, dl, g)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(dx, dx_ref, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(dw, dw_ref, atol=1e-12, rtol=1e-12)
    assert dw.is_contiguous()
    if cl:  # outputs keep the caller's layout
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert dx.is_contiguous(memory_format=torch.channels_last)
    else:
        assert y.is_contiguous() and dx.is_contiguous()


def test_offered_for_grouped_layers_that_fit_only() -> None:
    pos = ConvProblem.parse("dgrad n=8 c=768 k=768 w=49 s=128 pad=64 groups=16")
    assert policy.im2col_unfit(pos) is None
    assert policy.im2col_bytes(pos) == 8 * 768 * 128 * 50 * 4       # 157 MB
    for text, why in [
        ("fprop n=8 c=64 h=14 w=14 k=64 r=3 s=3 pad=1", "grouped"),               # dense
        ("fprop n=8 c=64 h=14 w=14 k=64 r=3 s=3 pad=1 groups=64", "depthwise"),   # depthwise
        ("fprop n=2 c=16 d=4 h=4 w=4 k=16 t=3 r=3 s=3 groups=4", "3D"),
        ("fprop n=256 c=512 h=56 w=56 k=512 r=3 s=3 pad=1 groups=32", "GiB"),
    ]:
        assert why in (policy.im2col_unfit(ConvProblem.parse(text)) or ""), text
    # a channel multiplier (K = 2C) is grouped, not depthwise in the kernel's sense
    assert policy.im2col_unfit(ConvProblem.parse(
        "fprop n=2 c=8 h=9 w=9 k=16 r=3 s=3 groups=8")) is None


def test_runtime_executor_runs_all_three_directions() -> None:
    from convdoctor.runtime.execs import ConvArgs, torch_exec

    ex = torch_exec("torch:im2col")
    assert ex is not None and ex.key == "torch:im2col" and not ex.is_noop()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 9, 9, generator=gen)
    w = torch.randn(6, 4, 3, 3, generator=gen)
    b = torch.randn(6, generator=gen)
    a = ConvArgs((2, 2), (1, 1), (1, 1), False, (0, 0), 2)
    y = ex.fprop(x, w, b, a)
    torch.testing.assert_close(y, F.conv2d(x, w, b, stride=2, padding=1, groups=2),
                               atol=1e-5, rtol=1e-5)
    xr, wr, br = (t.clone().requires_grad_(True) for t in (x, w, b))
    dy = torch.randn(y.shape, generator=gen)
    F.conv2d(xr, wr, br, stride=2, padding=1, groups=2).backward(dy)
    gx, gw, gb = ex.backward(dy, x, w, [6], a, (True, True, True))
    torch.testing.assert_close(gx, xr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gw, wr.grad, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(gb, br.grad, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError):
        ex.fprop(x, w, None, ConvArgs((2, 2), (1, 1), (1, 1), True, (0, 0), 2))
