"""The depthwise Triton kernel: configurations, eligibility, and (where Triton is installed) the
kernel itself under Triton's CPU interpreter against a float64 reference, in both directions and
through the runtime executor. The GPU runs are in tests/engines and tests/runtime (`gpu`)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from convdoctor.kernels import depthwise as dw
from convdoctor.problem import ConvProblem


def test_config_names_parse_and_bad_ones_are_refused() -> None:
    assert dw.parse_config("c4p64w4") == dw.Config(4, 64, 4)
    assert dw.parse_config("c4p64w4").name == "c4p64w4"
    assert dw.parse_config("c4p64w4s") == dw.Config(4, 64, 4, subpixel=True)
    assert dw.parse_config("c4p64w4s").name == "c4p64w4s"
    for bad in ("c3p64w4", "c4p64", "p64w4", "c64p256w4", "c1p256w0", "", "c4p64w4ss"):
        with pytest.raises(ValueError):
            dw.parse_config(bad)
    assert dw.config_of("triton:dw_c1p256w4") == "c1p256w4"
    assert dw.config_of("cudnn:eng0") is None


def test_nchw_tiles_follow_the_plane_size() -> None:
    # a 7x7 plane: 64-lane blocks with several channels each; a 14x14 plane: 256 lanes
    assert dw.nchw_configs(49)[:3] == ("c4p64w4", "c8p64w4", "c16p64w8")
    assert dw.nchw_configs(196)[0] == "c1p256w4"
    assert all(dw.parse_config(c).block_p <= 1024 for c in dw.nchw_configs(112 * 112))
    for n in (1, 7, 49, 196, 400, 784, 12544):
        cfgs = dw.nchw_configs(n)
        assert len(cfgs) == len(set(cfgs)) and "c1p256w4" in cfgs
        for c in cfgs:
            dw.parse_config(c)
    assert dw.configs_for("nhwc", 49) == dw.NHWC_CONFIGS


def test_eligibility() -> None:
    assert dw.eligible("fprop", 2, 32, 32, 32) is None
    assert dw.eligible("dgrad", 1, 32, 32, 32) is None
    assert "wgrad" in (dw.eligible("wgrad", 2, 32, 32, 32) or "")
    assert "3D" in (dw.eligible("fprop", 3, 32, 32, 32) or "")
    assert "depthwise" in (dw.eligible("fprop", 2, 32, 64, 32) or "")   # channel multiplier 2
    assert "depthwise" in (dw.eligible("fprop", 2, 32, 32, 8) or "")    # grouped, not depthwise
    assert "batch" in (dw.eligible("fprop", 2, 8, 8, 8, n=70000) or "")
    assert "channels" in (dw.eligible("fprop", 2, 70000, 70000, 70000) or "")


def test_sample_span_decides_64_bit_offsets() -> None:
    # a channels-last sample of 192 x 4096 x 4096 spans 3.2e9 elements: past 32-bit offsets
    assert dw.sample_span((1, 192, 4096, 4096), (192 * 4096 * 4096, 1, 4096 * 192, 192)) > 2**31
    assert dw.sample_span((64, 576, 14, 14), (576 * 196, 196, 14, 1)) == 576 * 196


def test_policy_offers_configs_for_the_plane_the_kernel_writes() -> None:

    f = ConvProblem.parse("fprop n=8 c=96 h=112 w=112 k=96 r=3 s=3 stride=2 pad=1 groups=96")
    d = ConvProblem.parse("dgrad n=8 c=96 h=112 w=112 k=96 r=3 s=3 stride=2 pad=1 groups=96")
    assert dw.offered(f) == dw.nchw_configs(56 * 56)
    # a strided dgrad: the plane's configurations, then sub-pixel ones tiled for 56 x 56 coarse
    assert dw.offered(d) == dw.nchw_configs(112 * 112) + tuple(
        c + "s" for c in dw.nchw_configs(56 * 56))
    assert not any(c.endswith("s") for c in dw.offered(
        ConvProblem.parse("dgrad n=8 c=96 h=14 w=14 k=96 r=3 s=3 pad=1 groups=96")))
    assert dw.offered(f.with_direction("wgrad")) == ()
    dense = ConvProblem.parse("fprop n=8 c=96 h=14 w=14 k=96 r=3 s=3 pad=1")
    assert dw.offered(dense) == ()
    cl = ConvProblem.parse("fprop n=8 c=96 h=14 w=14 k=96 r=3 s=3 pad=1 groups=96 layout=nhwc")
    assert dw.offered(cl) == dw.NHWC_CONFIGS


# ------------------------------------------------------------------ the kernel (interpreter)
CASES = [  # x shape, kernel, stride, pad_pre, pad_post, dilation
    ((2, 3, 11, 10), (1, 1), (2, 3), (0, 0), (0, 0), (1, 1)),      # parities that get no tap
    ((2, 3, 12, 13), (4, 5), (3, 2), (3, 0), (1, 4), (2, 3)),      # pads past the kernel
    ((2, 4, 6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((2, 3, 8, 7), (5, 5), (2, 2), (1, 2), (2, 1), (1, 1)),
    ((2, 4, 9, 8), (3, 3), (2, 1), (0, 1), (1, 0), (2, 1)),
    ((2, 5, 17), (7,), (3,), (2,), (4,), (1,)),
]


@pytest.fixture
def interpreter():
    """Triton's CPU interpreter (switched on by this folder's conftest where there is no GPU)."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("a GPU is here: the compiled kernel is tested by the `gpu` tests instead")
    dw.unavailable.cache_clear()
    yield


