"""Depthwise convolution (groups == C == K) as a direct Triton kernel: fprop and dgrad, 1D and 2D.

Why: cuDNN's depthwise engines are far from the memory roofline on the H100 (fp32 NCHW 3x3 14x14
layers run 4-7x above the time their bytes need; EfficientNet's 5x5 rows are left to PyTorch's
native kernel). A depthwise layer reads each input once and writes each output once; the weight is
tiny. One program computes a [BLOCK_C channels x BLOCK_P output positions] tile of one sample,
reading the input taps through the cache; it accumulates in fp32 whatever the dtype (fp32 inputs
are NOT rounded to TF32: the result is as exact as the strict math mode asks) and it adds in a
fixed order (deterministic, no atomics).

Both directions are one gather:
    fprop  y[n, c, o] = sum_r x[n, c, o*s - p + r*d] * w[c, r]
    dgrad dx[n, c, i] = sum_r dy[n, c, (i + p - r*d) / s] * w[c, r]   where the division is exact
so the data gradient needs no flipped weight and no scatter, at any stride. Tensors are addressed
by their strides (NCHW, channels-last or any other dense layout; Triton specialises unit strides).
`pad_post` only sets the output size, so asymmetric padding is free.

Configurations (`configs_for`, the tuner's knob): the tile shape and warp count. Candidate keys are
"triton:dw_<config>" (`PREFIX`). A strided dgrad also gets
sub-pixel configurations (suffix "s", `_subpixel_kernel`): the gather above visits every tap of
every dx position and masks those whose division is not exact (3 of 4 at stride 2); the sub-pixel
kernel walks coarse positions and, per output parity class, only the taps that reach it (decided at
compile time). An H100 measured the masked gather only (strided dgrad at 0.27-0.66 TB/s).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.triton import TritonEngine

PREFIX = "triton:dw_"

# Tile shapes. Channels-last: lanes along channels (contiguous there). NCHW: lanes along output
# positions, the block sized to the plane (`nchw_configs`), several channels per program on small
# planes so few lanes idle (a 7x7 plane fills 49 of 64).
NHWC_CONFIGS = ("c128p8w4", "c64p16w4", "c32p32w4", "c16p64w4", "c256p4w4")
_CFG_RE = re.compile(r"^c(\d+)p(\d+)w(\d+)(s?)$")
MAX_GRID_YZ = 65535


@dataclass(frozen=True)
class Config:
    block_c: int
    block_p: int
    warps: int
    # dgrad with a stride: one program per block of COARSE positions computes every output parity
    # class with only the taps that reach it (suffix "s"), instead of masking the others
    subpixel: bool = False

    @property
    def name(self) -> str:
        return f"c{self.block_c}p{self.block_p}w{self.warps}" + ("s" if self.subpixel else "")


@functools.lru_cache(maxsize=256)
def parse_config(name: str) -> Config:
    """'c1p256w4' -> Config(1, 256, 4); ValueError for anything else (powers of two only)."""
    m = _CFG_RE.match(name)
    if not m:
        raise ValueError(f"not a depthwise kernel configuration: {name!r} (expected like c1p256w4)")
    bc, bp, w = (int(g) for g in m.groups()[:3])
    for v in (bc, bp, w):
        if v <= 0 or v & (v - 1):
            raise ValueError(f"{name!r}: tile sizes and warps must be powers of two")
    if bc * bp > 8192:
        raise ValueError(f"{name!r}: tile of {bc * bp} elements is too large (at most 8192)")
    return Config(bc, bp, w, subpixel=m.group(4) == "s")


def key_of(config: str) -> str:
    return PREFIX + config


def config_of(key: str) -> str | None:
    return key[len(PREFIX):] if key.startswith(PREFIX) else None


def nchw_configs(positions: int) -> tuple[str, ...]:
    """NCHW tiles for an output plane of `positions`: the plane's power of two (at most 1024)
    times 1, 2 or 4 planes' worth of channels, half that block, and the generic c1p256w4."""
    bp = 1
    while bp < min(max(int(positions), 1), 1024):
        bp *= 2
    bp = max(bp, 32)
    out: list[str] = []
    for total, warps in ((256, 4), (512, 4), (1024, 8)):
        out.append(f"c{max(1, total // bp)}p{bp}w{warps}")
    out += [f"c1p{max(32, bp // 2)}w4", "c1p256w4"]
    return tuple(dict.fromkeys(out))


