"""The depthwise wgrad Triton kernels: configurations, eligibility, the offer, the split, and
(where Triton is installed) the lane-per-column and the column-blocked kernels under Triton's CPU
interpreter against a float64 reference (fp32/fp16/bf16, NCHW and channels-last, strides 1 and 2,
kernels 3/5/7 and uneven ones, odd sizes, 1D), one chunk or a reduction split over several chunks
and column blocks, and through the runtime executor. The GPU runs are in tests/engines and tests/runtime (`gpu`)."""

from __future__ import annotations

import os
import types

import pytest
import torch
import torch.nn.functional as F

from convdoctor.engines import registry
from convdoctor.kernels import dwgrad as dg
from convdoctor.problem import ConvProblem


# ------------------------------------------------------------------ names and the offer
def test_config_names_parse_and_bad_ones_are_refused() -> None:
    assert dg.parse_config("c2p64h8w4") == dg.Config(2, 64, 8, 4)
    assert dg.parse_config("c2p64h8w4n128v8") == dg.Config(2, 64, 8, 4, regs=128, waves=8)
    assert dg.parse_config("c32p2h8w2v12") == dg.Config(32, 2, 8, 2, waves=12)
    # the column-blocked kernel: x = columns per lane, p/x column groups (a power of two)
    assert dg.parse_config("c32p16h4w4x4v3") == dg.Config(32, 16, 4, 4, waves=3, cols=4)
    assert dg.parse_config("c16p28h2w4x7").cols == 7
    # x<V>s: the rows streamed, row tiles up to MAX_STREAM_ROWS
    assert dg.parse_config("c32p16h56w4x4sv3") == dg.Config(32, 16, 56, 4, waves=3, cols=4,
                                                            stream=True)
    for name in ("c2p64h8w4", "c2p64h16w4n128v8", "c1p64h8w2v12", "c16p8h8w4", "c1p1h1w1n64",
                 "c32p16h4w4x4v3", "c16p28h2w4x7n128", "c8p8h8w2x1", "c32p16h112w4x4sn128"):
        assert dg.parse_config(name).name == name
    for bad in ("", "c2p64h8", "c3p64h8w4", "c2p48h8w4", "c2p64h8w3", "c64p128h8w4",
                "c2p64h0w4", "c2p64h33w4", "c2p64h8w32", "c2p64h8w4n100", "c2p64h8w4n56",
                "c2p64h8w4n256", "c2p64h8w4v0", "c2p64h8w4v65", "c2p64h8w4v8n128",
                "m32n64l64w4s3", "c2p64h8w4x", "c32p12h8w4x4", "c32p16h8w4x3",
                "c32p18h8w4x9", "c32p16h8w4x0", "c64p256h8w4x2", "c32p16h8w4v3x4",
                "c32p16h8w4s", "c32p16h56w4x4", "c32p16h8w4x4ss"):
        with pytest.raises(ValueError):
            dg.parse_config(bad)
    assert dg.config_of("triton:dg_c2p64h8w4") == "c2p64h8w4"
    assert dg.config_of("triton:dw_c1p256w4") is None
    assert dg.key_of("c2p64h8w4") == "triton:dg_c2p64h8w4"


def test_the_registry_gives_dg_keys_to_this_engine_only() -> None:
    assert registry.engine_of("triton:dg_c2p64h8w4") is dg.ENGINE
    assert [e.name for e in registry.ENGINES if e.owns("triton:dg_c2p64h8w4")] == ["triton-dg"]
    assert registry.engine_of("triton:dw_c1p256w4") is not dg.ENGINE
    assert registry.built_by_name("triton:dg_c2p64h8w4")
    assert not dg.ENGINE.owns("triton:wg_m32n64l64w4s3")


