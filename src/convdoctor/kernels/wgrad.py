"""Weight gradient (wgrad) of a dense convolution as a split-reduction implicit GEMM in Triton.

Why: on the H100, cuDNN's wgrad engines run layers with few channels and many positions far from
both rooflines (H100, fp32 NCHW, TF32 allowed: Inception's Conv2d_2a_3x3, 32 -> 32 channels
at 149x149, 542 us for 180 MB and 0.4 GFLOP; DeepSpeech2's conv2 1.18 ms). Their weight gradient
is a small matrix (K x C*T*R*S) summed over a huge reduction (N x output positions), so the work
must be split along the reduction to fill the GPU.

    dw[k, c, t, r, s] = sum over (n, od, oh, ow) of
                        dy[n, k, od, oh, ow] * x[n, c, od*SD - PD + t*DD, oh*SH - PH + r*DH, ...]

A program owns one kernel tap (t, r, s) - or, in the "r" configurations, one tap row (t, r), its
columns then being (c, s) pairs - and computes a [BLOCK_M output channels x BLOCK_N columns] tile
of dw over one contiguous chunk of the reduction, BLOCK_L positions at a time: it loads the dy tile
[BLOCK_M x BLOCK_L] and gathers the input tile (implicit im2col: an address is a column part plus a
position part; padding is a masked load whose test depends on the position, in "r" also on s) and
accumulates their product with `tl.dot` in fp32 (TF32 inputs only where the problem's math mode
allows it; fp16/bf16 inputs as they are). The chunks' partial sums land in an fp32 buffer
[SPLIT, K, C*T*R*S] that one `torch.sum` reduces in a fixed order (deterministic, no atomics); with
one chunk the program writes dw directly. Tensors are addressed by their strides (NCHW or
channels-last; the input tile's lanes run along positions or along columns, whichever is
contiguous). 1D and 2D problems are 3D ones with unit leading spatial dimensions.

Configurations (`configs_for`): tile shape, warps, pipeline stages, tap rows, programs per SM,
"m<BM>n<BN>l<BL>w<W>s<S>[r][v<V>]". Candidate keys are "triton:wg_<config>" (`PREFIX`). The split
comes from the device's SM count (`split_for`): V (default `WAVES`) programs per SM, at least
`MIN_STEPS` BLOCK_L steps each.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.triton import TritonEngine
from .depthwise import unavailable as _dw_unavailable

PREFIX = "triton:wg_"
_CFG_RE = re.compile(r"^m(\d+)n(\d+)l(\d+)w(\d+)s(\d+)(r?)(?:v(\d+))?$")
# programs per SM the split aims for, and the fewest BLOCK_L steps a program takes
WAVES = 4
MIN_STEPS = 4
MAX_GRID_Y = 65535
# Offered for weights of at most this many elements (K x C x kernel): the kernel exists for
# small weight gradients over long reductions; larger ones are cuDNN's ground.
MAX_WEIGHT = 1 << 18
# Configurations offered (`configs_for` picks by K): the fastest of a sweep of 13 on 16 fp32
# NCHW suite layers (H100, lab/wg_probe.py): tap-row programs ("r") won 11 of
# them; 2 programs per SM ("v2") beat 4 on 5 of 16 (ResNet-50 layer1.0.conv2: 111 vs 135 us).
CONFIGS_SMALL_K = ("m32n64l64w4s3r", "m32n32l128w4s3r", "m16n16l128w4s3r", "m32n64l64w4s3rv2",
                   "m32n64l64w4s3")
CONFIGS_LARGE_K = ("m64n128l32w8s3r", "m64n64l64w4s3r", "m64n32l128w4s3", "m128n64l32w8s3",
                   "m64n128l32w8s3rv2", "m64n64l64w4s3rv2")

@dataclass(frozen=True)
class Config:
    block_m: int
    block_n: int
    block_l: int
    warps: int
    stages: int
    # a program per tap row (t, r) whose columns are (c, s) pairs, instead of one per tap
    row: bool = False
    # programs per SM the reduction's split aims for
    waves: int = WAVES

    @property
    def name(self) -> str:
        return (f"m{self.block_m}n{self.block_n}l{self.block_l}w{self.warps}s{self.stages}"
                + ("r" if self.row else "") + (f"v{self.waves}" if self.waves != WAVES else ""))


@functools.lru_cache(maxsize=256)
def parse_config(name: str) -> Config:
    """'m32n64l64w4s3' -> Config(32, 64, 64, 4, 3); ValueError for anything else."""
    m = _CFG_RE.match(name)
    if not m:
        raise ValueError(f"not a wgrad kernel configuration: {name!r} (expected like m32n64l64w4s3)")
    bm, bn, bl, w, s = (int(g) for g in m.groups()[:5])
    check_dot_tiles(name, (bm, bn, bl), w, s)
    v = int(m.group(7)) if m.group(7) else WAVES
    if not 1 <= v <= 64:
        raise ValueError(f"{name!r}: 1-64 programs per SM (v)")
    return Config(bm, bn, bl, w, s, row=m.group(6) == "r", waves=v)


def check_dot_tiles(name: str, tiles: Sequence[int], warps: int, stages: int) -> None:
    """ValueError unless the tile sizes are powers of two from 16 to 256 (`tl.dot`'s shapes), the
    warps a power of two from 1 to 16 and the stages 1 to 6 (shared by the GEMM-shaped kernels'
    configuration names)."""
    for v in (*tiles, warps):
        if v <= 0 or v & (v - 1):
            raise ValueError(f"{name!r}: tile sizes and warps must be powers of two")
    if min(tiles) < 16 or max(tiles) > 256:
        raise ValueError(f"{name!r}: tile sizes must be 16 to 256 (tl.dot's shapes)")
    if not 1 <= warps <= 16 or not 1 <= stages <= 6:
        raise ValueError(f"{name!r}: 1-16 warps and 1-6 stages")


def tiles_of(k: int, c: int, kernel: Sequence[int], cfg: Config) -> int:
    """Programs per reduction chunk: (tap rows or taps) x K blocks x column blocks."""
    ks = [int(v) for v in kernel]
    if cfg.row:
        fixed, ncol = math.prod(ks[:-1]), c * ks[-1]
    else:
        fixed, ncol = math.prod(ks), c
    return fixed * -(-k // cfg.block_m) * -(-ncol // cfg.block_n)


def key_of(config: str) -> str:
    return PREFIX + config


def config_of(key: str) -> str | None:
    return key[len(PREFIX):] if key.startswith(PREFIX) else None


def eligible(direction: str, ndim: int, c: int, k: int, groups: int, kernel: Sequence[int],
             dtype: str = "float32") -> str | None:
    """None when the kernel runs (and is offered for) this problem, else why not."""
    if direction != "wgrad":
        return f"{direction}: the wgrad kernel computes weight gradients only"
    if ndim not in (1, 2, 3):
        return f"{ndim}D: the wgrad kernel runs 1D, 2D and 3D convolutions"
    if groups != 1:
        return "grouped: the wgrad kernel runs ungrouped convolutions only"
    if dtype not in ("float32", "float16", "bfloat16"):
        return f"{dtype}: the wgrad kernel runs float32, float16 and bfloat16"
    size = k * c * math.prod(int(v) for v in kernel)
    if size > MAX_WEIGHT:
        return f"a weight of {size} elements (the kernel is offered up to {MAX_WEIGHT})"
    return None


def unfit(problem: Any) -> str | None:
    """`eligible` for a `ConvProblem` (None: the kernel runs it and is offered for it)."""
    return eligible(problem.direction, problem.ndim, problem.c, problem.k, problem.groups,
                    problem.kernel, problem.dtype)


def configs_for(k: int) -> tuple[str, ...]:
    """The configurations offered for a problem of `k` output channels."""
    return CONFIGS_SMALL_K if k <= 32 else CONFIGS_LARGE_K


def split_for(tiles: int, positions: int, block_l: int, sms: int,
              waves: int = WAVES) -> tuple[int, int]:
    """(split, chunk): how many programs share the reduction of each tile, and the positions each
    takes (a multiple of block_l). Aims at `waves` programs per SM, at least MIN_STEPS steps each."""
    steps = -(-positions // block_l)
    want = max(1, -(-waves * sms // max(tiles, 1)))
    split = max(1, min(want, steps // MIN_STEPS, MAX_GRID_Y))
    chunk = -(-steps // split) * block_l
    return -(-positions // chunk), chunk


# None when Triton can run here, else why not: one check (and one cache) for every kernel
unavailable = _dw_unavailable


@functools.lru_cache(maxsize=1)
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def wg_kernel(x, dy, out,
                  K: tl.constexpr, C: tl.constexpr, D: tl.constexpr, H: tl.constexpr,
                  W: tl.constexpr, OD: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
                  x_n: tl.constexpr, x_c: tl.constexpr, x_d: tl.constexpr, x_h: tl.constexpr,
                  x_w: tl.constexpr, y_n: tl.constexpr, y_k: tl.constexpr, y_d: tl.constexpr,
                  y_h: tl.constexpr, y_w: tl.constexpr,
                  o_split: tl.constexpr, o_k: tl.constexpr, o_c: tl.constexpr, o_t: tl.constexpr,
                  o_r: tl.constexpr, o_s: tl.constexpr,
                  KT: tl.constexpr, KR: tl.constexpr, KS: tl.constexpr,
                  SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                  PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                  DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                  L: tl.constexpr, CHUNK: tl.constexpr, PRECISION: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr,
                  STAGES: tl.constexpr, WIDE: tl.constexpr, XT: tl.constexpr,
                  ROW: tl.constexpr):
        # Every size and stride is a compile-time constant. Offsets are 32-bit unless WIDE.
        # A program owns one kernel tap (t, r, s) - or with ROW one tap row (t, r), its columns
        # then being (c, s) pairs - so the input tile's address is a column part plus a position
        # part, and its bounds test depends on the position alone (ROW: and on s for the width).
        P: tl.constexpr = OD * OH * OW
        NCOL: tl.constexpr = C * KS if ROW else C
        tiles_n: tl.constexpr = (NCOL + BLOCK_N - 1) // BLOCK_N
        tiles_m: tl.constexpr = (K + BLOCK_M - 1) // BLOCK_M
        pid_tile = tl.program_id(0)
        pid_split = tl.program_id(1)
        pid_n = pid_tile % tiles_n
        pid_m = (pid_tile // tiles_n) % tiles_m
        fixed = pid_tile // (tiles_n * tiles_m)
        offs_k = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_j = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        km = offs_k < K
        jm = offs_j < NCOL
        if ROW:
            tt = fixed // KR
            rr = fixed % KR
            cc = offs_j // KS
            ss = offs_j % KS
        else:
            tt = fixed // (KR * KS)
            rr = (fixed // KS) % KR
            cc = offs_j
            ss = fixed % KS
        if WIDE:
            col = cc.to(tl.int64) * x_c + ss * (DW * x_w)
            row_off = offs_k.to(tl.int64) * y_k
        else:
            col = cc * x_c + ss * (DW * x_w)
            row_off = offs_k * y_k
        tap_d = tt * DD - PD
        tap_h = rr * DH - PH
        CHECK_D: tl.constexpr = PD > 0 or (OD - 1) * SD + (KT - 1) * DD - PD >= D
        CHECK_H: tl.constexpr = PH > 0 or (OH - 1) * SH + (KR - 1) * DH - PH >= H
        CHECK_W: tl.constexpr = PW > 0 or (OW - 1) * SW + (KS - 1) * DW - PW >= W
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if WIDE:  # the reduction's positions may pass 2^31: its bounds in 64 bits
            start = pid_split.to(tl.int64) * CHUNK
        else:
            start = pid_split * CHUNK
        for l0 in tl.range(start, start + CHUNK, BLOCK_L, num_stages=STAGES):
            offs_l = l0 + tl.arange(0, BLOCK_L)
            lm = offs_l < L
            if WIDE:
                offs_l = offs_l.to(tl.int64)
            nn = offs_l // P
            pos = offs_l % P
            od = pos // (OH * OW)
            oh = (pos // OW) % OH
            ow = pos % OW
            a = tl.load(dy + (row_off[:, None] + (nn * y_n + od * y_d + oh * y_h
                                                  + ow * y_w)[None, :]),
                        mask=km[:, None] & lm[None, :], other=0.0)
            i_d = od * SD + tap_d
            i_h = oh * SH + tap_h
            w0 = ow * SW - PW  # the width index of tap s = 0
            pm = lm
            if CHECK_D:
                pm = pm & (i_d >= 0) & (i_d < D)
            if CHECK_H:
                pm = pm & (i_h >= 0) & (i_h < H)
            paddr = nn * x_n + i_d * x_d + i_h * x_h + w0 * x_w
            if XT:  # [BLOCK_N, BLOCK_L]: lanes along positions (contiguous in NCHW)
                if CHECK_W:
                    if ROW:
                        iw = (ss * DW)[:, None] + w0[None, :]
                        ok = jm[:, None] & pm[None, :] & (iw >= 0) & (iw < W)
                    else:
                        iw = w0 + ss * DW
                        ok = jm[:, None] & (pm & (iw >= 0) & (iw < W))[None, :]
                else:
                    ok = jm[:, None] & pm[None, :]
                bt = tl.load(x + (col[:, None] + paddr[None, :]), mask=ok, other=0.0)
                b = tl.trans(bt)
            else:  # [BLOCK_L, BLOCK_N]: lanes along columns (contiguous in channels-last)
                if CHECK_W:
                    if ROW:
                        iw = w0[:, None] + (ss * DW)[None, :]
                        ok = pm[:, None] & jm[None, :] & (iw >= 0) & (iw < W)
                    else:
                        iw = w0 + ss * DW
                        ok = (pm & (iw >= 0) & (iw < W))[:, None] & jm[None, :]
                else:
                    ok = pm[:, None] & jm[None, :]
                b = tl.load(x + (paddr[:, None] + col[None, :]), mask=ok, other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        o = (out + pid_split * o_split + tt * o_t + rr * o_r + offs_k[:, None] * o_k
             + (cc * o_c + ss * o_s)[None, :])
        tl.store(o, acc.to(out.dtype.element_ty), mask=km[:, None] & jm[None, :])

    return wg_kernel


def _as3d(t: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(N, C, D, H, W) sizes and strides of a 3-, 4- or 5-dim tensor (missing dims: size 1)."""
    nd = t.dim() - 2
    if nd not in (1, 2, 3):
        raise ValueError(f"convdoctor kernel: a {t.dim()}-dim tensor (expected 3, 4 or 5)")
    pad = 3 - nd
    sizes = (int(t.shape[0]), int(t.shape[1]), *([1] * pad), *(int(v) for v in t.shape[2:]))
    strides = (int(t.stride(0)), int(t.stride(1)), *([0] * pad), *(int(v) for v in t.stride()[2:]))
    return sizes, strides


def _triple(v: Sequence[int], nd: int, fill: int, what: str, who: str) -> tuple[int, int, int]:
    vals = tuple(int(x) for x in v)
    if len(vals) != nd:
        raise ValueError(f"{who}: {what} {vals} has {len(vals)} values for a {nd}D convolution")
    out = (fill,) * (3 - nd) + vals
    return out[0], out[1], out[2]


def geometry(nd: int, stride: Sequence[int], pad_pre: Sequence[int], dilation: Sequence[int],
             who: str) -> tuple[tuple[int, int, int], tuple[int, int, int], tuple[int, int, int]]:
    """(stride, pad_pre, dilation) as 3D triples (leading dims: 1, 0, 1), checked: one value per
    spatial dimension, strides and dilations positive, pads non-negative (ValueError naming
    `who` otherwise)."""
    st = _triple(stride, nd, 1, "stride", who)
    pp = _triple(pad_pre, nd, 0, "pad_pre", who)
    dl = _triple(dilation, nd, 1, "dilation", who)
    if min(st + dl) < 1 or min(pp) < 0:
        raise ValueError(f"{who}: strides and dilations must be positive, pads non-negative "
                         f"(stride {st}, pad_pre {pp}, dilation {dl})")
    return st, pp, dl


def _span(sizes: Sequence[int], strides: Sequence[int]) -> int:
    return 1 + sum((int(n) - 1) * abs(int(s)) for n, s in zip(sizes, strides, strict=True))


def _sm_count(t: Any) -> int:
    import torch

    if getattr(t, "is_cuda", False):
        return int(torch.cuda.get_device_properties(t.device).multi_processor_count)
    return 4  # the interpreter (tests): a few programs


def workspace_bytes(k: int, c: int, kernel: Sequence[int], positions: int, config: str,
                    sms: int) -> int:
    """Bytes of the fp32 partial-sum buffer a launch allocates (0 with one chunk)."""
    cfg = parse_config(config)
    ncol = c * math.prod(int(v) for v in kernel)
    split, _ = split_for(tiles_of(k, c, kernel, cfg), positions, cfg.block_l, sms, cfg.waves)
    return 0 if split == 1 else split * k * ncol * 4


def run(x: Any, dy: Any, dw: Any, *, stride: Sequence[int], pad_pre: Sequence[int],
        dilation: Sequence[int], config: str, tf32: bool = False, sms: int | None = None,
        wide: bool | None = None, xt: bool | None = None) -> Any:
    """Compute `dw` (K, C, *kernel) in place from the forward input `x` (N, C, *spatial) and the
    output gradient `dy` (N, K, *out) and return it. Any dense layout; `tf32`: fp32 products may
    round their inputs to TF32 (the problem's math mode allows it). `xt` (default: where x's
    width stride is not above its channel stride, i.e. NCHW-like) loads the input tile with lanes
    along positions instead of along channels and taps."""
    import torch

    cfg = parse_config(config)
    nd = x.dim() - 2
    if dy.dim() != x.dim() or dw.dim() != x.dim():
        raise ValueError(f"wgrad kernel: x {tuple(x.shape)}, dy {tuple(dy.shape)} and dw "
                         f"{tuple(dw.shape)} differ in rank")
    (n, c, d, h, w), xs = _as3d(x)
    (n2, k, od, oh, ow), ys = _as3d(dy)
    (k2, c2, kt, kr, ks), ws = _as3d(dw)
    if (n2, k2, c2) != (n, k, c):
        raise ValueError(f"wgrad kernel: x {tuple(x.shape)}, dy {tuple(dy.shape)} and dw "
                         f"{tuple(dw.shape)} disagree on N, C or K")
    if not (x.dtype == dy.dtype == dw.dtype):
        raise ValueError(f"wgrad kernel: x is {x.dtype}, dy is {dy.dtype}, dw is {dw.dtype} (one "
                         "dtype expected)")
    if str(x.dtype).replace("torch.", "") not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"wgrad kernel: {x.dtype} (float32, float16 or bfloat16 expected)")
    if min(n, c, d, h, w, k, od, oh, ow, kt, kr, ks) < 1:
        raise ValueError("wgrad kernel: an empty dimension")
    st, pp, dl = geometry(nd, stride, pad_pre, dilation, "wgrad kernel")
    positions = n * od * oh * ow
    ncol = c * kt * kr * ks
    tiles = tiles_of(k, c, (kt, kr, ks), cfg)
    split, chunk = split_for(tiles, positions, cfg.block_l, sms or _sm_count(x), cfg.waves)
    if wide is None:
        wide = max(_span((n, c, d, h, w), xs), _span((n, k, od, oh, ow), ys),
                   positions + chunk) >= 2**31
    if split == 1:
        target = dw
        o_split, (o_k, o_c, o_t, o_r, o_s) = 0, ws
    else:
        target = torch.empty((split, k, ncol), dtype=torch.float32, device=dw.device)
        o_split, o_k, o_c = k * ncol, ncol, kt * kr * ks
        o_t, o_r, o_s = kr * ks, ks, 1
    if x.dtype == torch.float32:
        precision = "tf32" if tf32 else "ieee"
    else:
        precision = "ieee"  # fp16/bf16 products are exact in the fp32 accumulator
    grid = (tiles, split)
    from .depthwise import _on_device

    with _on_device(x):
        _kernel()[grid](
            x, dy, target, K=k, C=c, D=d, H=h, W=w, OD=od, OH=oh, OW=ow,
            x_n=xs[0], x_c=xs[1], x_d=xs[2], x_h=xs[3], x_w=xs[4],
            y_n=ys[0], y_k=ys[1], y_d=ys[2], y_h=ys[3], y_w=ys[4],
            o_split=o_split, o_k=o_k, o_c=o_c, o_t=o_t, o_r=o_r, o_s=o_s,
            KT=kt, KR=kr, KS=ks, SD=st[0], SH=st[1], SW=st[2], PD=pp[0], PH=pp[1], PW=pp[2],
            DD=dl[0], DH=dl[1], DW=dl[2], L=positions, CHUNK=chunk, PRECISION=precision,
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_L=cfg.block_l, STAGES=cfg.stages,
            WIDE=bool(wide), XT=bool(xs[4] <= xs[1]) if xt is None else bool(xt), ROW=cfg.row,
            num_warps=cfg.warps)
    if split > 1:
        dw.copy_(target.sum(dim=0).view(dw.shape))
    return dw


