"""The forward implicit-GEMM Triton kernel (`triton:fp_` candidates): configurations, the offer,
the contiguous flat paths and, where Triton is installed, the kernel under Triton's CPU interpreter
against a float64 reference - NCHW and channels-last, strides, dilation, asymmetric padding, 1D,
channel and output-channel counts that are not multiples of the tiles - and the runtime executor.
The GPU figures come from lab/fp_probe.py and lab/fp_sweep.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from convdoctor.kernels import fprop as fp
from convdoctor.problem import ConvProblem


def test_config_names_parse_and_bad_ones_are_refused() -> None:
    assert fp.parse_config("k64p128c32w4s3") == fp.Config(64, 128, 32, 4, 3)
    assert fp.parse_config("k64p32j32w4s4") == fp.Config(64, 32, 32, 4, 4, nat=True)
    for name in fp.KP_CONFIGS + fp.J_CONFIGS + fp.OFFERED:
        assert fp.parse_config(name).name == name
    for bad in ("k128p64c32w4", "k8p64c32w4s3", "k128p48c32w4s3", "k128p64c32w3s3",
                "k128p64c512w4s3", "k128p64c32w4s9", "", "k128p64l32w4s3", "m128n64c32w4s3",
                "k64p64c32w4",
                "k64p64x32w4s3"):
        with pytest.raises(ValueError):
            fp.parse_config(bad)


def test_keys_eligibility_and_the_configurations_offered() -> None:

    assert fp.config_of("triton:fp_k64p32j32w4s4") == "k64p32j32w4s4"
    assert fp.config_of("triton:wg_m32n64l64w4s3") is None
    assert fp.key_of("k64p32j32w4s4") == "triton:fp_k64p32j32w4s4"
    assert fp.PREFIX == fp.PREFIX
    for name in fp.OFFERED:
        assert fp.parse_config(name).nat  # the weight as given: no copy at run time
    p = ConvProblem.parse("fprop n=8 c=512 w=99 k=512 s=2 stride=2")
    assert fp.offered(p) == fp.OFFERED
    assert fp.offered(
        ConvProblem.parse("fprop n=32 c=64 h=56 w=56 k=64 r=3 s=3 pad=1 layout=nchw")) == fp.OFFERED
    for dt in ("float16", "bfloat16"):
        assert fp.offered(ConvProblem.parse(f"fprop n=8 c=3 h=32 w=32 k=16 r=3 s=3 dtype={dt}"))
    for text, why in (("dgrad n=8 c=512 w=99 k=512 s=2 stride=2", "forward convolutions only"),
                      ("wgrad n=8 c=512 w=99 k=512 s=2 stride=2", "forward convolutions only"),
                      ("fprop n=2 c=8 d=4 h=8 w=8 k=8 t=3 r=3 s=3", "1D and 2D"),
                      ("fprop n=2 c=8 h=8 w=8 k=8 r=3 s=3 groups=2", "ungrouped"),
                      ("fprop n=2 c=8 h=8 w=8 k=8 r=3 s=3 dtype=float16 layout=nhwc",
                       "half precision in NCHW only"),
                      ("fprop n=70000 c=8 w=8 k=8 s=3", "batch of 70000")):
        q = ConvProblem.parse(text)
        assert why in (fp.unfit(q) or ""), text
        assert fp.offered(q) == ()


def _flags(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride=(1, 1), pad=(0, 0)):
    xs, xst = fp._as2d(x)
    ws, wst = fp._as2d(w)
    ys, yst = fp._as2d(y)
    return fp.flat_flags(xs, xst, ws, wst, ys, yst, (1, *stride), (0, *pad))


def test_flat_paths_are_taken_exactly_where_the_layout_allows() -> None:
    cl = torch.channels_last
    # 1x1 stride 1, contiguous: all three, in 2D and in 1D (height 1; on the strided
    # paths 1D runs 4-8x slower)
    x, w, y = torch.zeros(2, 8, 5, 6), torch.zeros(4, 8, 1, 1), torch.zeros(2, 4, 5, 6)
    assert _flags(x, w, y) == (True, True, True)
    assert _flags(x[:, :, 0], w[:, :, 0], y[:, :, 0]) == (True, True, True)
    # 3x3 padded: x is gathered; y and a contiguous w stay flat
    x3, w3 = torch.zeros(2, 8, 7, 8), torch.zeros(4, 8, 3, 3)
    assert _flags(x3, w3, torch.zeros(2, 4, 7, 8), pad=(1, 1)) == (False, True, True)
    # 1D with a kernel of 2 and stride 2 (wav2vec2 conv6's shape): y and w flat
    assert _flags(torch.zeros(2, 8, 11), torch.zeros(4, 8, 2), torch.zeros(2, 4, 5),
                  stride=(1, 2)) == (False, True, True)
    # channels-last or strided: not flat
    assert _flags(x.contiguous(memory_format=cl), w, y) == (False, True, True)
    assert _flags(x, w, y.contiguous(memory_format=cl)) == (True, False, True)
    assert _flags(x3, w3.contiguous(memory_format=cl), torch.zeros(2, 4, 5, 6)) == (
        False, True, False)
    assert _flags(x[:, :, :, :3], w, y[:, :, :, :3]) == (False, False, True)
    assert _flags(x, fp.tap_major(w3), torch.zeros(2, 4, 3, 4))[2] is False
    # a size-1 height's stride never matters; a size-1 width needs a unit row stride
    x1, y1 = torch.zeros(2, 8, 3, 6)[:, :, :1], torch.zeros(2, 4, 3, 6)[:, :, :1]
    assert _flags(x1, w, y1) == (True, True, True)
    assert _flags(torch.zeros(2, 8, 5, 3)[:, :, :, :1], w,
                  torch.zeros(2, 4, 5, 3)[:, :, :, :1]) == (False, False, True)


def test_configurations_past_the_grids_limit_are_not_offered() -> None:
    big = ConvProblem.parse("fprop n=1 c=3 h=2100 w=2100 k=16 r=3 s=3 pad=1")  # 4.41M positions
    offered = fp.configs_for(big)
    assert offered and all(fp.parse_config(c).block_p >= 128 for c in offered)
    assert set(offered) < set(fp.OFFERED)


def _triton() -> None:
    why = fp.unavailable()
    if why is not None:
        pytest.skip(why)


CASES = [
    # (x shape, w shape, stride, pad_pre, pad_post, dilation, channels_last)
    ((2, 5, 6, 7), (7, 5, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False),
    ((2, 19, 10, 9), (33, 19, 3, 3), (2, 2), (0, 1), (1, 0), (1, 1), False),   # stride, asym
    ((1, 6, 9, 12), (5, 6, 1, 7), (1, 1), (0, 3), (0, 3), (1, 1), False),      # 1x7
    ((2, 4, 7, 7), (6, 4, 3, 3), (1, 1), (2, 2), (2, 2), (2, 2), False),       # dilation
    ((2, 17, 8, 7), (9, 17, 3, 1), (1, 1), (1, 0), (1, 0), (1, 1), True),      # channels-last
    ((3, 40, 5, 5), (20, 40, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), False),    # 1x1, C > BLOCK_C
    ((2, 32, 4, 6), (17, 32, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), False),    # 1x1, C = BLOCK_C
    ((2, 16, 7, 7), (20, 16, 1, 1), (2, 2), (0, 0), (0, 0), (1, 1), False),    # strided 1x1
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("config", ["k16p16c16w4s1", "k32p16c32w4s2", "k16p32c16w4s2+tap",
                                    "k16p16j16w4s2", "k32p16j32w4s3+tap", fp.OFFERED[2]])
def test_the_kernel_matches_a_float64_reference(case, config: str) -> None:
    _triton()
    xs, wsz, st, pre, post, dl, cl = case
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(xs, generator=gen) * 2 - 1
    w = torch.rand(wsz, generator=gen) * 2 - 1
    xp = F.pad(x.double(), [pre[1], post[1], pre[0], post[0]])
    ref = F.conv2d(xp, w.double(), stride=st, dilation=dl)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
        w = w.contiguous(memory_format=torch.channels_last)
    config, tap = config.removesuffix("+tap"), config.endswith("+tap")
    if tap:
        w = fp.tap_major(w)
        assert w.stride()[1] == 1 and torch.equal(w, w.contiguous())
    y = torch.full(ref.shape, float("nan"), dtype=torch.float32)
    if cl:
        y = y.contiguous(memory_format=torch.channels_last)
    # the tuner's runner checks what `run` returns
    assert fp.run(x, w, y, stride=st, pad_pre=pre, dilation=dl, config=config) is y
    assert torch.isfinite(y).all()
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-6, err


def test_a_1d_convolution_runs_as_2d_with_height_one() -> None:
    _triton()
    gen = torch.Generator().manual_seed(4)
    x = torch.rand((2, 6, 30), generator=gen) - 0.5
    w = torch.rand((8, 6, 5), generator=gen) - 0.5
    ref = F.conv1d(x.double(), w.double(), stride=2, padding=2)
    for config, ww in (("k16p16c16w4s1", w), ("k16p16c16w4s2", fp.tap_major(w)),
                       ("k16p16j16w4s1", w), ("k16p16j16w4s1", fp.tap_major(w))):
        y = torch.empty(ref.shape)
        fp.run(x, ww, y, stride=(2,), pad_pre=(2,), dilation=(1,), config=config)
        assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-6, config
    # 1x1 in 1D: every flat path (x, y and w)
    w1 = torch.rand((8, 6, 1), generator=gen) - 0.5
    ref1 = F.conv1d(x.double(), w1.double())
    for config in ("k16p16c16w4s1", "k16p32j16w4s2"):
        y = torch.empty(ref1.shape)
        fp.run(x, w1, y, stride=(1,), pad_pre=(0,), dilation=(1,), config=config)
        assert ((y.double() - ref1).norm() / ref1.norm()).item() < 1e-6, config


def test_bad_arguments_are_refused_with_a_message() -> None:
    _triton()
    x, w = torch.zeros(1, 4, 5, 5), torch.zeros(3, 2, 3, 3)
    with pytest.raises(ValueError, match="do not fit"):
        fp.run(x, w, torch.zeros(1, 3, 3, 3), stride=(1, 1), pad_pre=(0, 0), dilation=(1, 1),
               config="k16p16j16w4s1")
    with pytest.raises(ValueError, match="one rank"):
        fp.run(torch.zeros(1, 4, 2, 2, 2), w, w, stride=(1, 1), pad_pre=(0, 0),
               dilation=(1, 1), config="k16p16j16w4s1")


def test_runtime_executor_runs_forward_calls_only(monkeypatch) -> None:
    _triton()
    from convdoctor.engines.base import ConvArgs

    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 6, 9, 10, generator=g)
    w = torch.randn(5, 6, 3, 2, generator=g)
    b = torch.randn(5, generator=g)
    a = ConvArgs((2, 1), (1, 0), (1, 2), False, (0, 0), 1)
    p = ConvProblem.parse("fprop n=2 c=6 h=9 w=10 k=5 r=3 s=2 stride=2,1 pad=1,0 dil=1,2 "
                          "math=fp32")
    ex = fp.ENGINE.executor("triton:fp_k16p16j16w4s1", p)
    ref = F.conv2d(x.double(), w.double(), b.double(), stride=(2, 1), padding=(1, 0),
                   dilation=(1, 2))
    y = ex.fprop(x, w, b, a)
    assert y.shape == ref.shape
    torch.testing.assert_close(y.double(), ref, atol=1e-4, rtol=1e-4)
    cl = torch.channels_last
    nob = ref - b.double().view(1, -1, 1, 1)
    for xx, ww in ((x.contiguous(memory_format=cl), w), (x, w.contiguous(memory_format=cl))):
        # channels-last out where x or w is, as PyTorch's CUDA convolution
        ycl = ex.fprop(xx, ww, None, a)
        assert ycl.is_contiguous(memory_format=cl) and not ycl.is_contiguous()
        torch.testing.assert_close(ycl.double(), nob, atol=1e-4, rtol=1e-4)
    # a strided bias is reshaped, one of another dtype is refused (the route falls back)
    b2 = torch.stack([b, b], 1)[:, 0]
    assert not b2.is_contiguous()
    torch.testing.assert_close(ex.fprop(x, w, b2, a).double(), ref, atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="bias"):
        ex.fprop(x, w, b.double(), a)
    # TF32 as PyTorch's flag for convolutions says at the time of the call
    seen: list[bool] = []
    real_run = fp.run

    def spy(*args, **kw):
        seen.append(kw["tf32"])
        return real_run(*args, **kw)

    monkeypatch.setattr(fp, "run", spy)
    for flag in (True, False):
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", flag)
        ex.fprop(x, w, None, a)
    assert seen == [True, False]
    with pytest.raises(RuntimeError, match="forward calls only"):
        ex.backward(y, x, w, None, a, (True, True, False))
    with pytest.raises(RuntimeError, match="several dtypes"):
        ex.fprop(x.double(), w, None, a)
    with pytest.raises(RuntimeError, match="no output"):
        ex.fprop(x[:, :, :1, :1], w, None, a)


def test_executor_refuses_a_problem_the_kernel_does_not_run() -> None:
    _triton()

    with pytest.raises(ValueError, match="forward convolutions only"):
        fp.ENGINE.executor("triton:fp_k64p32j32w4s4",
                     ConvProblem.parse("dgrad n=2 c=4 h=9 w=9 k=8 r=3 s=3 pad=1"))
    with pytest.raises(ValueError, match="ungrouped"):
        fp.ENGINE.executor("triton:fp_k64p32j32w4s4",
                     ConvProblem.parse("fprop n=2 c=4 h=9 w=9 k=4 r=3 s=3 pad=1 groups=2"))
    with pytest.raises(ValueError):
        fp.ENGINE.executor("triton:fp_k48p32j32w4s4", ConvProblem.parse("fprop n=2 c=4 h=9 w=9 k=4"))
    with pytest.raises(ValueError, match="not a forward implicit-GEMM kernel key"):
        fp.ENGINE.executor("triton:wg_m32n64l64w4s3", ConvProblem.parse("fprop n=2 c=4 h=9 w=9 k=4"))


HALF_TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}   # one rounding: fp16 2^-11, bf16 2^-8


def _half_case(case: tuple[Any, ...], dtype: torch.dtype, device: str, config: str) -> float:
    """fp16/bf16 x and w, fp32 sums, the output rounded once; the relative error against the
    float64 reference on the rounded inputs."""
    xs, wsz, st, pre, post, dl, _ = case
    gen = torch.Generator().manual_seed(5)
    x = (torch.rand(xs, generator=gen) * 2 - 1).to(dtype).to(device)
    w = (torch.rand(wsz, generator=gen) * 2 - 1).to(dtype).to(device)
    xp = F.pad(x.double(), [pre[1], post[1], pre[0], post[0]])
    ref = F.conv2d(xp, w.double(), stride=st, dilation=dl)
    y = torch.full(ref.shape, float("nan"), dtype=dtype, device=device)
    fp.run(x, w, y, stride=st, pad_pre=pre, dilation=dl, config=config)
    assert y.dtype == dtype and torch.isfinite(y.float()).all()
    return ((y.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[5]])
def test_float16_inputs_accumulate_in_float32(case) -> None:
    # bfloat16 is checked on the GPU only: Triton's CPU interpreter computes tl.dot of bfloat16
    # operands wrongly (values ~1e10 off for a 16x16 product of unit values)
    _triton()
    err = _half_case(case, torch.float16, "cpu", fp.OFFERED[2])
    assert err < HALF_TOL[torch.float16], err


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_gpu_half_precision_matches_a_float64_reference(case, dtype) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA torch (run on the device machine)")
    _triton()
    for config in fp.OFFERED:
        err = _half_case(case, dtype, "cuda", config)
        assert err < HALF_TOL[dtype], (config, err)