def test_eligibility() -> None:
    ok = dict(ndim=2, c=32, k=32, groups=32, kernel=(3, 3), stride=(1, 1), dilation=(1, 1))
    assert dg.eligible("wgrad", **ok) is None
    assert dg.eligible("wgrad", **{**ok, "kernel": (7, 1), "stride": (2, 1)}) is None
    assert dg.eligible("wgrad", **{**ok, "ndim": 1, "kernel": (5,), "stride": (2,),
                                   "dilation": (1,)}, dtype="bfloat16") is None
    for change, why in (({"ndim": 3, "kernel": (3, 3, 3)}, "3D"),
                        ({"k": 64}, "depthwise"),              # channel multiplier 2
                        ({"groups": 8}, "depthwise"),          # grouped, not depthwise
                        ({"kernel": (9, 9)}, "up to 7"),
                        ({"kernel": (3, 8)}, "up to 7"),
                        ({"stride": (3, 3)}, "strides 1 and 2"),
                        ({"dilation": (2, 2)}, "undilated")):
        assert why in (dg.eligible("wgrad", **{**ok, **change}) or ""), change
    assert "weight gradients only" in (dg.eligible("fprop", **ok) or "")
    assert "weight gradients only" in (dg.eligible("dgrad", **ok) or "")
    assert "float64" in (dg.eligible("wgrad", **ok, dtype="float64") or "")


def test_offered_configurations_follow_the_layout_and_the_plane() -> None:
    def offered(text: str) -> tuple[str, ...]:
        return dg.offered(ConvProblem.parse(text))

    # ConvNeXt 7x7 at 56x56: NCHW lanes along the row (64 lanes, 2 channels), rows 8 and 14,
    # a 128-register variant and 2-warp programs, and the column-blocked kernel with 4 columns
    # per lane (16 column groups x 8 channels), 4 rows per tile (4 x 4 x 49 products unrolled)
    nchw = offered("wgrad n=64 c=96 h=56 w=56 k=96 r=7 s=7 pad=3 groups=96")
    assert nchw == ("c2p64h8w4", "c2p64h16w4", "c2p64h8w4n128v8", "c1p64h8w2v12",
                    "c8p64h4w4x4v3")
    # channels-last: the column-blocked kernel, 32 or 16 channels across the lanes
    cl = offered("wgrad n=64 c=96 h=56 w=56 k=96 r=7 s=7 pad=3 groups=96 layout=nhwc")
    assert cl == ("c32p16h4w4x4v3", "c32p8h8w4x2v3", "c16p8h8w2x2")
    # a 3x3 kernel unrolls 8 rows per tile
    assert offered("wgrad n=64 c=32 h=112 w=112 k=32 r=3 s=3 pad=1 groups=32 "
                   "layout=nhwc")[0] == "c32p16h8w4x4v3"
    # a 7x7 plane: no taller tile, no column-blocked kernel in NCHW; a 3x3 kernel: more programs
    # per SM instead of a register cap
    small = offered("wgrad n=64 c=960 h=7 w=7 k=960 r=3 s=3 pad=1 groups=960")
    assert small == ("c16p8h8w4", "c16p8h8w4v16", "c8p8h8w2v12")
    for cfgs in (nchw, cl, small):
        for c in cfgs:
            dg.parse_config(c)
    # stride 2 and 1D are offered; a 1D row longer than 128 gets column blocks of 128
    assert offered("wgrad n=8 c=144 h=56 w=56 k=144 r=5 s=5 stride=2 pad_pre=1 pad_post=2 "
                   "groups=144")[0] == "c4p32h8w4"
    assert offered("wgrad n=8 c=64 w=400 k=64 s=5 pad=2 groups=64")[0] == "c1p128h8w4"
    for text in ("fprop n=8 c=96 h=56 w=56 k=96 r=7 s=7 pad=3 groups=96",
                 "dgrad n=8 c=96 h=56 w=56 k=96 r=7 s=7 pad=3 groups=96",
                 "wgrad n=8 c=96 h=56 w=56 k=96 r=3 s=3 pad=1",             # dense
                 "wgrad n=8 c=96 h=56 w=56 k=96 r=9 s=9 pad=4 groups=96",   # kernel 9
                 "wgrad n=8 c=96 h=56 w=56 k=96 r=3 s=3 stride=3 groups=96",
                 "wgrad n=8 c=96 h=56 w=56 k=96 r=3 s=3 pad=2 dil=2 groups=96",
                 "wgrad n=8 c=32 d=8 h=8 w=8 k=32 t=3 r=3 s=3 pad=1 groups=32"):
        assert offered(text) == (), text


