"""`torch:im2col`: grouped convolutions as a patch copy and one batched product (CPU, float64),
its eligibility, and the runtime executor."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from convdoctor.engines import im2col as engines_im2col
from convdoctor.engines import im2col_math as im2col
from convdoctor.problem import ConvProblem

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
    assert engines_im2col.unfit(pos) is None
    # dgrad: the products and their permuted copy, in fp32 (2 x 157 MB)
    assert engines_im2col.patch_bytes(pos) == 2 * 8 * 768 * 128 * 50 * 4
    assert engines_im2col.patch_bytes(pos.with_direction("fprop")) == 8 * 768 * 128 * 50 * 4
    for text, why in [
        ("fprop n=8 c=64 h=14 w=14 k=64 r=3 s=3 pad=1", "one group"),             # dense
        ("fprop n=8 c=64 h=14 w=14 k=64 r=3 s=3 pad=1 groups=64", "depthwise"),   # depthwise
        ("fprop n=2 c=16 d=4 h=4 w=4 k=16 t=3 r=3 s=3 groups=4", "3D"),
        ("fprop n=256 c=512 h=56 w=56 k=512 r=3 s=3 pad=1 groups=32", "GiB"),
    ]:
        assert why in (engines_im2col.unfit(ConvProblem.parse(text)) or ""), text
    # a channel multiplier (K = 2C) is grouped, not depthwise in the kernel's sense
    assert engines_im2col.unfit(ConvProblem.parse(
        "fprop n=2 c=8 h=9 w=9 k=16 r=3 s=3 groups=8")) is None


def test_runtime_executor_runs_all_three_directions() -> None:
    from convdoctor.engines.base import ConvArgs
    from convdoctor.engines.registry import executor_for as torch_exec

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


def test_inputs_that_are_views_or_odd_layouts() -> None:
    """Sliced (storage offset), batch-expanded, batch-1 inputs and a channels-last weight."""
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(3, 10, 12, 12, dtype=torch.float64, generator=gen)
    w = torch.randn(6, 4, 3, 3, dtype=torch.float64, generator=gen)
    xs = [base[1:, 1:9, 2:, :11],                                   # offset, non-dense
          base[:1, :8].expand(4, 8, 12, 12),                         # stride 0 on the batch
          base[:1, 2:10].contiguous(),                               # batch 1
          base[:, :8].contiguous(memory_format=torch.channels_last)]
    for x in xs:
        for ww in (w, w.contiguous(memory_format=torch.channels_last)):
            y_ref, dy, dx_ref, dw_ref = _reference(x, ww, (2, 1), (1, 0), (0, 2), (1, 2), 2)
            torch.testing.assert_close(im2col.fprop(x, ww, (2, 1), (1, 0), (0, 2), (1, 2), 2),
                                       y_ref, atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(im2col.dgrad(dy, ww, x.shape[2:], (2, 1), (1, 0), (0, 2),
                                                    (1, 2), 2), dx_ref, atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(im2col.wgrad(x, dy, ww.shape, (2, 1), (1, 0), (0, 2),
                                                    (1, 2), 2), dw_ref, atol=1e-12, rtol=1e-12)


def test_half_precision_dgrad_sums_taps_in_fp32() -> None:
    # a long kernel (64 taps summed by the fold): with the products kept in fp32 until the fold
    # the bf16 result is as close to float64 as one final rounding allows
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 8, 40, dtype=torch.float64, generator=gen)
    w = torch.randn(8, 4, 64, dtype=torch.float64, generator=gen).bfloat16().double()
    _, dy, _, _ = _reference(x, w, (1,), (32,), (32,), (1,), 2)
    dy16 = dy.bfloat16()
    dx = im2col.dgrad(dy16, w.bfloat16(), (40,), (1,), (32,), (32,), (1,), 2)
    assert dx.dtype == torch.bfloat16
    # reference on the bf16-rounded dy: only the final rounding (2^-8 relative) remains
    xr = x.clone().requires_grad_(True)
    F.conv1d(F.pad(xr, [32, 32]), w, groups=2).backward(dy16.double())
    err = ((dx.double() - xr.grad).norm() / xr.grad.norm()).item()
    assert err < 4e-3, err


def test_executor_keeps_pytorchs_layouts_and_checks_its_inputs() -> None:
    from convdoctor.engines.base import ConvArgs
    from convdoctor.engines.registry import executor_for as torch_exec

    ex = torch_exec("torch:im2col")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 9, 9, generator=gen).contiguous(memory_format=torch.channels_last)
    w = torch.randn(6, 4, 3, 3, generator=gen).contiguous(memory_format=torch.channels_last)
    a = ConvArgs((1, 1), (1, 1), (1, 1), False, (0, 0), 2)
    y = ex.fprop(x.contiguous(), w, None, a)        # contiguous x, channels-last w
    assert y.is_contiguous(memory_format=torch.channels_last)
    dy = torch.randn(y.shape, generator=gen)          # contiguous dy for a channels-last x
    gx, gw, _ = ex.backward(dy, x, w, None, a, (True, True, False))
    assert gx.is_contiguous(memory_format=torch.channels_last)   # x's layout (compile relies on it)
    assert gw.is_contiguous(memory_format=torch.channels_last)   # w's layout
    with pytest.raises(ValueError, match="groups"):
        ex.fprop(torch.randn(2, 9, 9, 9), w.contiguous(), None, a)   # 9 channels, 2 x 4 expected
    with pytest.raises(ValueError, match="bias"):
        ex.fprop(x, w, torch.zeros(6, dtype=torch.float64), a)


def test_newer_tf32_setting_does_not_break_the_matrix_routes() -> None:
    """PyTorch raises when the legacy `allow_tf32` is read after `fp32_precision` was set; the
    routes use the newer setting then, and put it back."""
    from convdoctor.engines import gemm_math as gemm
    from convdoctor.engines.base import ConvArgs
    from convdoctor.engines.registry import executor_for as torch_exec

    m = torch.backends.cuda.matmul
    if not hasattr(m, "fp32_precision"):
        pytest.skip("this PyTorch has no fp32_precision setting")
    before = m.fp32_precision
    try:
        m.fp32_precision = "tf32"
        with gemm.reduced_precision(False):
            assert m.fp32_precision == "ieee"
        assert m.fp32_precision == "tf32"
        ex = torch_exec("torch:im2col")
        x, w = torch.randn(2, 8, 9, 9), torch.randn(6, 4, 3, 3)
        y = ex.fprop(x, w, None, ConvArgs((1, 1), (1, 1), (1, 1), False, (0, 0), 2))
        torch.testing.assert_close(y, F.conv2d(x, w, padding=1, groups=2), atol=1e-4, rtol=1e-4)
    finally:
        m.fp32_precision = before
