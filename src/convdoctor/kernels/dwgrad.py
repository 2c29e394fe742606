"""Depthwise weight gradient (groups == C == K, 1D/2D) as a split-reduction direct Triton kernel.

    dw[c, 0, r, s] = sum over (n, oh, ow) of
                     dy[n, c, oh, ow] * x[n, c, oh*SH - PH + r, ow*SW - PW + s]

Why: a depthwise wgrad reads x and dy once and writes a tiny weight, but every x element feeds
KH*KW taps. On an H100, ConvNeXt-tiny's 7x7 layer of 64x96x56x56 fp32 reads 154 MB (about 50 us at
3 TB/s); PyTorch's paths take 1.55 ms at best (cuDNN off) and 4.6 ms by default.

The work. A program owns BLOCK_C channels x BLOCK_P output columns (a column block) and a chunk of
row tiles; a row tile is TH consecutive output rows of one sample, TH the largest divisor of OH up
to the configuration's `h`, so no tile holds a row past the plane. It keeps KH fp32 accumulators,
one per tap row, in registers over its whole chunk (a tuple unrolled at compile time), each
[Q, SP]: a lane q per channel and input-column offset u = SW*column + e (e < SW), and SP registers
per lane, one per tap column SW*t + e (t < SP, SP the power of two >= ceil(KW / SW)). For a tile
the program walks the (TH-1)*SH + KH input rows the tile reads, once each: input row j is one
gather of the row's column-shifted views (the lines come into L1 once, the other views hit), and
for every tile row t and tap row r with t*SH + r == j (decided at compile time) it adds dy row t
times the views into accumulator r. A dy row is loaded once per tile, before its first use. So each
loaded x element feeds up to ceil(KH/SH) taps from registers and each dy element all KH*KW: loads
per dy element are ((TH-1)*SH + KH)*KW/TH + 1 (13.25 for 7x7, stride 1, TH = 8) instead of
KH*KW + 1 (50), and what remains is the KH*KW fp32 FMAs per dy element. A sample's sizes and
strides are compile-time constants, so every tap's address is a per-lane base plus a constant (the
loads carry it as an immediate): a tile of 8 rows of a 7x7 fp32 layer compiles (sm_90, Triton 3.6
and 3.9) to a loop of 632 instructions per thread, 392 of them FFMA and 106 loads, for 8 dy
elements. With stride 1 the registers past KW are neither loaded nor multiplied (their mask and
`acc + -0.0` fold at compile time); with stride 2 a lane's parity e decides its taps at run time
and the ones past KW multiply zeros that are never stored.

Masks and padding: input rows of padding, and columns outside the image or past the output width,
are masked (read as zero); in a whole-plane tile (TH == OH) every row's validity is static and
padding rows are skipped outright, loads and FMAs. Tiles hold no row past the plane and lanes
past the output width load neither x nor dy, so no product outside the definition reaches a
stored tap: a non-finite x makes exactly the taps non-finite that it does in PyTorch's sum. A
non-finite dy does too, except for taps that read it only against rows of padding in a
whole-plane tile (PyTorch multiplies those zeros, 0 * inf = nan; here they are skipped). Tensors are addressed by their strides (NCHW,
channels-last or any dense layout; Triton specialises unit strides). Lane q runs channels fastest
where they are contiguous (channels-last), else input columns, so a gather reads consecutive
addresses along q, and Triton (which spreads the most contiguous axis over lanes and warps) puts q
there, never the taps: their registers hold tap columns in the order t ^ (SP // 2), which hides
the taps' own contiguity (a tap axis across warps would move every dy row through shared memory).

The reduction: at the end of its chunk a program sums each accumulator over its columns and
writes fp32 partial sums [S, KH*KW, C] (S = chunks x column blocks); a second kernel adds the S
partials in a fixed order and writes dw in its dtype through its strides: the same bits run to
run, no atomics. With one chunk and one column block the kernel writes dw directly. The split
(`plan`) aims at V programs per SM (`WAVES` unless the configuration says), each chunk at least
`MIN_TILES` tiles. fp32, fp16 and bf16 inputs, converted to fp32 on load; products and sums in
fp32 (never TF32).

The column-blocked variant (`convdoctor.kernels.dwgrad_cols`, configurations with `x<V>`) gives
a lane V consecutive output columns instead of one; it shares the plan, the partial sums and the
second pass. In channels-last it is what wins (H100: 1.23-2.81x this kernel on 13 ConvNeXt-tiny,
MobileNetV2 and EfficientNet-B0 depthwise layers); in NCHW only on 7x7 layers with long rows.

Configurations (`configs_for`):
"c<BLOCK_C>p<BLOCK_P>h<ROWS>w<WARPS>[x<V>[s]][n<REGS>][v<PROGRAMS_PER_SM>]" (x: output columns
per lane, the column-blocked kernel, BLOCK_P / V column groups; s: its rows streamed, tiles up to
MAX_STREAM_ROWS rows, not offered; n: a cap on registers per thread, Triton's `maxnreg`). Candidate keys are "triton:dg_<config>" (`PREFIX`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.triton import TritonEngine
from . import dwgrad_cols
from .depthwise import _as2d, _on_device, sample_span
from .depthwise import unavailable as _dw_unavailable

PREFIX = "triton:dg_"
_CFG_RE = re.compile(r"^c(\d+)p(\d+)h(\d+)w(\d+)(?:x(\d+)(s)?)?(?:n(\d+))?(?:v(\d+))?$")
MAX_TAP = 7              # kernel sizes 1..7 per dimension
STRIDES = (1, 2)
WAVES = 6                # programs per SM the split aims for
MIN_TILES = 4            # the fewest row tiles a chunk takes (its epilogue is KH reductions)
MAX_ROWS = 32            # the largest row tile a configuration may ask for
MAX_STREAM_ROWS = 1024   # the same with the rows streamed (x<V>s)
MAX_TILE = 4096          # BLOCK_C x BLOCK_P
MAX_GRID_Y = 65535
MAX_COLS = 8            # output columns per lane of the column-blocked kernel
COLS_UNROLL = 1024      # products one tile of the column-blocked kernel unrolls, at most
_SUM_BLOCK = 256


@dataclass(frozen=True)
class Config:
    block_c: int
    block_p: int
    rows: int               # the row tile's largest height (TH divides OH, TH <= rows)
    warps: int
    regs: int = 0           # registers per thread at most (0: the compiler's choice)
    waves: int = WAVES      # programs per SM the split aims for
    cols: int = 0           # output columns per lane (0: the lane-per-column kernel)
    stream: bool = False    # column-blocked, rows streamed through a run-time loop

    @property
    def name(self) -> str:
        return (f"c{self.block_c}p{self.block_p}h{self.rows}w{self.warps}"
                + (f"x{self.cols}" if self.cols else "") + ("s" if self.stream else "")
                + (f"n{self.regs}" if self.regs else "")
                + (f"v{self.waves}" if self.waves != WAVES else ""))


@functools.lru_cache(maxsize=256)
def parse_config(name: str) -> Config:
    """'c2p64h8w4' -> Config(2, 64, 8, 4), 'c32p16h8w4x4' -> Config(32, 16, 8, 4, cols=4);
    ValueError for anything else."""
    m = _CFG_RE.match(name)
    if not m:
        raise ValueError(f"not a depthwise wgrad kernel configuration: {name!r} "
                         "(expected like c2p64h8w4)")
    bc, bp, h, w = (int(g) for g in m.groups()[:4])
    cols = int(m.group(5)) if m.group(5) else 0
    regs = int(m.group(7)) if m.group(7) else 0
    v = int(m.group(8)) if m.group(8) else WAVES
    if m.group(5) and not (1 <= cols <= MAX_COLS and bp % cols == 0):
        raise ValueError(f"{name!r}: 1-{MAX_COLS} columns per lane (x), dividing the "
                         "program's columns (p)")
    groups = bp // cols if cols else bp
    for val in (bc, groups, w):
        if val <= 0 or val & (val - 1):
            raise ValueError(f"{name!r}: channel and column blocks and warps must be powers of "
                             "two (with x, p/x)")
    if bc * groups > MAX_TILE:
        raise ValueError(f"{name!r}: {bc * groups} lanes of channels x columns are too many "
                         f"(at most {MAX_TILE})")
    rows_max = MAX_STREAM_ROWS if m.group(6) else MAX_ROWS
    if not 1 <= h <= rows_max:
        raise ValueError(f"{name!r}: 1-{rows_max} rows per tile (h)")
    if not 1 <= w <= 16:
        raise ValueError(f"{name!r}: 1-16 warps")
    if m.group(7) and not (64 <= regs <= 255 and regs % 8 == 0):
        raise ValueError(f"{name!r}: a register cap (n) is a multiple of 8 from 64 to 255")
    if not 1 <= v <= 64:
        raise ValueError(f"{name!r}: 1-64 programs per SM (v)")
    return Config(bc, bp, h, w, regs, v, cols, bool(m.group(6)))


def key_of(config: str) -> str:
    return PREFIX + config


def config_of(key: str) -> str | None:
    return key[len(PREFIX):] if key.startswith(PREFIX) else None


def rows_for(oh: int, rows: int) -> int:
    """The row tile's height: the largest divisor of `oh` that is at most `rows`."""
    return max(d for d in range(1, min(oh, rows) + 1) if oh % d == 0)