def test_the_engine_offers_candidates_with_their_workspace(monkeypatch) -> None:
    monkeypatch.setattr(dg, "unavailable", lambda: None)
    backend = types.SimpleNamespace(settings=types.SimpleNamespace(triton=True),
                                    environment=lambda: {"sm_count": "132"})
    p = ConvProblem.parse("wgrad n=64 c=96 h=56 w=56 k=96 r=7 s=7 pad=3 groups=96")
    cands = dg.ENGINE.offers(p, backend)
    assert [c.key for c in cands] == [dg.key_of(c) for c in dg.offered(p)]
    for c in cands:
        pl = dg.plan(64, 96, 56, 56, dg.parse_config(dg.config_of(c.key) or ""), 132)
        assert c.deterministic and c.backend == "cuda" and pl.partials > 1
        assert c.workspace_bytes == pl.partials * 49 * 96 * 4
    off = types.SimpleNamespace(settings=types.SimpleNamespace(triton=False),
                                environment=lambda: {"sm_count": "132"})
    assert dg.ENGINE.offers(p, off) == []
    assert dg.ENGINE.offers(p.with_direction("fprop"), backend) == []


def test_rows_and_the_split() -> None:
    assert [dg.rows_for(oh, 8) for oh in (56, 28, 14, 7, 11, 1)] == [8, 7, 7, 7, 1, 1]
    assert [dg.rows_for(oh, 16) for oh in (56, 28, 112, 11)] == [14, 14, 16, 11]
    cfg = dg.parse_config("c2p64h8w4")
    p = dg.plan(64, 96, 56, 56, cfg, 132)
    # 7 tiles of 8 rows per sample; 48 channel blocks x 1 column block; 6 programs per SM wanted
    assert (p.rows, p.tiles, p.cblocks, p.wblocks) == (8, 448, 48, 1)
    assert p.split == 17 and p.chunk * p.split >= p.tiles > p.chunk * (p.split - 1)
    assert p.chunk >= dg.MIN_TILES
    # few tiles: one chunk (dw written directly when there is one column block, no workspace)
    one = dg.plan(1, 4, 7, 7, dg.parse_config("c16p8h8w4"), 132)
    assert one.partials == 1 and dg.workspace_bytes(1, 4, (7, 7), (7, 7), "c16p8h8w4", 132) == 0
    # column blocks are partial sums of their own
    cols = dg.plan(1, 4, 7, 40, dg.parse_config("c1p16h8w4"), 132)
    assert cols.wblocks == 3 and cols.partials == 3
    assert dg.workspace_bytes(1, 4, (40,), (40,), "c1p16h8w4", 132) == 3 * 40 * 4 * 4


