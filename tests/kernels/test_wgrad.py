"""The wgrad Triton kernel: configurations, eligibility, the split, and (where Triton is installed)
the kernel itself under Triton's CPU interpreter against a float64 reference, in every program
shape (per tap, per tap row), both tile orientations, 1D/2D/3D, and through the runtime executor.
The GPU runs are in tests/engines and tests/runtime (`gpu`)."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F

from convdoctor.kernels import wgrad as wg
from convdoctor.problem import ConvProblem


def test_config_names_parse_and_bad_ones_are_refused() -> None:
    assert wg.parse_config("m32n64l64w4s3") == wg.Config(32, 64, 64, 4, 3)
    assert wg.parse_config("m64n128l32w8s3r") == wg.Config(64, 128, 32, 8, 3, row=True)
    assert wg.parse_config("m64n128l32w8s3rv2") == wg.Config(64, 128, 32, 8, 3, row=True, waves=2)
    for name in wg.CONFIGS_SMALL_K + wg.CONFIGS_LARGE_K + ("m16n16l16w1s1v8",):
        assert wg.parse_config(name).name == name
    for bad in ("m8n64l64w4s3", "m32n64l64w4", "m32n48l64w4s3", "m32n64l512w4s3",
                "m32n64l64w3s3", "m32n64l64w4s3x", "m32n64l64w4s9", "m32n64l64w4s3v0", ""):
        with pytest.raises(ValueError):
            wg.parse_config(bad)
    assert wg.config_of("triton:wg_m32n64l64w4s3") == "m32n64l64w4s3"
    assert wg.config_of("triton:dw_c1p256w4") is None
    assert wg.key_of("m32n64l64w4s3r") == "triton:wg_m32n64l64w4s3r"


def test_eligibility_and_offered_configurations() -> None:
    assert wg.eligible("wgrad", 2, 32, 32, 1, (3, 3)) is None
    assert wg.eligible("wgrad", 3, 32, 64, 1, (3, 3, 3), "bfloat16") is None
    assert "weight gradients only" in (wg.eligible("dgrad", 2, 32, 32, 1, (3, 3)) or "")
    assert "ungrouped" in (wg.eligible("wgrad", 2, 32, 32, 2, (3, 3)) or "")
    assert "float64" in (wg.eligible("wgrad", 2, 32, 32, 1, (3, 3), "float64") or "")
    assert "elements" in (wg.eligible("wgrad", 2, 512, 512, 1, (3, 3)) or "")   # 2.4M > 2^18
    assert wg.configs_for(32) == wg.CONFIGS_SMALL_K
    assert wg.configs_for(64) == wg.CONFIGS_LARGE_K


def test_policy_offers_the_kernel_for_small_ungrouped_weight_gradients_only() -> None:

    p = ConvProblem.parse("wgrad n=32 c=32 h=149 w=149 k=32 r=3 s=3")
    assert wg.offered(p) == wg.CONFIGS_SMALL_K
    assert wg.offered(p.with_direction("fprop")) == ()
    assert wg.offered(
        ConvProblem.parse("wgrad n=8 c=512 h=14 w=14 k=512 r=3 s=3 pad=1")) == ()
    assert wg.offered(
        ConvProblem.parse("wgrad n=8 c=64 h=14 w=14 k=64 r=3 s=3 pad=1 groups=2")) == ()
    assert wg.PREFIX == wg.PREFIX


def test_split_fills_the_device_and_keeps_chunks_long() -> None:
    # 6 tiles on 132 SMs: 4 programs per SM wanted -> 88 chunks of whole BLOCK_L steps
    split, chunk = wg.split_for(6, 691488, 64, 132)
    assert split == 88 and chunk % 64 == 0 and split * chunk >= 691488 > (split - 1) * chunk
    # a short reduction: at least MIN_STEPS steps per chunk
    split, chunk = wg.split_for(6, 1000, 64, 132)
    assert chunk >= wg.MIN_STEPS * 64 or split == 1
    # many tiles already: one chunk (written straight into dw, no workspace)
    assert wg.split_for(10000, 50000, 32, 132)[0] == 1
    assert wg.workspace_bytes(64, 64, (3, 3), 4 * 256 * 256, "m64n128l32w8s3r", 132) > 0
    assert wg.workspace_bytes(64, 64, (3, 3), 100, "m64n128l32w8s3r", 132) == 0
    # fewer programs per SM: fewer chunks
    assert wg.split_for(6, 691488, 64, 132, waves=2)[0] < wg.split_for(6, 691488, 64, 132)[0]


# ------------------------------------------------------------------ the kernel (interpreter)
# Small on purpose (the interpreter runs every program in Python), with a batch of 2 where the
# reduction crosses from one sample to the next; every case but the 1D one has more positions
# than the largest BLOCK_L (32), so each configuration also runs split.
CASES = [  # x shape, K, kernel, stride, pad_pre, pad_post, dilation
    ((2, 3, 4, 5), 5, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((2, 4, 10, 9), 7, (3, 2), (2, 1), (0, 1), (0, 1), (1, 2)),
    ((2, 3, 12, 13), 4, (4, 5), (3, 2), (3, 0), (1, 4), (2, 1)),   # asymmetric, pads past the kernel
    ((1, 2, 12), 6, (5,), (2,), (2,), (2,), (1,)),
    ((2, 2, 3, 6, 4), 3, (3, 3, 3), (1, 2, 1), (1, 1, 0), (1, 1, 0), (1, 1, 1)),
    ((2, 17, 4, 5), 33, (1, 1), (1, 1), (0, 0), (0, 0), (1, 1)),   # more than one K and C block
]
CONFIGS = ("m16n16l16w4s1", "m16n32l32w4s2r", "m32n16l16w4s1rv1")


@pytest.fixture
def interpreter():
    """Triton's CPU interpreter (switched on by this folder's conftest where there is no GPU)."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("a GPU is here: the compiled kernel is tested by the `gpu` tests instead")
    wg.unavailable.cache_clear()
    yield