def _pow2_at_least(v: int) -> int:
    p = 1
    while p < v:
        p *= 2
    return p


def configs_for(layout: str, ow: int, oh: int, taps: int) -> tuple[str, ...]:
    """The configurations offered for a problem of `layout` ("nchw" or "nhwc") with output rows of
    `ow` columns, `oh` rows and `taps` = KH*KW.

    NCHW, the lane-per-column kernel: each thread one lane per column parity (one with stride 1,
    two with stride 2), lanes along the row (BLOCK_P its power of two, at most 128; channels fill
    the program), 2-warp programs too; rows per tile 8, and 16 where the plane is taller than 8.
    For kernels above 5x5 (a thread holds KH*SP accumulators) a 128-register cap with 8 programs
    per SM wanted, else 16 programs per SM wanted (small kernels leave room). Kernels above 5x5
    with rows of 16 columns or more add the column-blocked kernel with 4 columns per lane: the
    column groups that cover the row (a power of two, at most 32) x the channels that fill 128
    lanes, 3 programs per SM wanted.

    Channels-last, the column-blocked kernel only (`x<V>`): 4 or 2 columns per lane with 32
    channels x 4 column groups and 3 programs per SM wanted, or 2 columns per lane with 16
    channels x 4 column groups in 2-warp programs. Rows per tile of the column-blocked kernel: up
    to 8, fewer where a tile would unroll more than COLS_UNROLL products (`_cols_rows`); halving
    them to compile faster cost 10-20% on ConvNeXt-tiny's 7x7 layers. (H100, batch 64,
    ConvNeXt-tiny, MobileNetV2 and EfficientNet-B0 depthwise layers: in channels-last the
    column-blocked kernel won on all 13 layers, 1.23-2.81x the lane-per-column kernel, and these
    three were the fastest or within 5% of it on 12, 9% behind a 2-row tile on a stride-2 3x3
    layer; in NCHW it won on ConvNeXt's 7x7 rows of 56 and
    28 columns, by 3-18%, and lost by 4-19% on six of seven 3x3 and 5x5 layers of 28 to 112
    columns.)"""
    if layout == "nhwc":
        r4, r2 = _cols_rows(4, taps), _cols_rows(2, taps)
        return (f"c32p16h{r4}w4x4v3", f"c32p8h{r2}w4x2v3", f"c16p8h{r2}w2x2")
    bp = min(128, _pow2_at_least(max(1, ow)))

    def base(h: int) -> str:
        return f"c{max(1, 128 // bp)}p{bp}h{h}w4"
    out = [base(8)]
    if oh > 8:
        out.append(base(16))
    out.append(base(8) + ("n128v8" if taps > 25 else "v16"))
    out.append(f"c{max(1, 64 // bp)}p{bp}h8w2v12")
    if ow >= 16 and taps > 25:
        g = min(32, _pow2_at_least(-(-ow // 4)))
        out.append(f"c{128 // g}p{4 * g}h{_cols_rows(4, taps)}w4x4v3")
    return tuple(dict.fromkeys(out))


def _cols_rows(cols: int, taps: int) -> int:
    """Rows per tile for the column-blocked kernel: the most of 8, 4, 2, 1 whose tile unrolls at
    most COLS_UNROLL products (rows x columns x taps; compile time grows faster than that)."""
    return next((h for h in (8, 4, 2) if h * cols * taps <= COLS_UNROLL), 1)


def eligible(direction: str, ndim: int, c: int, k: int, groups: int, kernel: Sequence[int],
             stride: Sequence[int], dilation: Sequence[int],
             dtype: str = "float32") -> str | None:
    """None when the kernel runs (and is offered for) this problem, else why not."""
    if direction != "wgrad":
        return f"{direction}: the depthwise wgrad kernel computes weight gradients only"
    if ndim not in (1, 2):
        return f"{ndim}D: the depthwise wgrad kernel runs 1D and 2D convolutions only"
    if not (groups == c == k) or groups < 2:
        return "not depthwise (needs groups == C == K)"
    if dtype not in ("float32", "float16", "bfloat16"):
        return f"{dtype}: the depthwise wgrad kernel runs float32, float16 and bfloat16"
    if max(int(v) for v in kernel) > MAX_TAP:
        return f"kernel {tuple(kernel)}: the depthwise wgrad kernel runs kernels up to {MAX_TAP}"
    if any(int(v) not in STRIDES for v in stride):
        return f"stride {tuple(stride)}: the depthwise wgrad kernel runs strides 1 and 2"
    if any(int(v) != 1 for v in dilation):
        return f"dilation {tuple(dilation)}: the depthwise wgrad kernel runs undilated kernels"
    return None


def unfit(problem: Any) -> str | None:
    """`eligible` for a `ConvProblem` (None: the kernel runs it and is offered for it)."""
    return eligible(problem.direction, problem.ndim, problem.c, problem.k, problem.groups,
                    problem.kernel, problem.stride, problem.dilation, problem.dtype)


# None when Triton can run here, else why not: one check (and one cache) for every kernel
unavailable = _dw_unavailable


@dataclass(frozen=True)
class Plan:
    """How one launch covers a problem: row tiles of `rows`, `cblocks` x `wblocks` programs per
    chunk, `split` chunks of `chunk` tiles each."""

    rows: int
    tiles: int
    cblocks: int
    wblocks: int
    split: int
    chunk: int

    @property
    def partials(self) -> int:
        """Partial sums per tap and channel (1: the kernel writes dw directly)."""
        return self.split * self.wblocks


def plan(n: int, c: int, oh: int, ow: int, cfg: Config, sms: int) -> Plan:
    """The launch for N x C x OH x OW output positions on `sms` SMs: `cfg.waves` programs per SM
    wanted, at least MIN_TILES tiles per chunk."""
    rows = rows_for(oh, cfg.rows)
    tiles = n * (oh // rows)
    cblocks = -(-c // cfg.block_c)
    wblocks = -(-ow // cfg.block_p)
    want = max(1, -(-cfg.waves * sms // (cblocks * wblocks)))
    split = max(1, min(want, tiles // MIN_TILES, MAX_GRID_Y))
    chunk = -(-tiles // split)
    return Plan(rows, tiles, cblocks, wblocks, -(-tiles // chunk), chunk)


def workspace_bytes(n: int, c: int, kernel: Sequence[int], out: Sequence[int], config: str,
                    sms: int) -> int:
    """Bytes of the fp32 partial sums a launch allocates (0 when it writes dw directly)."""
    cfg = parse_config(config)
    oh, ow = (1, int(out[0])) if len(out) == 1 else (int(out[0]), int(out[1]))
    p = plan(n, c, oh, ow, cfg, sms)
    return 0 if p.partials == 1 else p.partials * math.prod(int(v) for v in kernel) * c * 4


@functools.lru_cache(maxsize=1)
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def dg_kernel(x, dy, out, x_n, y_n, o_split, o_c, o_r, o_s, TILES, CHUNK,
                  C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, OH: tl.constexpr,
                  OW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                  x_c: tl.constexpr, x_h: tl.constexpr, x_w: tl.constexpr,
                  y_c: tl.constexpr, y_h: tl.constexpr, y_w: tl.constexpr,
                  KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                  TH: tl.constexpr, SP: tl.constexpr, BLOCK_C: tl.constexpr,
                  BLOCK_P: tl.constexpr, CFAST: tl.constexpr, WIDE: tl.constexpr):
        # x, dy: the layer's input and output gradient; out: fp32 partials [S, KH*KW, C] or dw.
        # A sample's sizes and strides are compile-time constants, so every tap of a tile is
        # one per-lane base address plus a constant; the batch (TILES, CHUNK, x_n, y_n) and the
        # output's strides are run time. Offsets inside a sample are 32-bit unless WIDE.
        # Tensors are [Q, SP]: lane q is (channel, u) with u = SW*column + e, channels fastest
        # when CFAST (channels-last) else u; register s holds tap column SW*t(s) + e, where
        # t(s) = s ^ (SP // 2) for s < SP. So a lane's gather runs over consecutive addresses
        # along q in either layout and stride, and q, never the taps, is what Triton spreads
        # over lanes and warps (the permutation hides the taps' own contiguity).
        NX: tl.constexpr = (TH - 1) * SH + KH      # input rows one tile reads
        WHOLE: tl.constexpr = TH == OH             # one tile per sample: row validity is static
        WB: tl.constexpr = (OW + BLOCK_P - 1) // BLOCK_P
        U: tl.constexpr = SW * BLOCK_P
        pid = tl.program_id(0)
        pid_s = tl.program_id(1)
        wb = pid % WB
        q = tl.arange(0, BLOCK_C * U)
        if CFAST:
            cq = q % BLOCK_C
            u = q // BLOCK_C
        else:
            cq = q // U
            u = q % U
        offs_c = (pid // WB) * BLOCK_C + cq
        col = wb * BLOCK_P + u // SW
        if WIDE:
            offs_c = offs_c.to(tl.int64)
            col = col.to(tl.int64)
        qm = (offs_c < C) & (col < OW)
        y_off = offs_c * y_c + col * y_w
        # the KW column-shifted views of an input row as one gather: offsets and masks, the same
        # for every row
        ts = SW * (tl.arange(0, SP) ^ (SP // 2))
        tap = ts[None, :] + (u % SW)[:, None]
        # = SW*col - PW + tap, written so that its contiguity along q is plain to see
        iw = (wb * U + u - PW)[:, None] + ts[None, :]
        tap_ok = tap < KW
        x_off = (offs_c * x_c)[:, None] + iw * x_w
        x_m = qm[:, None] & tap_ok & (iw >= 0) & (iw < W)
        acc = ()
        for _r in tl.static_range(KH):
            acc = acc + (tl.zeros((BLOCK_C * U, SP), dtype=tl.float32),)
        start = pid_s * CHUNK
        for tile in range(start, tl.minimum(start + CHUNK, TILES)):
            n = tl.cast(tile // (OH // TH), tl.int64)
            if WIDE:
                oh0 = tl.cast((tile % (OH // TH)) * TH, tl.int64)
            else:
                oh0 = tl.cast((tile % (OH // TH)) * TH, tl.int32)
            yb = dy + n * y_n + oh0 * y_h
            dys = ()
            for j in tl.static_range(NX):
                if j % SH == 0 and j // SH < TH:   # tile row j // SH: first met at input row j
                    dys = dys + (tl.load(yb + (j // SH) * y_h + y_off, mask=qm,
                                         other=0.0).to(tl.float32)[:, None],)
                if not WHOLE or (j - PH >= 0 and j - PH < H):
                    ih = oh0 * SH + (j - PH)
                    if WHOLE:
                        m = x_m
                    else:
                        m = tl.where((ih >= 0) & (ih < H), x_m, False)
                    xv = tl.load(x + n * x_n + ih * x_h + x_off, mask=m,
                                 other=0.0).to(tl.float32)
                    new = ()
                    for r in tl.static_range(KH):
                        # tap row r meets input row j in tile row (j - r) / SH
                        if j - r >= 0 and (j - r) % SH == 0 and (j - r) // SH < TH:
                            d = dys[(j - r) // SH]
                            if SW == 1:
                                # a tap past KW is a register index: `+ -0.0` folds away
                                new = new + (acc[r] + tl.where(tap_ok, d * xv, -0.0),)
                            else:
                                # past KW the view is masked (zero); never stored
                                new = new + (acc[r] + d * xv,)
                        else:
                            new = new + (acc[r],)
                    acc = new
        # sum each accumulator over its columns, per channel, tap parity and register
        es = tl.arange(0, SW)
        cs = (pid // WB) * BLOCK_C + tl.arange(0, BLOCK_C)
        if CFAST:   # q = (column * SW + e) * BLOCK_C + channel
            ot = ts[None, None, :] + es[:, None, None]
            oc = cs[None, :, None]
        else:       # q = (channel * BLOCK_P + column) * SW + e
            ot = ts[None, None, :] + es[None, :, None]
            oc = cs[:, None, None]
        o = out + (pid_s * WB + wb) * o_split + ot * o_s + oc * o_c
        om = (ot < KW) & (oc < C)
        for r in tl.static_range(KH):
            if CFAST:
                v = tl.sum(tl.reshape(acc[r], (BLOCK_P, SW, BLOCK_C, SP)), axis=0)
            else:
                v = tl.sum(tl.reshape(acc[r], (BLOCK_C, BLOCK_P, SW, SP)), axis=1)
            tl.store(o + r * o_r, v.to(out.dtype.element_ty), mask=om)

    return dg_kernel


@functools.lru_cache(maxsize=1)
def _sum_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def dg_sum(part, out, S, C, o_c, o_r, o_s, TAPS: tl.constexpr, KW: tl.constexpr,
               BLOCK: tl.constexpr):
        # dw[c, 0, r, s] = the sum of part[0..S-1, r*KW + s, c], in that order
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < TAPS * C
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for k in range(S):
            acc += tl.load(part + k * (TAPS * C) + offs, mask=m, other=0.0)
        tap = offs // C
        c = offs % C
        tl.store(out + c * o_c + (tap // KW) * o_r + (tap % KW) * o_s,
                 acc.to(out.dtype.element_ty), mask=m)

    return dg_sum


def _sm_count(t: Any) -> int:
    import torch

    if getattr(t, "is_cuda", False):
        return int(torch.cuda.get_device_properties(t.device).multi_processor_count)
    return 4  # the interpreter (tests): a few programs


def _check(x: Any, dy: Any, dw: Any, stride: Sequence[int], pad_pre: Sequence[int],
           dilation: Sequence[int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """ValueError unless x, dy and dw are one depthwise wgrad's tensors; ((SH, SW), (PH, PW))."""
    import torch

    who = "depthwise wgrad kernel"
    if x.dim() not in (3, 4) or dy.dim() != x.dim() or dw.dim() != x.dim():
        raise ValueError(f"{who}: x {tuple(x.shape)}, dy {tuple(dy.shape)} and dw "
                         f"{tuple(dw.shape)}: expected three 3-dim or three 4-dim tensors")
    n, c = int(x.shape[0]), int(x.shape[1])
    if (int(dy.shape[0]), int(dy.shape[1])) != (n, c) or tuple(dw.shape[:2]) != (c, 1):
        raise ValueError(f"{who}: x {tuple(x.shape)}, dy {tuple(dy.shape)} and dw "
                         f"{tuple(dw.shape)} disagree on N or C (dw must be (C, 1, *kernel))")
    if not (x.dtype == dy.dtype == dw.dtype):
        raise ValueError(f"{who}: x is {x.dtype}, dy is {dy.dtype}, dw is {dw.dtype} (one dtype "
                         "expected)")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"{who}: {x.dtype} (float32, float16 or bfloat16 expected)")
    if min(x.shape) < 1 or min(dy.shape) < 1:
        raise ValueError(f"{who}: an empty dimension")
    nd = x.dim() - 2
    st, pp, dl = (tuple(int(v) for v in t) for t in (stride, pad_pre, dilation))
    if len(st) != nd or len(pp) != nd or len(dl) != nd:
        raise ValueError(f"{who}: stride {st}, pad_pre {pp} and dilation {dl} need {nd} values")
    if any(v not in STRIDES for v in st) or any(v != 1 for v in dl) or min(pp) < 0:
        raise ValueError(f"{who}: strides 1 or 2, dilation 1 and non-negative pads only "
                         f"(stride {st}, pad_pre {pp}, dilation {dl})")
    if max(int(v) for v in dw.shape[2:]) > MAX_TAP:
        raise ValueError(f"{who}: kernel {tuple(dw.shape[2:])} (at most {MAX_TAP} per dimension)")
    if nd == 1:
        return (1, st[0]), (0, pp[0])
    return (st[0], st[1]), (pp[0], pp[1])


def run(x: Any, dy: Any, dw: Any, *, stride: Sequence[int], pad_pre: Sequence[int],
        dilation: Sequence[int], config: str, sms: int | None = None,
        wide: bool | None = None) -> Any:
    """Compute `dw` (C, 1, *kernel) in place from the forward input `x` (N, C, *spatial) and the
    output gradient `dy` (N, C, *out) of a depthwise convolution and return it. Any dense layout;
    `sms`: the SM count the split plans for (default: the device's); `wide`: force 64-bit
    offsets (default: where a sample spans 2^31 elements)."""
    import torch

    cfg = parse_config(config)
    (sh, sw), (ph, pw) = _check(x, dy, dw, stride, pad_pre, dilation)
    (n, c, h, w), xs = _as2d(x)
    (_, _, oh, ow), ys = _as2d(dy)
    (_, _, kh, kw), ws = _as2d(dw)
    p = plan(n, c, oh, ow, cfg, sms or _sm_count(x))
    taps = kh * kw
    if p.partials * taps * c >= 2**31:
        raise ValueError(f"depthwise wgrad kernel: {p.partials} x {taps} x {c} partial sums "
                         "(at most 2^31)")
    if wide is None:
        wide = max(sample_span(x.shape, x.stride()), sample_span(dy.shape, dy.stride())) >= 2**31
    if p.partials == 1:
        target = dw
        o_split, o_c, o_r, o_s = 0, ws[0], ws[2], ws[3]
    else:
        target = torch.empty((p.partials, taps, c), dtype=torch.float32, device=dw.device)
        o_split, o_c, o_r, o_s = taps * c, 1, kw * c, c
    sizes = {"C": c, "H": h, "W": w, "OH": oh, "OW": ow, "PH": ph, "PW": pw, "x_c": xs[1],
             "x_h": xs[2], "x_w": xs[3], "y_c": ys[1], "y_h": ys[2], "y_w": ys[3], "KH": kh,
             "KW": kw, "SH": sh, "SW": sw}
    regs = {"maxnreg": cfg.regs} if cfg.regs else {}
    with _on_device(x):
        if cfg.cols:
            dwgrad_cols.kernel()[(p.cblocks * p.wblocks, p.split)](
                x, dy, target, xs[0], ys[0], o_split, o_c, o_r, o_s, p.tiles, p.chunk, **sizes,
                TH=p.rows, V=cfg.cols, G=cfg.block_p // cfg.cols, BLOCK_C=cfg.block_c,
                CFAST=bool(xs[1] < xs[3]), WIDE=bool(wide), STREAM=cfg.stream,
                num_warps=cfg.warps, **regs)
        else:
            _kernel()[(p.cblocks * p.wblocks, p.split)](
                x, dy, target, xs[0], ys[0], o_split, o_c, o_r, o_s, p.tiles, p.chunk, **sizes,
                TH=p.rows, SP=_pow2_at_least(-(-kw // sw)), BLOCK_C=cfg.block_c,
                BLOCK_P=cfg.block_p, CFAST=bool(xs[1] < xs[3]), WIDE=bool(wide),
                num_warps=cfg.warps, **regs)
        if p.partials > 1:
            _sum_kernel()[(-(-taps * c // _SUM_BLOCK),)](
                target, dw, p.partials, c, ws[0], ws[2], ws[3], TAPS=taps, KW=kw,
                BLOCK=_SUM_BLOCK, num_warps=4)
    return dw


def wgrad(x: Any, dy: Any, kernel: Sequence[int], *, stride: Sequence[int],
          pad_pre: Sequence[int], dilation: Sequence[int], config: str, out: Any = None) -> Any:
    """dw (C, 1, *kernel) of a depthwise convolution whose input is `x` and output gradient `dy`;
    allocates `out` (contiguous) when not given."""
    import torch

    if out is None:
        out = torch.empty((int(x.shape[1]), 1, *(int(v) for v in kernel)), dtype=x.dtype,
                          device=x.device)
    return run(x, dy, out, stride=stride, pad_pre=pad_pre, dilation=dilation, config=config)


def offered(problem: Any) -> tuple[str, ...]:
    """The configurations offered for `problem` (none unless it is a depthwise 1D/2D wgrad with
    kernels up to 7, strides 1 or 2 and no dilation, in fp32, fp16 or bf16)."""
    if unfit(problem) is not None:
        return ()
    out = problem.out_spatial()
    oh, ow = (1, out[0]) if len(out) == 1 else (out[0], out[1])
    return configs_for(problem.layout, ow, oh, math.prod(problem.kernel))


def compute(direction: str, a: Any, b: Any, out: Any, *, stride: Sequence[int],
            pad_pre: Sequence[int], dilation: Sequence[int], config: str,
            tf32: bool = False) -> Any:
    """The engine's launch: wgrad (a=x, b=dy) -> out=dw (fp32 FMAs: `tf32` changes nothing)."""
    if direction != "wgrad":
        raise ValueError(f"{direction}: the depthwise wgrad kernel computes weight gradients only")
    return run(a, b, out, stride=stride, pad_pre=pad_pre, dilation=dilation, config=config)


def _candidate_workspace(problem: Any, config: str, sms: int) -> int:
    return workspace_bytes(problem.n, problem.c, problem.kernel, problem.out_spatial(), config,
                           sms)


# fixed-order fp32 sums per program, then one fixed-order sum over the partials: the same bits
# run to run
ENGINE = TritonEngine(name="triton-dg", module=__name__, prefix=PREFIX, directions=("wgrad",),
                      what="depthwise wgrad", workspace=_candidate_workspace,
                      note="split-reduction direct depthwise wgrad (Triton, convdoctor.kernels."
                           "dwgrad), fp32 accumulation")