def configs_for(layout: str, positions: int, coarse: int | None = None) -> tuple[str, ...]:
    """The configurations offered for a problem of `layout` ("nchw" or "nhwc") whose kernel writes
    planes of `positions` elements (fprop: the output's, dgrad: the input's). A strided dgrad
    (`coarse`: its plane's positions divided by the strides, rounded up) also gets the sub-pixel
    variants, tiled for the coarse plane."""
    base = NHWC_CONFIGS if layout == "nhwc" else nchw_configs(positions)
    if coarse is None:
        return base
    sub = NHWC_CONFIGS if layout == "nhwc" else nchw_configs(coarse)
    return base + tuple(c + "s" for c in sub)


def eligible(direction: str, ndim: int, c: int, k: int, groups: int, n: int = 1) -> str | None:
    """None when the kernel runs this problem, else why not."""
    if direction not in ("fprop", "dgrad"):
        return f"{direction}: the depthwise kernel runs fprop and dgrad only"
    if ndim not in (1, 2):
        return f"{ndim}D: the depthwise kernel runs 1D and 2D convolutions only"
    if not (groups == c == k) or groups < 2:
        return "not depthwise (needs groups == C == K)"
    if n > MAX_GRID_YZ:
        return f"batch {n} is above {MAX_GRID_YZ} (one grid axis per sample)"
    if c > MAX_GRID_YZ:
        return f"{c} channels is above {MAX_GRID_YZ} (a grid axis of channel blocks)"
    return None


