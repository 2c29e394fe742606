"""Forward convolution as an implicit GEMM in Triton, reading NCHW (or channels-last) in place.

Tuner candidates `triton:fp_<config>`: the "k...p...j..." configurations in
`OFFERED`, for ungrouped 1D/2D forward problems in fp32, and in fp16/bf16 where NCHW (`eligible`); the runtime runs a chosen one through
`convdoctor.engines.triton.TritonExec`. On the H100 (fp32 NCHW, TF32) cuDNN's fastest
plans for mid-size layers (eng67) copy x to NHWC in their workspace, run a Hopper GEMM and write
NCHW back, well under either roofline, so a kernel that reads NCHW in place could win. Measured
(`lab/fp_probe.py`, raw output in benchmarks/results/probes/):
- a first kernel ("m...n...": positions x channels over the whole batch, the NCHW
  input tile transposed for `tl.dot`) lost on all 16 rows probed, 1.4-5.2x slower than the tuned
  paths, and was removed (git history: a07bddc);
- the "k...p...c..." variant was 1.3-2x faster than that one, but still lost on every 1x1 layer
  (pw960-160@7 26.0 vs 20.0 us) and, given the tap-major weight copy it needs, everywhere else;
- the "k...p...j..." variant won one row of the 15 probed there, wav2vec2 feature_extractor.conv6
  (19.2 vs 22.0 us), and lost the rest (Mixed_7b.branch3x3_2a 28.2 vs 24.6 us); over the whole
  suite it wins where cuDNN's NCHW paths are weakest: first layers with 1-3 input channels
  (ResNet-50 conv1 142 vs 330 us) and narrow 1x1 layers (`OFFERED`). 1D layers need the contiguous flat paths (`flat_flags`): without them they ran
  4-8x slower.

    y[n, k, oh, ow] = sum over (c, r, s) of x[n, c, oh*SH - PH + r*DH, ow*SW - PW + s*DW] * w[k, c, r, s]

Two variants of one kernel, both accumulating with `tl.dot` in fp32 (TF32 inputs only where the
math mode allows); padding is a masked load whose test depends on the position only. 1D problems
are 2D ones with height 1. A program computes [BK output channels x BP output positions] of ONE
image (grid: channel blocks, position blocks, images), so y is stored and x loaded along NCHW's
contiguous positions with no transpose; where x's, y's or w's layout allows, addresses are ones the
compiler sees as contiguous (`flat_flags`).
- "k<BK>p<BP>c<BC>w<W>s<S>": one pipelined loop over (kernel tap, channel block); the weight tile
  [BK x BC] is read along C: contiguous for 1x1, else from `tap_major(w)` (probes only).
- "k<BK>p<BP>j<BJ>w<W>s<S>": the reduction runs over j = (c, r, s) in the weight's own order, BJ
  at a time, so the weight as given is read along j (no copy); the input address is a part per j
  plus a part per position. The tuner's candidates.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.triton import TritonEngine
from .depthwise import _on_device
from .depthwise import unavailable as _dw_unavailable
from .wgrad import _span, check_dot_tiles, geometry

_KP_RE = re.compile(r"^k(\d+)p(\d+)([cj])(\d+)w(\d+)s(\d+)$")
# the configurations the probe sweeps (lab/fp_probe.py; "c": on a tap-major weight)
KP_CONFIGS = ("k64p64c32w4s3", "k128p64c32w4s3", "k64p128c32w4s3", "k128p128c32w8s3",
              "k32p64c32w4s4", "k64p32c32w4s4", "k32p32c64w4s3", "k64p64c64w4s3",
              "k128p32c32w4s3", "k256p64c32w8s3")
J_CONFIGS = ("k64p32j32w4s4", "k128p64j32w4s3", "k32p64j32w4s4", "k256p64j32w8s3",
             "k128p32j32w4s3", "k128p128j32w8s3", "k64p64j32w4s3", "k64p64j64w4s3")

unavailable = _dw_unavailable

PREFIX = "triton:fp_"
# Configurations offered to the tuner (`configs_for`): "k...p...j..." ones, which read the weight
# as given. Each was the fastest of the 8 swept on at least one of 15 fp32 NCHW suite layers
# (H100, lab/fp_probe.py with FP_SWEEP=j). A sweep of these 6 over all 76
# fp32 forward suite rows the kernel runs (lab/fp_sweep.py) put 15 within 5% of their
# tuned paths; re-tuned with the kernel offered (with the 1D rows and two more), it was chosen on
# 17 of 22 (first layers with 1-3 input channels up to 2.3x, narrow 1x1 layers, 1D speech layers
# up to 2.1x).
OFFERED = ("k64p32j32w4s4", "k128p64j32w4s3", "k32p64j32w4s4", "k256p64j32w8s3",
           "k128p128j32w8s3", "k64p64j32w4s3")
MAX_GRID_Z = 65535


def key_of(config: str) -> str:
    return PREFIX + config


def config_of(key: str) -> str | None:
    return key[len(PREFIX):] if key.startswith(PREFIX) else None


HALF = ("float16", "bfloat16")


def eligible(direction: str, ndim: int, groups: int, dtype: str, n: int,
             layout: str = "nchw") -> str | None:
    """None when the kernel runs (and is offered for) this problem, else why not. float32 in any
    layout; float16 and bfloat16 (fp32 accumulation) in NCHW only: the kernel reads positions
    along NCHW's contiguous planes, where cuDNN's half-precision paths transpose to NHWC first;
    on channels-last data cuDNN's NHWC tensor-core paths read what they need contiguously."""
    if direction != "fprop":
        return f"{direction}: the forward kernel computes forward convolutions only"
    if ndim not in (1, 2):
        return f"{ndim}D: the forward kernel runs 1D and 2D convolutions"
    if groups != 1:
        return "grouped: the forward kernel runs ungrouped convolutions only"
    if dtype in HALF and layout != "nchw":
        return f"{dtype} {layout}: the forward kernel is offered for half precision in NCHW only"
    if dtype != "float32" and dtype not in HALF:
        return f"{dtype}: the forward kernel runs float32, float16 and bfloat16"
    if n > MAX_GRID_Z:
        return f"a batch of {n} (one program row per image, at most {MAX_GRID_Z})"
    return None