def _ref(x, w, stride, pp, po, dil):
    nd = x.dim() - 2
    conv = {1: F.conv1d, 2: F.conv2d}[nd]
    xp = F.pad(x.double(), [v for i in reversed(range(nd)) for v in (pp[i], po[i])])
    xp.requires_grad_(True)
    y = conv(xp, w.double(), stride=stride, dilation=dil, groups=x.shape[1])
    dy = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (g,) = torch.autograd.grad(y, xp, dy)
    sl = (slice(None), slice(None)) + tuple(slice(pp[i], pp[i] + x.shape[2 + i])
                                            for i in range(nd))
    return y.detach(), dy, g[sl]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_kernel_matches_float64_in_both_directions(interpreter, case: int,
                                                   channels_last: bool) -> None:
    shape, k, st, pp, po, dl = CASES[case]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    w = torch.randn(shape[1], 1, *k, generator=g)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    y_ref, dy, dx_ref = _ref(x, w, st, pp, po, dl)
    dy = dy.float()
    if channels_last and x.dim() == 4:
        dy = dy.contiguous(memory_format=torch.channels_last)
    cfg = "c32p32w4" if channels_last else "c2p32w4"
    y = dw.fprop(x, w, stride=st, pad_pre=pp, pad_post=po, dilation=dl, config=cfg)
    assert y.shape == y_ref.shape
    assert y.is_contiguous(memory_format=dw.format_of(x))
    torch.testing.assert_close(y.double(), y_ref, atol=1e-5, rtol=1e-5)
    for c in (cfg, cfg + "s"):   # the masked gather and the sub-pixel split
        out = torch.full(x.shape, float("nan")).contiguous(memory_format=dw.format_of(x))
        dx = dw.dgrad(dy, w, x.shape, stride=st, pad_pre=pp, dilation=dl, config=c, out=out)
        assert dx is out  # written in place, every element (the NaN poison is gone)
        torch.testing.assert_close(dx.double(), dx_ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="dgrad only"):
        dw.fprop(x, w, stride=st, pad_pre=pp, pad_post=po, dilation=dl, config=cfg + "s")


