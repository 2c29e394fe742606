"""The small-C dgrad Triton kernel: configurations, eligibility, and (where Triton is installed)
the kernel itself under Triton's CPU interpreter against a float64 reference: 1D/2D/3D, strides,
dilations, asymmetric padding, several K blocks, channels-last, 64-bit offsets, fp16, in both the
masked gather and the sub-pixel ("s") variant. The GPU runs are in tests/engines and tests/runtime
(`gpu`) and lab/sc_probe.py."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from convdoctor.kernels import smallc as sc


def test_config_names_parse_and_bad_ones_are_refused() -> None:
    assert sc.parse_config("k16p256w4") == sc.Config(16, 256, 4)
    assert sc.parse_config("k16p256w4").name == "k16p256w4"
    assert sc.parse_config("k8p128w4s") == sc.Config(8, 128, 4, subpixel=True)
    assert sc.parse_config("k8p128w4s").name == "k8p128w4s"
    for name in sc.CONFIGS:
        assert sc.parse_config(name).name == name
    for bad in ("k3p256w4", "k16p256", "p256w4", "k64p256w4", "k16p256w0", "k16p256w3", "",
                "k16p256w4ss", "c16p256w4", "k16p256w32"):
        with pytest.raises(ValueError):
            sc.parse_config(bad)
    assert sc.config_of("triton:sc_k16p256w4") == "k16p256w4"
    assert sc.config_of("triton:dw_c1p256w4") is None
    assert sc.key_of("k8p256w4s") == "triton:sc_k8p256w4s"


def test_offered_configurations_follow_k_and_the_stride() -> None:
    assert sc.configs_for(64) == sc.CONFIGS
    assert sc.configs_for(32) == sc.CONFIGS
    for name in sc.SUBPIXEL_CONFIGS:
        assert sc.parse_config(name).subpixel and sc.parse_config(name).name == name
    assert not any(sc.parse_config(c).subpixel for c in sc.CONFIGS)
    small = sc.configs_for(3)   # K blocks above 4 would leave most lanes idle
    assert small and all(sc.parse_config(c).block_k <= 4 for c in small)
    assert all(sc.parse_config(c).block_k <= 4 for c in sc.configs_for(1, strided=True))
    # a strided problem: sub-pixel configurations only (the masked gather is far slower there)
    assert sc.configs_for(64, strided=True) == sc.SUBPIXEL_CONFIGS


def test_eligibility() -> None:
    assert sc.eligible("dgrad", 2, 3, 64, 1) is None
    assert sc.eligible("dgrad", 3, 1, 32, 1, "bfloat16") is None
    assert sc.eligible("dgrad", 1, 4, 512, 1, "float16") is None
    assert "data gradients only" in (sc.eligible("fprop", 2, 3, 64, 1) or "")
    assert "data gradients only" in (sc.eligible("wgrad", 2, 3, 64, 1) or "")
    assert "4D" in (sc.eligible("dgrad", 4, 3, 64, 1) or "")
    assert "ungrouped" in (sc.eligible("dgrad", 2, 4, 4, 2) or "")
    assert "input channels" in (sc.eligible("dgrad", 2, 8, 64, 1) or "")
    assert "float64" in (sc.eligible("dgrad", 2, 3, 64, 1, "float64") or "")
    assert "batch" in (sc.eligible("dgrad", 2, 3, 64, 1, n=70000) or "")


# ------------------------------------------------------------------ the kernel (interpreter)
CASES = {  # x shape, K, kernel, stride, pad_pre, pad_post, dilation, configurations
    "3d_3x3x3": ((1, 1, 4, 5, 6), 5, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1),
                 ("k4p128w4",)),
    "2d_7x7_s2": ((1, 3, 11, 10), 6, (7, 7), (2, 2), (3, 3), (2, 2), (1, 1),
                  ("k8p128w4", "k4p64w4s")),
    "2d_dil2_s21": ((2, 2, 9, 8), 4, (3, 3), (2, 1), (1, 2), (2, 0), (2, 2),
                    ("k4p64w4", "k4p32w4s")),
    "1d_5_s3": ((2, 1, 17), 3, (5,), (3,), (1,), (2,), (1,), ("k4p32w4", "k4p32w4s")),
    "2d_k33": ((1, 2, 6, 5), 33, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), ("k16p32w4",)),
    "3d_s2": ((1, 3, 5, 4, 5), 3, (3, 2, 3), (2, 1, 2), (1, 0, 1), (0, 1, 1), (1, 2, 1),
              ("k4p128w4", "k4p64w4s")),
}


@pytest.fixture
def interpreter():
    """Triton's CPU interpreter (switched on by this folder's conftest where there is no GPU)."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("a GPU is here: the compiled kernel is tested by the `gpu` tests instead")
    sc.unavailable.cache_clear()
    yield


def _dx(shape, w, dy, stride, pp, po, dil):
    """dx (float64) of conv(x, w) for an input of `shape` and output gradient `dy`, through
    autograd on the padded input."""
    nd = len(shape) - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    xp = F.pad(torch.zeros(shape, dtype=torch.float64),
               [v for i in reversed(range(nd)) for v in (pp[i], po[i])])
    xp.requires_grad_(True)
    y = conv(xp, w.double(), stride=stride, dilation=dil)
    assert y.shape == dy.shape
    (gx,) = torch.autograd.grad(y, xp, dy.double())
    sl = (slice(None), slice(None)) + tuple(slice(pp[i], pp[i] + shape[2 + i])
                                            for i in range(nd))
    return gx[sl]