def _ref(x, k, ks, stride, pp, po, dil):
    nd = x.dim() - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    xp = F.pad(x.double(), [v for i in reversed(range(nd)) for v in (pp[i], po[i])])
    w = torch.zeros(k, x.shape[1], *ks, dtype=torch.float64, requires_grad=True)
    y = conv(xp, w, stride=stride, dilation=dil)
    dy = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (g,) = torch.autograd.grad(y, w, dy)
    return dy, g


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("layout", ["nchw", "cl"])
def test_kernel_matches_float64(interpreter, case: int, layout: str, monkeypatch) -> None:
    shape, k, ks, st, pp, po, dl = CASES[case]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    dy, ref = _ref(x, k, ks, st, pp, po, dl)
    dy = dy.float()
    if layout == "cl":
        if x.dim() == 3:   # (N, W, C) memory for 1D
            x, dy = (t.permute(0, 2, 1).contiguous().permute(0, 2, 1) for t in (x, dy))
        else:
            fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
            x, dy = x.contiguous(memory_format=fmt), dy.contiguous(memory_format=fmt)
    positions = dy.shape[0] * math.prod(dy.shape[2:])
    assert positions > 32 or x.dim() == 3, "too few positions to run split"
    for cfg in CONFIGS:
        c = wg.parse_config(cfg)
        tiles = wg.tiles_of(k, shape[1], ks, c)
        # one chunk (dw written directly), then a split reduction (chunks of one BLOCK_L step
        # allowed, so these small reductions split too)
        for min_steps, sms in ((10**9, 1), (1, 64)):
            monkeypatch.setattr(wg, "MIN_STEPS", min_steps)
            split = wg.split_for(tiles, positions, c.block_l, sms, c.waves)[0]
            assert (split > 1) == (sms == 64) or positions <= c.block_l, (cfg, split)
            out = torch.full(ref.shape, float("nan"))
            wg.run(x, dy, out, stride=st, pad_pre=pp, dilation=dl, config=cfg, sms=sms)
            # every element written (the NaN poison is gone) and right
            torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4,
                                       msg=lambda m, c=cfg, n=split: f"{c} split={n}: {m}")


@pytest.mark.parametrize("xt", [False, True])
def test_both_tile_orientations_64_bit_offsets_and_half_precision(interpreter, xt: bool,
                                                                  monkeypatch) -> None:
    """The input tile read with lanes along positions or along columns computes the same, so does
    the WIDE (64-bit offset) variant; fp16 inputs accumulate in fp32; a channels-last dw is
    written through its strides (one chunk) or copied from the reduced partial sums (split)."""
    shape, k, ks, st, pp, po, dl = CASES[0]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    dy, ref = _ref(x, k, ks, st, pp, po, dl)
    for min_steps, sms in ((10**9, 1), (1, 64)):
        monkeypatch.setattr(wg, "MIN_STEPS", min_steps)
        out = torch.full(ref.shape, float("nan")).contiguous(memory_format=torch.channels_last)
        wg.run(x, dy.float(), out, stride=st, pad_pre=pp, dilation=dl, config="m16n16l16w4s1r",
               sms=sms, xt=xt, wide=True)
        assert out.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)
    dyh, refh = _ref(x.half().double(), k, ks, st, pp, po, dl)
    gh = wg.wgrad(x.half(), dyh.half(), ks, stride=st, pad_pre=pp, dilation=dl,
                  config="m16n16l16w4s1")
    assert gh.dtype == torch.float16 and gh.shape == refh.shape
    torch.testing.assert_close(gh.double(), refh, atol=2e-2, rtol=1e-2)