def unfit(problem: Any) -> str | None:
    """`eligible` for a `ConvProblem` (None: the kernel runs it)."""
    return eligible(problem.direction, problem.ndim, problem.c, problem.k, problem.groups,
                    problem.n)


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """None when Triton can run here, else why not (checked once per process)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of every caller
        return "PyTorch is not installed"
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        return f"Triton is not importable ({type(exc).__name__}: {exc})"[:200]
    import os

    if os.environ.get("TRITON_INTERPRET") == "1":
        return None  # the interpreter runs on CPU tensors (tests)
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


@functools.lru_cache(maxsize=1)
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def dw_kernel(src, w, dst,
                  C: tl.constexpr, IH: tl.constexpr, IW: tl.constexpr,
                  OH: tl.constexpr, OW: tl.constexpr,
                  s_n: tl.constexpr, s_c: tl.constexpr, s_h: tl.constexpr, s_w: tl.constexpr,
                  d_n: tl.constexpr, d_c: tl.constexpr, d_h: tl.constexpr, d_w: tl.constexpr,
                  w_c: tl.constexpr, w_h: tl.constexpr, w_w: tl.constexpr,
                  KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                  PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                  DGRAD: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr,
                  WIDE: tl.constexpr):
        # src: the input of the pass (x for fprop, dy for dgrad), dims IH x IW
        # dst: its output (y for fprop, dx for dgrad), dims OH x OW
        # Every size and stride is a compile-time constant: a tap's address is the position's
        # address plus a constant, and its bounds test is one row test and one column test.
        # Offsets inside one sample are 32-bit unless WIDE (the sample index is always 64-bit).
        pid_p = tl.program_id(0)
        pid_c = tl.program_id(1)
        n = tl.program_id(2).to(tl.int64)
        offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
        offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
        pm = offs_p < OH * OW
        cm = offs_c < C
        if WIDE:  # a sample spans 2^31 elements or more: positions in 64 bits
            offs_p = offs_p.to(tl.int64)
        oh = offs_p // OW
        ow = offs_p % OW
        src_base = src + n * s_n + offs_c.to(tl.int64)[:, None] * s_c
        acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)
        for r in tl.static_range(KH):
            if DGRAD:
                # dy row (i + p - r*d) / s, exact division only; shifted to stay non-negative
                th = oh + (PH - r * DH + SH * KH * DH)
                ih = th // SH - KH * DH
                ok_h = (ih >= 0) & (ih < IH)
                if SH > 1:
                    ok_h = ok_h & ((th % SH) == 0)
            else:
                ih = oh * SH + (r * DH - PH)
                ok_h = (ih >= 0) & (ih < IH)
            row = ih * s_h
            for s in tl.static_range(KW):
                if DGRAD:
                    tw = ow + (PW - s * DW + SW * KW * DW)
                    iw = tw // SW - KW * DW
                    ok = ok_h & (iw >= 0) & (iw < IW)
                    if SW > 1:
                        ok = ok & ((tw % SW) == 0)
                else:
                    iw = ow * SW + (s * DW - PW)
                    ok = ok_h & (iw >= 0) & (iw < IW)
                m = cm[:, None] & (pm & ok)[None, :]
                v = tl.load(src_base + (row + iw * s_w)[None, :], mask=m, other=0.0)
                wv = tl.load(w + offs_c * w_c + (r * w_h + s * w_w), mask=cm, other=0.0)
                acc += v.to(tl.float32) * wv.to(tl.float32)[:, None]
        dptr = dst + n * d_n + offs_c.to(tl.int64)[:, None] * d_c + (oh * d_h + ow * d_w)[None, :]
        tl.store(dptr, acc.to(dst.dtype.element_ty), mask=cm[:, None] & pm[None, :])

    return dw_kernel


@functools.lru_cache(maxsize=1)
def _subpixel_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def dw_dgrad_subpixel(src, w, dst,
                          C: tl.constexpr, IH: tl.constexpr, IW: tl.constexpr,
                          OH: tl.constexpr, OW: tl.constexpr, JH: tl.constexpr, JW: tl.constexpr,
                          s_n: tl.constexpr, s_c: tl.constexpr, s_h: tl.constexpr,
                          s_w: tl.constexpr, d_n: tl.constexpr, d_c: tl.constexpr,
                          d_h: tl.constexpr, d_w: tl.constexpr,
                          w_c: tl.constexpr, w_h: tl.constexpr, w_w: tl.constexpr,
                          KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                          PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                          BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr, WIDE: tl.constexpr):
        # dgrad only. src = dy (IH x IW), dst = dx (OH x OW). A coarse position (jh, jw) stands
        # for the dx positions (jh*SH + qh, jw*SW + qw) of every parity (qh, qw); tap r reaches
        # parity qh only when (qh + PH - r*DH) is a multiple of SH - decided at compile time - and
        # then reads dy row jh + (qh + PH - r*DH) / SH. No tap is visited to be masked off.
        pid_p = tl.program_id(0)
        pid_c = tl.program_id(1)
        n = tl.program_id(2).to(tl.int64)
        offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
        offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
        pm = offs_p < JH * JW
        cm = offs_c < C
        if WIDE:
            offs_p = offs_p.to(tl.int64)
        jh = offs_p // JW
        jw = offs_p % JW
        src_base = src + n * s_n + offs_c.to(tl.int64)[:, None] * s_c
        dst_base = dst + n * d_n + offs_c.to(tl.int64)[:, None] * d_c
        for qh in tl.static_range(SH):
            for qw in tl.static_range(SW):
                acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)
                for r in tl.static_range(KH):
                    if (qh + PH - r * DH) % SH == 0:
                        ih = jh + (qh + PH - r * DH) // SH
                        ok_h = (ih >= 0) & (ih < IH)
                        row = ih * s_h
                        for s in tl.static_range(KW):
                            if (qw + PW - s * DW) % SW == 0:
                                iw = jw + (qw + PW - s * DW) // SW
                                ok = ok_h & (iw >= 0) & (iw < IW)
                                m = cm[:, None] & (pm & ok)[None, :]
                                v = tl.load(src_base + (row + iw * s_w)[None, :], mask=m,
                                            other=0.0)
                                wv = tl.load(w + offs_c * w_c + (r * w_h + s * w_w), mask=cm,
                                             other=0.0)
                                acc += v.to(tl.float32) * wv.to(tl.float32)[:, None]
                oh = jh * SH + qh
                ow = jw * SW + qw
                om = pm & (oh < OH) & (ow < OW)
                tl.store(dst_base + (oh * d_h + ow * d_w)[None, :],
                         acc.to(dst.dtype.element_ty), mask=cm[:, None] & om[None, :])

    return dw_dgrad_subpixel


def _as2d(t: Any) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """(N, C, H, W) sizes and strides of a 3-dim (1D conv: H = 1) or 4-dim tensor."""
    if t.dim() == 3:
        n, c, w = t.shape
        sn, sc, sw = t.stride()
        return (n, c, 1, w), (sn, sc, 0, sw)
    if t.dim() == 4:
        return tuple(t.shape), tuple(t.stride())  # type: ignore[return-value]
    raise ValueError(f"depthwise kernel: a {t.dim()}-dim tensor (expected 3 or 4)")


def sample_span(sizes: Sequence[int], strides: Sequence[int]) -> int:
    """Elements one sample's addresses span: 1 + the largest offset inside a sample."""
    return 1 + sum((int(n) - 1) * abs(int(s)) for n, s in zip(sizes[1:], strides[1:], strict=True))