def unfit(problem: Any) -> str | None:
    """`eligible` for a `ConvProblem` (None: the kernel runs it and is offered for it)."""
    return eligible(problem.direction, problem.ndim, problem.groups, problem.dtype, problem.n,
                    problem.layout)


def configs_for(problem: Any) -> tuple[str, ...]:
    """The configurations offered for `problem` (none where `unfit`; those whose position blocks
    per image would pass the grid's limit left out)."""
    if unfit(problem) is not None:
        return ()
    plane = math.prod(problem.out_spatial())
    return tuple(c for c in OFFERED if -(-plane // parse_config(c).block_p) <= MAX_GRID_Z)


@dataclass(frozen=True)
class Config:
    """A program's tile: block_k output channels x block_p output positions, the reduction
    block_c at a time (`nat`: over (c, r, s) in the weight's order, "j" names; else over channels
    per kernel tap, "c" names)."""

    block_k: int
    block_p: int
    block_c: int
    warps: int
    stages: int
    nat: bool = False

    @property
    def name(self) -> str:
        return (f"k{self.block_k}p{self.block_p}{'j' if self.nat else 'c'}{self.block_c}"
                f"w{self.warps}s{self.stages}")


@functools.lru_cache(maxsize=256)
def parse_config(name: str) -> Config:
    """'k64p128c32w4s3' -> Config(64, 128, 32, 4, 3); 'k64p32j32w4s4' -> Config(64, 32, 32, 4, 4,
    nat=True); ValueError for anything else."""
    m = _KP_RE.match(name)
    if not m:
        raise ValueError(f"not a forward kernel configuration: {name!r} (expected like "
                         "k64p128c32w4s3 or k64p32j32w4s4)")
    bk, bp, bc, w, s = (int(m.group(i)) for i in (1, 2, 4, 5, 6))
    check_dot_tiles(name, (bk, bp, bc), w, s)
    return Config(bk, bp, bc, w, s, nat=m.group(3) == "j")


@functools.lru_cache(maxsize=1)
def _kp_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def kp_kernel(x, w, y,
                  C: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                  K: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
                  x_n: tl.constexpr, x_c: tl.constexpr, x_h: tl.constexpr, x_w: tl.constexpr,
                  w_k: tl.constexpr, w_c: tl.constexpr, w_r: tl.constexpr, w_s: tl.constexpr,
                  y_n: tl.constexpr, y_k: tl.constexpr, y_h: tl.constexpr, y_w: tl.constexpr,
                  KR: tl.constexpr, KS: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                  PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                  PRECISION: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr,
                  BLOCK_C: tl.constexpr, STAGES: tl.constexpr, FLAT_X: tl.constexpr,
                  FLAT_Y: tl.constexpr, NAT: tl.constexpr, FLAT_W: tl.constexpr):
        # a program: BLOCK_K output channels x BLOCK_P output positions of image program_id(2);
        # one pipelined loop over (kernel tap, channel block), so a short channel loop per tap
        # does not restart the pipeline
        P: tl.constexpr = OH * OW
        CB: tl.constexpr = (C + BLOCK_C - 1) // BLOCK_C
        EVEN_C: tl.constexpr = C % BLOCK_C == 0
        pid_k = tl.program_id(0)
        pid_p = tl.program_id(1)
        n = tl.program_id(2)
        offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
        offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
        km = offs_k < K
        pm0 = offs_p < P
        oh = offs_p // OW
        ow = offs_p % OW
        xb = x + n * x_n
        CHECK_H: tl.constexpr = PH > 0 or (OH - 1) * SH + (KR - 1) * DH - PH >= H
        CHECK_W: tl.constexpr = PW > 0 or (OW - 1) * SW + (KS - 1) * DW - PW >= W
        acc = tl.zeros((BLOCK_K, BLOCK_P), dtype=tl.float32)
        if NAT:
            # reduction index j = (c, r, s) in the weight's own order: the weight tile is read
            # along j (contiguous when FLAT_W), the input address splits into a part per j and
            # a part per position
            RS: tl.constexpr = KR * KS
            J: tl.constexpr = C * RS
            ohb = oh * SH - PH
            owb = ow * SW - PW
            pbase = ohb * x_h + owb * x_w
            for j0 in tl.range(0, J, BLOCK_C, num_stages=STAGES):
                offs_j = j0 + tl.arange(0, BLOCK_C)
                cj = offs_j // RS
                rj = (offs_j // KS) % KR
                sj = offs_j % KS
                jm = offs_j < J
                xm = jm[:, None] & pm0[None, :]
                if CHECK_H:
                    ih = ohb[None, :] + (rj * DH)[:, None]
                    xm = xm & (ih >= 0) & (ih < H)
                if CHECK_W:
                    iw = owb[None, :] + (sj * DW)[:, None]
                    xm = xm & (iw >= 0) & (iw < W)
                jaddr = cj * x_c + rj * (DH * x_h) + sj * (DW * x_w)
                b = tl.load(xb + (jaddr[:, None] + pbase[None, :]), mask=xm, other=0.0)
                if FLAT_W:
                    waddr = offs_j
                else:
                    waddr = cj * w_c + rj * w_r + sj * w_s
                a = tl.load(w + (offs_k[:, None] * w_k + waddr[None, :]),
                            mask=km[:, None] & jm[None, :], other=0.0)
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
        else:
            for i in tl.range(0, KR * KS * CB, num_stages=STAGES):
                t = i // CB
                c0 = (i % CB) * BLOCK_C
                offs_c = c0 + tl.arange(0, BLOCK_C)
                if FLAT_X:  # 1x1, stride 1, no padding, positions contiguous in x
                    paddr = offs_p
                    pm = pm0
                else:
                    rr = t // KS
                    ss = t % KS
                    ih = oh * SH - PH + rr * DH
                    iw = ow * SW - PW + ss * DW
                    pm = pm0
                    if CHECK_H:
                        pm = pm & (ih >= 0) & (ih < H)
                    if CHECK_W:
                        pm = pm & (iw >= 0) & (iw < W)
                    paddr = ih * x_h + iw * x_w
                wt = w + (t // KS) * w_r + (t % KS) * w_s
                if EVEN_C:
                    a = tl.load(wt + (offs_k[:, None] * w_k + offs_c[None, :] * w_c),
                                mask=km[:, None], other=0.0)
                    b = tl.load(xb + (offs_c[:, None] * x_c + paddr[None, :]),
                                mask=pm[None, :], other=0.0)
                else:
                    cm = offs_c < C
                    a = tl.load(wt + (offs_k[:, None] * w_k + offs_c[None, :] * w_c),
                                mask=km[:, None] & cm[None, :], other=0.0)
                    b = tl.load(xb + (offs_c[:, None] * x_c + paddr[None, :]),
                                mask=cm[:, None] & pm[None, :], other=0.0)
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
        out = acc.to(y.dtype.element_ty)
        if FLAT_Y:
            yaddr = offs_p
        else:
            yaddr = oh * y_h + ow * y_w
        tl.store(y + n * y_n + (offs_k[:, None] * y_k + yaddr[None, :]), out,
                 mask=km[:, None] & pm0[None, :])

    return kp_kernel


def tap_major(w: Any) -> Any:
    """`w` (K, C, *kernel) as a view of a copy laid out (*kernel, K, C): the weight tile of one
    kernel tap is then contiguous along C, as the "k...p..." kernel reads it."""
    nd = w.dim() - 2
    order = (*range(2, 2 + nd), 0, 1)
    back = (nd, nd + 1, *range(nd))
    return w.permute(order).contiguous().permute(back)


def _as2d(t: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(N, C, H, W) sizes and strides of a 3- or 4-dim tensor. 1D: height 1, with the stride of a
    row (never used for an address, as the height index is 0; it lets `flat_flags` see a
    contiguous 1D tensor as one)."""
    if t.dim() == 3:
        return ((int(t.shape[0]), int(t.shape[1]), 1, int(t.shape[2])),
                (int(t.stride(0)), int(t.stride(1)), int(t.shape[2]) * int(t.stride(2)),
                 int(t.stride(2))))
    if t.dim() == 4:
        return tuple(int(v) for v in t.shape), tuple(int(v) for v in t.stride())
    raise ValueError(f"convdoctor fprop kernel: a {t.dim()}-dim tensor (expected 3 or 4)")


def run(x: Any, w: Any, y: Any, *, stride: Sequence[int], pad_pre: Sequence[int],
        dilation: Sequence[int], config: str, tf32: bool = False) -> Any:
    """y = conv(x, w) for an ungrouped 1D/2D convolution, written into `y` (its shape fixes the
    output size, so asymmetric padding needs only `pad_pre`). Any strides. Returns `y`."""
    launch(x, w, y, stride=stride, pad_pre=pad_pre, dilation=dilation, config=config, tf32=tf32)
    return y


def launch(x: Any, w: Any, y: Any, *, stride: Sequence[int], pad_pre: Sequence[int],
           dilation: Sequence[int], config: str, tf32: bool = False) -> Any:
    """`run`, returning what Triton's launch returns (on a GPU, the compiled kernel: its `.asm`
    holds the PTX, for `lab/fp_probe.py`)."""
    why = unavailable()
    if why is not None:
        raise RuntimeError(why)
    nd = x.dim() - 2
    if nd not in (1, 2) or w.dim() != x.dim() or y.dim() != x.dim():
        raise ValueError("convdoctor fprop kernel: 1D or 2D tensors of one rank")
    (st, pp, dl) = geometry(nd, stride, pad_pre, dilation, "convdoctor fprop kernel")
    xs, xst = _as2d(x)
    ws, wst = _as2d(w)
    ys, yst = _as2d(y)
    n, c, h, wd = xs
    k, wc, kr, ks = ws
    if wc != c or ys[0] != n or ys[1] != k:
        raise ValueError(f"convdoctor fprop kernel: x {tuple(x.shape)}, w {tuple(w.shape)} and "
                         f"y {tuple(y.shape)} do not fit (ungrouped only)")
    if x.dtype != w.dtype or x.dtype != y.dtype:
        raise ValueError("convdoctor fprop kernel: x, w and y must share a dtype")
    if str(x.dtype).replace("torch.", "") not in ("float32", *HALF):
        raise ValueError(f"convdoctor fprop kernel: {x.dtype} (float32, float16 or bfloat16 "
                         "expected)")
    if max(_span(xs, xst), _span(ys, yst), _span(ws, wst)) >= 2 ** 31:
        raise ValueError("convdoctor fprop kernel: tensors over 2^31 elements are not handled")
    cfg = parse_config(config)
    oh, ow = ys[2], ys[3]
    prec = "tf32" if (tf32 and x.dtype.is_floating_point and x.element_size() == 4) else "ieee"
    flat_x, flat_y, flat_w = flat_flags(xs, xst, ws, wst, ys, yst, st, pp)
    grid = (-(-k // cfg.block_k), -(-(oh * ow) // cfg.block_p), n)
    if n > MAX_GRID_Z or grid[1] > MAX_GRID_Z:
        raise ValueError("convdoctor fprop kernel: batch or output plane over the grid's limit "
                         f"({MAX_GRID_Z} programs)")
    with _on_device(x):
        return _kp_kernel()[grid](x, w, y, c, h, wd, k, oh, ow, *xst, *wst, *yst, kr, ks, st[1],
                                  st[2], pp[1], pp[2], dl[1], dl[2], prec, cfg.block_k,
                                  cfg.block_p, cfg.block_c, cfg.stages, flat_x, flat_y, cfg.nat,
                                  flat_w, num_warps=cfg.warps, num_stages=cfg.stages)


def flat_flags(xs: Sequence[int], xst: Sequence[int], ws: Sequence[int], wst: Sequence[int],
               ys: Sequence[int], yst: Sequence[int], st: Sequence[int], pp: Sequence[int]
               ) -> tuple[bool, bool, bool]:
    """(FLAT_X, FLAT_Y, FLAT_W) for (N, C, H, W) sizes and strides (`_as2d`) and 3D stride and
    pad_pre triples: x's positions are its contiguous plane and the layer 1x1, stride 1, no padding
    (x read at the output position itself); y's positions are its contiguous plane; w is
    contiguous over (c, r, s). A size-1 dimension's stride never matters."""
    _, _, h, wd = xs
    _, _, kr, ks = ws
    _, _, oh, ow = ys
    flat_x = (kr == ks == 1 and st[1] == st[2] == 1 and pp[1] == pp[2] == 0 and h == oh
              and wd == ow and (wd == 1 or xst[3] == 1) and (h == 1 or xst[2] == wd))
    flat_y = (ow == 1 or yst[3] == 1) and (oh == 1 or yst[2] == ow)
    flat_w = (ks == 1 or wst[3] == 1) and (kr == 1 or wst[2] == ks) and wst[1] == kr * ks
    return flat_x, flat_y, flat_w


def offered(problem: Any) -> tuple[str, ...]:
    """The configurations offered for `problem` (`configs_for`)."""
    return configs_for(problem)


def compute(direction: str, a: Any, b: Any, out: Any, *, stride: Sequence[int],
            pad_pre: Sequence[int], dilation: Sequence[int], config: str,
            tf32: bool = False) -> Any:
    """The engine's launch: fprop (a=x, b=w) -> out=y."""
    return run(a, b, out, stride=stride, pad_pre=pad_pre, dilation=dilation, config=config,
               tf32=tf32)


# a fixed order of fp32 sums per output, no atomics: the same bits run to run
ENGINE = TritonEngine(name="triton-fp", module=__name__, prefix=PREFIX, directions=("fprop",),
                      what="forward implicit-GEMM",
                      note="forward implicit-GEMM kernel reading NCHW in place (Triton, "
                           "convdoctor.kernels.fprop), fp32 accumulation")