# ------------------------------------------------------------------ the kernel (interpreter)
CASES = [  # x shape, kernel, stride, pad_pre, pad_post, config
    ((2, 5, 11, 13), (3, 3), (1, 1), (1, 1), (1, 1), "c2p16h16w4"),    # odd, prime rows
    ((2, 3, 10, 9), (5, 5), (2, 2), (2, 2), (2, 1), "c4p8h8w4"),       # stride 2, asymmetric
    ((2, 4, 9, 10), (7, 7), (1, 1), (3, 3), (3, 3), "c2p16h16w4"),     # whole-plane tiles
    ((2, 3, 12, 7), (7, 3), (2, 1), (3, 0), (2, 2), "c4p8h4w4n128"),   # row tiles of 3 of 6
    ((2, 4, 17), (5,), (2,), (2,), (2,), "c1p8h8w2"),                  # 1D, column blocks
    # the column-blocked kernel: V columns per lane (x<V>), rows that end inside a lane's
    # columns (13 of 4, 9 of 2), whole rows of lanes (4 of 2, 10 of 2, 7 of 7)
    ((2, 5, 11, 13), (3, 3), (1, 1), (1, 1), (1, 1), "c2p16h16w4x4"),
    ((2, 3, 10, 9), (5, 5), (2, 2), (2, 2), (2, 1), "c4p8h8w4x2v3"),
    ((2, 4, 9, 10), (7, 7), (1, 1), (3, 3), (3, 3), "c2p16h16w4x2"),
    ((2, 3, 12, 7), (7, 3), (2, 1), (3, 0), (2, 2), "c4p7h4w4x7n128"),
    ((2, 4, 17), (5,), (2,), (2,), (2,), "c1p4h8w2x2"),
    # its rows streamed through a run-time loop (x<V>s): a whole plane of 7 rows (ragged row
    # end), and stride 2 with row tiles of 2
    ((2, 3, 7, 9), (3, 3), (1, 1), (1, 1), (1, 1), "c2p16h7w4x4s"),
    ((2, 3, 10, 9), (5, 5), (2, 2), (2, 2), (2, 1), "c4p8h2w4x2s"),
]


@pytest.fixture
def interpreter():
    """Triton's CPU interpreter (switched on by this folder's conftest where there is no GPU)."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("a GPU is here: the compiled kernel is tested by the `gpu` tests instead")
    dg.unavailable.cache_clear()
    yield


def _data(shape, kernel, stride, pp, po, dtype=torch.float32):
    """x, dy (rounded to `dtype`) and the float64 weight gradient of F.conv of those values."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype)
    nd = len(kernel)
    conv = {1: F.conv1d, 2: F.conv2d}[nd]
    xp = F.pad(x.double(), [v for i in reversed(range(nd)) for v in (pp[i], po[i])])
    w = torch.zeros(shape[1], 1, *kernel, dtype=torch.float64, requires_grad=True)
    y = conv(xp, w, stride=stride, groups=shape[1])
    dy = torch.randn(y.shape, generator=g).to(dtype)
    (ref,) = torch.autograd.grad(y, w, dy.double())
    return x, dy, ref


def _channels_last(t):
    return t.movedim(1, -1).contiguous().movedim(-1, 1)


# the lane-per-column cases in both layouts; the later ones (the other kernels) in one layout each,
# alternating (each is one more interpreter run of a few seconds)
LAYOUT_CASES = [(case, layout) for case in range(len(CASES))
                for layout in (("nchw", "cl") if case < 5 else ("cl" if case % 2 else "nchw",))]


@pytest.mark.parametrize(("case", "layout"), LAYOUT_CASES)
def test_kernel_matches_float64(interpreter, case: int, layout: str, monkeypatch) -> None:
    shape, kernel, st, pp, po, cfg = CASES[case]
    x, dy, ref = _data(shape, kernel, st, pp, po)
    if layout == "cl":
        x, dy = _channels_last(x), _channels_last(dy)
        assert not x.is_contiguous() and x.stride(1) == 1
    c = dg.parse_config(cfg)
    # one chunk, then a reduction split over several chunks (one tile each allowed)
    for min_tiles, sms in ((10**9, 1), (1, 64)):
        monkeypatch.setattr(dg, "MIN_TILES", min_tiles)
        p = dg.plan(dy.shape[0], dy.shape[1], dy.shape[2] if dy.dim() == 4 else 1,
                    dy.shape[-1], c, sms)
        assert (p.split > 1) == (sms == 64), p
        out = torch.full(ref.shape, float("nan"))
        assert dg.run(x, dy, out, stride=st, pad_pre=pp, dilation=(1,) * len(kernel),
                      config=cfg, sms=sms) is out
        # every tap written (the NaN poison is gone) and right
        torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4,
                                   msg=lambda m, n=p.partials: f"{cfg} partials={n}: {m}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_accumulate_in_fp32(interpreter, dtype, monkeypatch) -> None:
    """fp16/bf16 x and dy: fp32 products and sums, dw rounded once to the dtype (channels-last
    and a split reduction for one, NCHW written directly for the other)."""
    monkeypatch.setattr(dg, "MIN_TILES", 1)
    for case in ((1, 6) if dtype == torch.float16 else (2, 7)):   # both kernels
        shape, kernel, st, pp, po, cfg = CASES[case]
        x, dy, ref = _data(shape, kernel, st, pp, po, dtype)
        if dtype == torch.float16:
            x, dy = _channels_last(x), _channels_last(dy)
        out = dg.wgrad(x, dy, kernel, stride=st, pad_pre=pp, dilation=(1, 1), config=cfg)
        assert out.dtype == dtype and out.shape == ref.shape
        # one rounding of the result: fp16 2^-11, bf16 2^-8 relative
        tol = 2e-3 if dtype == torch.float16 else 1e-2
        torch.testing.assert_close(out.double(), ref, atol=tol * ref.abs().max().item(),
                                   rtol=tol, msg=lambda m, c=cfg: f"{c}: {m}")