def run(direction: str, src: Any, weight: Any, dst: Any, *, stride: Sequence[int],
        pad_pre: Sequence[int], dilation: Sequence[int], config: str,
        wide: bool | None = None) -> Any:
    """Compute `dst` (fprop: y from x = `src`; dgrad: dx from dy = `src`) in place and return it.

    `weight` is the depthwise weight (C, 1, *kernel). `dst` must be allocated with the output's
    shape (for dgrad: the forward input's shape); both may be in any dense layout."""
    cfg = parse_config(config)
    (n, c, ih, iw), (s_n, s_c, s_h, s_w) = _as2d(src)
    (dn, dc, oh, ow), (d_n, d_c, d_h, d_w) = _as2d(dst)
    if (dn, dc) != (n, c) or weight.shape[0] != c or weight.shape[1] != 1:
        raise ValueError("depthwise kernel: src, dst and weight disagree on N or C "
                         f"(src {tuple(src.shape)}, dst {tuple(dst.shape)}, "
                         f"weight {tuple(weight.shape)})")
    nd = src.dim() - 2
    ws = weight.stride()
    if nd == 1:
        kh, kw = 1, int(weight.shape[2])
        w_c, w_h, w_w = ws[0], 0, ws[2]
        (sh, sw), (ph, pw), (dh, dw) = (1, int(stride[0])), (0, int(pad_pre[0])), (1, int(dilation[0]))
    else:
        kh, kw = int(weight.shape[2]), int(weight.shape[3])
        w_c, w_h, w_w = ws[0], ws[2], ws[3]
        sh, sw = (int(v) for v in stride)
        ph, pw = (int(v) for v in pad_pre)
        dh, dw = (int(v) for v in dilation)
    if n > MAX_GRID_YZ:
        raise ValueError(f"depthwise kernel: batch {n} above {MAX_GRID_YZ}")
    if c > MAX_GRID_YZ:
        raise ValueError(f"depthwise kernel: {c} channels above {MAX_GRID_YZ}")
    if wide is None:  # 64-bit offsets only where a sample needs them (`wide`: force, for tests)
        wide = max(sample_span(src.shape, src.stride()), sample_span(dst.shape, dst.stride()),
                   oh * ow + cfg.block_p) >= 2**31
    if cfg.subpixel:
        if direction != "dgrad":
            raise ValueError(f"{config}: sub-pixel configurations run dgrad only")
        jh, jw = -(-oh // sh), -(-ow // sw)
        grid = ((jh * jw + cfg.block_p - 1) // cfg.block_p, (c + cfg.block_c - 1) // cfg.block_c,
                n)
        with _on_device(src):
            _subpixel_kernel()[grid](
                src, weight, dst, C=c, IH=ih, IW=iw, OH=oh, OW=ow, JH=jh, JW=jw,
                s_n=s_n, s_c=s_c, s_h=s_h, s_w=s_w, d_n=d_n, d_c=d_c, d_h=d_h, d_w=d_w,
                w_c=w_c, w_h=w_h, w_w=w_w, KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh,
                DW=dw, BLOCK_C=cfg.block_c, BLOCK_P=cfg.block_p, WIDE=bool(wide),
                num_warps=cfg.warps)
        return dst
    grid = ((oh * ow + cfg.block_p - 1) // cfg.block_p, (c + cfg.block_c - 1) // cfg.block_c, n)
    with _on_device(src):
        _kernel()[grid](src, weight, dst, C=c, IH=ih, IW=iw, OH=oh, OW=ow,
                        s_n=s_n, s_c=s_c, s_h=s_h, s_w=s_w, d_n=d_n, d_c=d_c, d_h=d_h, d_w=d_w,
                        w_c=w_c, w_h=w_h, w_w=w_w, KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw,
                        DH=dh, DW=dw, DGRAD=direction == "dgrad", BLOCK_C=cfg.block_c,
                        BLOCK_P=cfg.block_p, WIDE=bool(wide), num_warps=cfg.warps)
    return dst


def _on_device(t: Any) -> Any:
    """Triton launches on the CURRENT device and its stream: make it the tensor's."""
    import contextlib

    import torch

    # only where it differs: the common case launches exactly as measured
    if getattr(t, "is_cuda", False) and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


def fprop(x: Any, weight: Any, *, stride: Sequence[int], pad_pre: Sequence[int],
          pad_post: Sequence[int], dilation: Sequence[int], config: str, out: Any = None) -> Any:
    """y = depthwise conv(x, weight); allocates `out` (x's memory format) when not given."""
    import torch

    if out is None:
        sizes = [(int(x.shape[2 + i]) + int(pad_pre[i]) + int(pad_post[i])
                  - int(dilation[i]) * (int(weight.shape[2 + i]) - 1) - 1) // int(stride[i]) + 1
                 for i in range(x.dim() - 2)]
        out = torch.empty((x.shape[0], weight.shape[0], *sizes), dtype=x.dtype, device=x.device,
                          memory_format=format_of(x))
    return run("fprop", x, weight, out, stride=stride, pad_pre=pad_pre, dilation=dilation,
               config=config)


def dgrad(dy: Any, weight: Any, input_size: Sequence[int], *, stride: Sequence[int],
          pad_pre: Sequence[int], dilation: Sequence[int], config: str, out: Any = None) -> Any:
    """dx of a depthwise conv of an input of `input_size` (N, C, *spatial); allocates `out`
    (dy's memory format) when not given."""
    import torch

    if out is None:
        out = torch.empty(tuple(int(v) for v in input_size), dtype=dy.dtype, device=dy.device,
                          memory_format=format_of(dy))
    return run("dgrad", dy, weight, out, stride=stride, pad_pre=pad_pre, dilation=dilation,
               config=config)


def format_of(t: Any) -> Any:
    """The memory format `t` is dense in: channels-last (4-dim) or channels-last-3d (5-dim) where
    it is that and not contiguous, else contiguous."""
    import torch

    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if t.dim() == 5 and not t.is_contiguous() and t.is_contiguous(
            memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.contiguous_format


def offered(problem: Any) -> tuple[str, ...]:
    """The configurations offered for `problem` (none when the kernel does not run it: not
    depthwise, wgrad, 3D, or a batch over the grid's limit)."""
    import math

    if unfit(problem) is not None:
        return ()
    # the kernel writes planes of the output (fprop) or of the input (dgrad)
    plane = problem.out_spatial() if problem.direction == "fprop" else problem.spatial
    coarse = None
    if problem.direction == "dgrad" and any(s > 1 for s in problem.stride):
        coarse = math.prod(-(-n // s) for n, s in zip(problem.spatial, problem.stride, strict=True))
    return configs_for(problem.layout, math.prod(plane), coarse)


def compute(direction: str, a: Any, b: Any, out: Any, *, stride: Sequence[int],
            pad_pre: Sequence[int], dilation: Sequence[int], config: str,
            tf32: bool = False) -> Any:
    """The engine's launch: fprop (a=x, b=w) -> out=y, dgrad (a=dy, b=w) -> out=dx (no TF32)."""
    return run(direction, a, b, out, stride=stride, pad_pre=pad_pre, dilation=dilation,
               config=config)


# a fixed order of fp32 adds, no atomics: the same bits run to run
ENGINE = TritonEngine(name="triton-dw", module=__name__, prefix=PREFIX,
                      directions=("fprop", "dgrad"), what="depthwise",
                      note="depthwise direct kernel (Triton, convdoctor.kernels.depthwise), fp32 "
                           "accumulation")