def _ref(shape, k, ks, stride, pp, po, dil):
    """(w, dy, dx) in float64 for a random w and dy."""
    nd = len(shape) - 2
    g = torch.Generator().manual_seed(1)
    w = torch.randn(k, shape[1], *ks, dtype=torch.float64, generator=g)
    out = [(shape[2 + i] + pp[i] + po[i] - dil[i] * (ks[i] - 1) - 1) // stride[i] + 1
           for i in range(nd)]
    dy = torch.randn(shape[0], k, *out, dtype=torch.float64, generator=g)
    return w, dy, _dx(shape, w, dy, stride, pp, po, dil)


def _case(name: str):
    shape, k, ks, st, pp, po, dl, cfgs = CASES[name]
    w, dy, ref = _ref(shape, k, ks, st, pp, po, dl)
    return shape, st, pp, dl, cfgs, w, dy, ref


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_float64(interpreter, name: str) -> None:
    shape, st, pp, dl, cfgs, w, dy, ref = _case(name)
    for cfg in cfgs:
        out = torch.full(shape, float("nan"))
        got = sc.run(dy.float(), w.float(), out, stride=st, pad_pre=pp, dilation=dl, config=cfg)
        assert got is out   # written in place, every element (the NaN poison is gone)
        torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5,
                                   msg=lambda m, c=cfg: f"{c}: {m}")


@pytest.mark.parametrize("name", ["2d_7x7_s2", "2d_dil2_s21"])
def test_channels_last(interpreter, name: str) -> None:
    """dy, w and dx in channels-last memory: addressed through their strides; `dgrad` allocates
    dx in dy's memory format."""
    shape, st, pp, dl, cfgs, w, dy, ref = _case(name)
    cl = torch.channels_last
    dyc = dy.float().contiguous(memory_format=cl)
    wc = w.float().contiguous(memory_format=cl)
    for cfg in cfgs:
        got = sc.dgrad(dyc, wc, shape, stride=st, pad_pre=pp, dilation=dl, config=cfg)
        assert got.shape == shape and got.is_contiguous(memory_format=cl)
        torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-5)
        out = torch.full(shape, float("nan")).contiguous(memory_format=cl)
        sc.run(dy.float(), w.float(), out, stride=st, pad_pre=pp, dilation=dl, config=cfg)
        torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


def test_64_bit_offsets_and_1d_channels_last(interpreter) -> None:
    for name in ("3d_s2", "1d_5_s3"):
        shape, st, pp, dl, cfgs, w, dy, ref = _case(name)
        d = dy.float()
        if d.dim() == 3:   # (N, W, K) memory for a 1D convolution
            d = d.permute(0, 2, 1).contiguous().permute(0, 2, 1)
        for cfg in cfgs:
            out = torch.full(shape, float("nan"))
            sc.run(d, w.float(), out, stride=st, pad_pre=pp, dilation=dl, config=cfg, wide=True)
            torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_accumulates_in_fp32(interpreter, dtype) -> None:
    shape, st, pp, dl, cfgs, w, dy, _ = _case("2d_7x7_s2")
    dyh, wh = dy.to(dtype), w.to(dtype)
    ref = _dx(shape, wh, dyh, st, pp, CASES["2d_7x7_s2"][5], dl)   # of the rounded inputs
    for cfg in cfgs:
        got = sc.dgrad(dyh, wh, shape, stride=st, pad_pre=pp, dilation=dl, config=cfg)
        assert got.dtype == dtype
        tol = 2e-2 if dtype == torch.float16 else 1e-1
        torch.testing.assert_close(got.double(), ref, atol=tol, rtol=tol)


def test_shape_and_dtype_mismatches_are_refused(interpreter) -> None:
    dy = torch.randn(2, 4, 6, 6)
    w = torch.randn(4, 3, 3, 3)
    dx = torch.empty(2, 3, 8, 8)
    kw = dict(stride=(1, 1), pad_pre=(0, 0), dilation=(1, 1), config="k4p64w4")
    with pytest.raises(ValueError, match="disagree"):
        sc.run(dy, torch.randn(5, 3, 3, 3), dx, **kw)
    with pytest.raises(ValueError, match="disagree"):
        sc.run(dy, w, torch.empty(2, 2, 8, 8), **kw)
    with pytest.raises(ValueError, match="dims"):
        sc.run(dy[0], w, dx, **kw)
    with pytest.raises(ValueError, match="float16"):
        sc.run(dy.half(), w, dx, **kw)
    with pytest.raises(ValueError, match="float64"):
        sc.run(dy.double(), w.double(), dx.double(), **kw)
    with pytest.raises(ValueError, match="at most 4"):
        sc.run(torch.randn(2, 4, 6, 6), torch.randn(4, 5, 3, 3), torch.empty(2, 5, 8, 8), **kw)
    with pytest.raises(ValueError, match="values"):
        sc.run(dy, w, dx, **{**kw, "stride": (1,)})
    with pytest.raises(ValueError):
        sc.run(dy, w, dx, **{**kw, "config": "k3p64w4"})