def test_64_bit_offsets_and_a_strided_dw(interpreter, monkeypatch) -> None:
    """The WIDE variant computes the same; dw is written through its strides (a transposed view),
    directly and from the partial sums."""
    shape, kernel, st, pp, po, cfg = CASES[3]
    x, dy, ref = _data(shape, kernel, st, pp, po)
    for min_tiles, sms in ((10**9, 1), (1, 64)):
        monkeypatch.setattr(dg, "MIN_TILES", min_tiles)
        out = torch.full((kernel[1], kernel[0], 1, shape[1]), float("nan")).permute(3, 2, 1, 0)
        dg.run(x, dy, out, stride=st, pad_pre=pp, dilation=(1, 1), config=cfg, sms=sms,
               wide=True)
        torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)


# the column-blocked kernel's ragged lanes compute 0 * inf for columns past the row, then drop it
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply:RuntimeWarning")
@pytest.mark.parametrize("case", [1, 3, 4, 9, 10])
def test_non_finite_inputs_reach_no_tap_outside_their_own(interpreter, case: int,
                                                         monkeypatch) -> None:
    """An Inf in x makes exactly PyTorch's float64 non-finite taps non-finite (no product of a
    lane past the plane, a row past it or a tap past KW reaches a stored tap). A NaN in dy makes
    a subset of PyTorch's non-finite taps non-finite (rows of padding in whole-plane tiles are
    skipped, not multiplied), never none; the finite taps keep their values."""
    monkeypatch.setattr(dg, "MIN_TILES", 1)
    shape, kernel, st, pp, po, cfg = CASES[case]
    nd = len(kernel)
    conv = {1: F.conv1d, 2: F.conv2d}[nd]
    for where in ("x", "dy"):
        x, dy, _ = _data(shape, kernel, st, pp, po)
        if where == "x":
            x[(0, 0) + tuple(n - 1 for n in shape[2:])] = float("inf")   # the last position
        else:
            dy[(1, 1) + (0,) * (dy.dim() - 2)] = float("nan")
        xp = F.pad(x.double(), [v for i in reversed(range(nd)) for v in (pp[i], po[i])])
        w = torch.zeros(shape[1], 1, *kernel, dtype=torch.float64, requires_grad=True)
        (ref,) = torch.autograd.grad(conv(xp, w, stride=st, groups=shape[1]), w, dy.double())
        out = dg.run(x, dy, torch.full(ref.shape, 0.5), stride=st, pad_pre=pp,
                     dilation=(1,) * nd, config=cfg, sms=64)
        fin, got = torch.isfinite(ref), torch.isfinite(out)
        assert 0 < int(fin.sum()) < fin.numel()
        if where == "x":
            assert torch.equal(got, fin)
        else:
            assert bool((got | ~fin).all()) and not bool(got.all())
        torch.testing.assert_close(out.double()[got & fin], ref[got & fin], atol=1e-4,
                                   rtol=1e-4)