@pytest.mark.parametrize("case", [1, 3])
def test_64_bit_offsets_and_other_layouts_and_half_precision(interpreter, case: int) -> None:
    """The WIDE (64-bit offset) variant computes the same; a (N, W, C) memory layout for 1D and
    fp16 inputs (fp32 accumulation) work through the same strides."""
    shape, k, st, pp, po, dl = CASES[case]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    w = torch.randn(shape[1], 1, *k, generator=g)
    if x.dim() == 3:   # channels-last memory for a 1D convolution
        x = x.permute(0, 2, 1).contiguous().permute(0, 2, 1)
    y_ref, dy, dx_ref = _ref(x, w, st, pp, po, dl)
    y = torch.full(y_ref.shape, float("nan"))
    dw.run("fprop", x, w, y, stride=st, pad_pre=pp, dilation=dl, config="c2p32w4", wide=True)
    torch.testing.assert_close(y.double(), y_ref, atol=1e-5, rtol=1e-5)
    dx = torch.full(x.shape, float("nan"))
    dw.run("dgrad", dy.float(), w, dx, stride=st, pad_pre=pp, dilation=dl, config="c2p32w4",
           wide=True)
    torch.testing.assert_close(dx.double(), dx_ref, atol=1e-5, rtol=1e-5)
    yh = dw.fprop(x.half(), w.half(), stride=st, pad_pre=pp, pad_post=po, dilation=dl,
                  config="c1p32w4")
    assert yh.dtype == torch.float16
    ref_h, _, _ = _ref(x.half().double(), w.half().double(), st, pp, po, dl)
    torch.testing.assert_close(yh.double(), ref_h, atol=2e-2, rtol=1e-2)


def test_runtime_executor_runs_its_direction_only(interpreter) -> None:
    from convdoctor.engines.base import ConvArgs

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 9, 9, generator=g)
    w = torch.randn(4, 1, 3, 3, generator=g)
    b = torch.randn(4, generator=g)
    a = ConvArgs((2, 2), (1, 1), (1, 1), False, (0, 0), 4)
    text = "n=2 c=4 h=9 w=9 k=4 r=3 s=3 stride=2 pad=1 groups=4"
    fp = dw.ENGINE.executor("triton:dw_c4p32w4", ConvProblem.parse("fprop " + text))
    dg = dw.ENGINE.executor("triton:dw_c4p32w4", ConvProblem.parse("dgrad " + text))
    y = fp.fprop(x, w, b, a)
    torch.testing.assert_close(y, F.conv2d(x, w, b, stride=2, padding=1, groups=4),
                               atol=1e-5, rtol=1e-5)
    dy = torch.randn(y.shape, generator=g)
    xr = x.clone().requires_grad_(True)
    F.conv2d(xr, w, stride=2, padding=1, groups=4).backward(dy)
    gx, gw, gb = dg.backward(dy, x, w, [4], a, (True, False, True))
    assert gw is None
    assert gx is not None and gb is not None
    torch.testing.assert_close(gx, xr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gb, dy.sum(dim=(0, 2, 3)))
    with pytest.raises(RuntimeError):
        fp.backward(dy, x, w, None, a, (True, False, False))   # tuned for fprop
    with pytest.raises(RuntimeError):
        dg.backward(dy, x, w, None, a, (False, True, False))   # no wgrad
    with pytest.raises(RuntimeError):
        dg.fprop(x, w, None, a)


def test_executor_refuses_a_problem_the_kernel_does_not_run() -> None:

    with pytest.raises(ValueError, match="depthwise"):
        dw.ENGINE.executor("triton:dw_c1p256w4",
                     ConvProblem.parse("fprop n=2 c=4 h=9 w=9 k=8 r=3 s=3 pad=1"))
    with pytest.raises(ValueError):
        dw.ENGINE.executor("triton:dw_c3p256w4",
                     ConvProblem.parse("fprop n=2 c=4 h=9 w=9 k=4 r=3 s=3 pad=1 groups=4"))
    with pytest.raises(ValueError, match="not a depthwise kernel key"):
        dw.ENGINE.executor("cudnn:eng0", ConvProblem.parse("fprop n=2 c=4 h=9 w=9 k=4 r=3 s=3 groups=4"))