def test_shape_and_dtype_mismatches_are_refused(interpreter) -> None:
    x = torch.randn(2, 3, 8, 8)
    dy = torch.randn(2, 4, 6, 6)
    with pytest.raises(ValueError, match="disagree"):
        wg.run(x, dy, torch.empty(4, 5, 3, 3), stride=(1, 1), pad_pre=(0, 0), dilation=(1, 1),
               config="m16n16l16w4s1")
    with pytest.raises(ValueError, match="rank"):
        wg.run(x, dy[0], torch.empty(4, 3, 3, 3), stride=(1, 1), pad_pre=(0, 0),
               dilation=(1, 1), config="m16n16l16w4s1")
    with pytest.raises(ValueError, match="float16"):
        wg.run(x, dy.half(), torch.empty(4, 3, 3, 3), stride=(1, 1), pad_pre=(0, 0),
               dilation=(1, 1), config="m16n16l16w4s1")
    with pytest.raises(ValueError, match="float64"):
        wg.run(x.double(), dy.double(), torch.empty(4, 3, 3, 3, dtype=torch.float64),
               stride=(1, 1), pad_pre=(0, 0), dilation=(1, 1), config="m16n16l16w4s1")
    ok = torch.empty(4, 3, 3, 3)
    for kw, what in (({"stride": (1,)}, "values"), ({"pad_pre": (0, -1)}, "non-negative"),
                     ({"dilation": (0, 1)}, "positive")):
        args = {"stride": (1, 1), "pad_pre": (0, 0), "dilation": (1, 1), **kw}
        with pytest.raises(ValueError, match=what):
            wg.run(x, dy, ok, config="m16n16l16w4s1", **args)
    with pytest.raises(ValueError, match="empty"):
        wg.run(x[:0], dy[:0], ok, stride=(1, 1), pad_pre=(0, 0), dilation=(1, 1),
               config="m16n16l16w4s1")


def test_runtime_executor_computes_dw_only(interpreter, monkeypatch) -> None:
    from convdoctor.engines.base import ConvArgs

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 9, 9, generator=g)
    w = torch.randn(6, 4, 3, 3, generator=g)
    a = ConvArgs((2, 2), (1, 1), (1, 1), False, (0, 0), 1)
    p = ConvProblem.parse("wgrad n=2 c=4 h=9 w=9 k=6 r=3 s=3 stride=2 pad=1 math=fp32")
    ex = wg.ENGINE.executor("triton:wg_m16n16l16w4s1r", p)
    wr = w.clone().requires_grad_(True)
    y = F.conv2d(x, wr, stride=2, padding=1)
    dy = torch.randn(y.shape, generator=g)
    y.backward(dy)
    gx, gw, gb = ex.backward(dy, x, w, [6], a, (False, True, True))
    assert gx is None and gw is not None and gb is not None
    torch.testing.assert_close(gw, wr.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gb, dy.sum(dim=(0, 2, 3)))
    # TF32 as PyTorch's flag for convolutions says at the time of the call
    seen: list[bool] = []
    real_run = wg.run

    def spy(*args, **kw):
        seen.append(kw["tf32"])
        return real_run(*args, **kw)

    monkeypatch.setattr(wg, "run", spy)
    for flag in (True, False):
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", flag)
        ex.backward(dy, x, w, None, a, (False, True, False))
    assert seen == [True, False]
    with pytest.raises(RuntimeError, match="dw only"):
        ex.backward(dy, x, w, None, a, (True, True, False))
    with pytest.raises(RuntimeError, match="not fprop"):
        ex.fprop(x, w, None, a)
    with pytest.raises(RuntimeError, match="several dtypes"):
        ex.backward(dy, x.double(), w, None, a, (False, True, False))


def test_executor_refuses_a_problem_the_kernel_does_not_run() -> None:

    with pytest.raises(ValueError, match="weight gradients only"):
        wg.ENGINE.executor("triton:wg_m32n64l64w4s3",
                     ConvProblem.parse("dgrad n=2 c=4 h=9 w=9 k=8 r=3 s=3 pad=1"))
    with pytest.raises(ValueError, match="ungrouped"):
        wg.ENGINE.executor("triton:wg_m32n64l64w4s3",
                     ConvProblem.parse("wgrad n=2 c=4 h=9 w=9 k=4 r=3 s=3 pad=1 groups=2"))
    with pytest.raises(ValueError):
        wg.ENGINE.executor("triton:wg_m33n64l64w4s3",
                     ConvProblem.parse("wgrad n=2 c=4 h=9 w=9 k=4 r=3 s=3 pad=1"))
    with pytest.raises(ValueError, match="not a wgrad kernel key"):
        wg.ENGINE.executor("triton:dw_c1p256w4", ConvProblem.parse("wgrad n=2 c=4 h=9 w=9 k=4 r=3 s=3"))