def test_bad_tensors_are_refused(interpreter) -> None:
    x = torch.randn(2, 3, 8, 8)
    dy = torch.randn(2, 3, 6, 6)
    ok = torch.empty(3, 1, 3, 3)
    geo = {"stride": (1, 1), "pad_pre": (0, 0), "dilation": (1, 1), "config": "c2p8h8w4"}
    for args, what in (((x, dy, torch.empty(4, 1, 3, 3)), "disagree"),
                       ((x, dy[:, :2], ok), "disagree"),
                       ((x, dy, torch.empty(3, 2, 3, 3)), "disagree"),
                       ((x, dy[0], ok), "3-dim or three 4-dim"),
                       ((x, dy.half(), ok), "one dtype"),
                       ((x.double(), dy.double(), ok.double()), "float64"),
                       ((x[:0], dy[:0], ok), "empty"),
                       ((x, dy, torch.empty(3, 1, 9, 9)), "at most 7")):
        with pytest.raises(ValueError, match=what):
            dg.run(*args, **geo)
    for change, what in (({"stride": (3, 1)}, "strides 1 or 2"),
                         ({"dilation": (2, 2)}, "dilation 1"),
                         ({"pad_pre": (0, -1)}, "non-negative"),
                         ({"stride": (1,)}, "need 2 values"),
                         ({"config": "c3p8h8w4"}, "powers of two")):
        with pytest.raises(ValueError, match=what):
            dg.run(x, dy, ok, **{**geo, **change})
    with pytest.raises(ValueError, match="weight gradients only"):
        dg.compute("dgrad", x, dy, ok, stride=(1, 1), pad_pre=(0, 0), dilation=(1, 1),
                   config="c2p8h8w4")


def test_runtime_executor_computes_dw_and_the_bias_gradient_only(interpreter) -> None:
    from convdoctor.engines.base import ConvArgs

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 9, 9, generator=g)
    w = torch.randn(4, 1, 3, 3, generator=g)
    a = ConvArgs((2, 2), (1, 1), (1, 1), False, (0, 0), 4)
    p = ConvProblem.parse("wgrad n=2 c=4 h=9 w=9 k=4 r=3 s=3 stride=2 pad=1 groups=4")
    ex = dg.ENGINE.executor("triton:dg_c4p8h8w4", p)
    wr = w.clone().requires_grad_(True)
    b = torch.zeros(4, requires_grad=True)
    y = F.conv2d(x, wr, b, stride=2, padding=1, groups=4)
    dy = torch.randn(y.shape, generator=g)
    y.backward(dy)
    gx, gw, gb = ex.backward(dy, x, w, [4], a, (False, True, True))
    assert gx is None and gw is not None and gb is not None
    torch.testing.assert_close(gw, wr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gb, b.grad)
    with pytest.raises(RuntimeError, match="dw only"):
        ex.backward(dy, x, w, None, a, (True, True, False))
    with pytest.raises(RuntimeError, match="not fprop"):
        ex.fprop(x, w, None, a)
    with pytest.raises(RuntimeError, match="several dtypes"):
        ex.backward(dy, x.double(), w, None, a, (False, True, False))


def test_executor_refuses_a_problem_or_key_the_kernel_does_not_run() -> None:
    text = "n=2 c=4 h=9 w=9 k=4 r=3 s=3 pad=1 groups=4"
    with pytest.raises(ValueError, match="weight gradients only"):
        dg.ENGINE.executor("triton:dg_c4p8h8w4", ConvProblem.parse("dgrad " + text))
    with pytest.raises(ValueError, match="depthwise"):
        dg.ENGINE.executor("triton:dg_c4p8h8w4",
                           ConvProblem.parse("wgrad n=2 c=4 h=9 w=9 k=4 r=3 s=3 pad=1"))
    with pytest.raises(ValueError, match="undilated"):
        dg.ENGINE.executor("triton:dg_c4p8h8w4", ConvProblem.parse(f"wgrad {text} dil=2"))
    with pytest.raises(ValueError, match="powers of two"):
        dg.ENGINE.executor("triton:dg_c3p8h8w4", ConvProblem.parse("wgrad " + text))
    with pytest.raises(ValueError, match="not a depthwise wgrad kernel key"):
        dg.ENGINE.executor("triton:dw_c1p256w4", ConvProblem.parse("wgrad " + text))