def wgrad(x: Any, dy: Any, kernel: Sequence[int], *, stride: Sequence[int],
          pad_pre: Sequence[int], dilation: Sequence[int], config: str, tf32: bool = False,
          out: Any = None) -> Any:
    """dw of a convolution whose input is `x` and output gradient `dy`, for a `kernel`-sized
    window; allocates `out` (contiguous, or channels-last where x is) when not given."""
    import torch

    if out is None:
        from .depthwise import format_of

        shape = (int(dy.shape[1]), int(x.shape[1]), *(int(v) for v in kernel))
        out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=format_of(x))
    return run(x, dy, out, stride=stride, pad_pre=pad_pre, dilation=dilation, config=config,
               tf32=tf32)


def offered(problem: Any) -> tuple[str, ...]:
    """The configurations offered for `problem` (none unless it is an ungrouped wgrad with a
    weight of at most `MAX_WEIGHT` elements in fp32, fp16 or bf16)."""
    if unfit(problem) is not None:
        return ()
    return configs_for(problem.k)


def compute(direction: str, a: Any, b: Any, out: Any, *, stride: Sequence[int],
            pad_pre: Sequence[int], dilation: Sequence[int], config: str,
            tf32: bool = False) -> Any:
    """The engine's launch: wgrad (a=x, b=dy) -> out=dw."""
    return run(a, b, out, stride=stride, pad_pre=pad_pre, dilation=dilation, config=config,
               tf32=tf32)


def _candidate_workspace(problem: Any, config: str, sms: int) -> int:
    positions = problem.n * math.prod(problem.out_spatial())
    return workspace_bytes(problem.k, problem.c, problem.kernel, positions, config, sms)


# fixed-order fp32 sums per chunk, then one torch.sum over the chunks: the same bits run to run
ENGINE = TritonEngine(name="triton-wg", module=__name__, prefix=PREFIX, directions=("wgrad",),
                      what="wgrad", workspace=_candidate_workspace,
                      note="split-reduction implicit-GEMM wgrad (Triton, convdoctor.kernels."
                           "wgrad), fp32 accumulation")