# ------------------------------------------------------------------ the compiled kernel (GPU)
GPU_CASES = [
    "wgrad n=8 c=96 h=56 w=56 k=96 r=7 s=7 pad=3 groups=96 dtype=float32 math=strict",
    "wgrad n=8 c=192 h=28 w=28 k=192 r=7 s=7 pad=3 groups=192 dtype=bfloat16 layout=nhwc",
    "wgrad n=8 c=768 h=7 w=7 k=768 r=7 s=7 pad=3 groups=768 dtype=float32 layout=nhwc",
    "wgrad n=8 c=144 h=56 w=56 k=144 r=5 s=5 stride=2 pad_pre=1 pad_post=2 groups=144 "
    "dtype=float32 math=strict",
    "wgrad n=4 c=96 h=113 w=111 k=96 r=3 s=3 stride=2 pad=1 groups=96 dtype=float16 layout=nhwc",
    "wgrad n=4 c=64 w=300 k=64 s=5 pad=2 groups=64 dtype=float32 math=strict",
]


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("cudnn")
    pytest.importorskip("triton")
    from convdoctor.settings import Settings
    from convdoctor.tune.cuda_backend import CudaBackend

    return CudaBackend(settings=Settings())


@pytest.mark.gpu
@pytest.mark.parametrize("text", GPU_CASES)
def test_gpu_candidates_are_offered_correct_deterministic_and_timed(backend, text: str) -> None:
    """Every offered configuration compiles, passes the tuner's float64 check with a poisoned
    output, gives the same bits twice, and times."""
    p = ConvProblem.parse(text)
    cands = dg.ENGINE.offers(p, backend)
    assert [c.key for c in cands] == [dg.key_of(c) for c in dg.offered(p)] and cands
    for c in cands:
        runner = backend.prepare(p, c)
        runner.warmup()
        ok = runner.check()
        assert ok.ok, (c.key, ok.detail)
        first = runner.out.clone()
        runner.run()
        assert torch.equal(runner.out, first), c.key
        ts = runner.time(3, slot=1)
        assert len(ts) == 3 and all(t > 0 for t in ts)
        runner.close()


@pytest.mark.gpu
@pytest.mark.parametrize("channels_last", [False, True])
def test_gpu_executor_computes_pytorchs_weight_gradient(channels_last: bool) -> None:
    pytest.importorskip("triton")
    from convdoctor.engines.base import ConvArgs

    fmt = torch.channels_last if channels_last else torch.contiguous_format
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(16, 96, 56, 56, device="cuda", generator=g).contiguous(memory_format=fmt)
    w = torch.randn(96, 1, 7, 7, device="cuda", generator=g).contiguous(memory_format=fmt)
    layout = "nhwc" if channels_last else "nchw"
    p = ConvProblem.parse(f"wgrad n=16 c=96 h=56 w=56 k=96 r=7 s=7 pad=3 groups=96 "
                          f"layout={layout}")
    ex = dg.ENGINE.executor(dg.key_of(dg.offered(p)[0]), p)
    a = ConvArgs((1, 1), (3, 3), (1, 1), False, (0, 0), 96)
    ref_w = w.double().requires_grad_(True)
    y = F.conv2d(x.double(), ref_w, padding=3, groups=96)
    dy = torch.randn(y.shape, device="cuda", generator=g)
    y.backward(dy.double())
    _, gw, gb = ex.backward(dy.contiguous(memory_format=fmt), x, w, [96], a, (False, True, True))
    torch.testing.assert_close(gw.double(), ref_w.grad, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(gb.double(), dy.double().sum(dim=(0, 2, 3)), atol=1e-3, rtol=1e-4)
