"""Data gradient (dgrad) of an ungrouped convolution whose input has few channels (C <= 4), as a
direct Triton gather kernel, 1D, 2D and 3D.

Why: first layers (C = 1 or 3, K = 32..64) get slow dgrad engines from cuDNN on the H100, 0.03 to
0.7 TB/s (fp32 NCHW: UNet3D enc1, n=2 c=1 k=32 64^3 3x3x3 pad 1, 158 us; ResNet-50 conv1, c=3
k=64 7x7 stride 2 pad 3 on 224x224 n=32, 533 us; DeepSpeech2 conv1, c=1 k=32 41x11 stride 2,
1.1 ms), while reading dy once and writing dx once needs about a tenth of that. With so few input
channels dx is small: the pass is a reduction of dy over its K channels and the kernel's taps.

    dx[n, c, id, ih, iw] = sum_k sum_{t,r,s} dy[n, k, od, oh, ow] * w[k, c, t, r, s]
    where od = (id + PD - t*DD) / SD is an exact non-negative integer < OD (so for h and w)

(x: (N, C, D, H, W), w: (K, C, T, R, S), dy: (N, K, OD, OH, OW); stride S*, pad_pre P*,
dilation D*). A gather, not a scatter: no flipped weight, no atomics, any stride.

Design: one program computes dx for BLOCK_P input positions of one sample and every channel c (C
is folded into the program, padded to a power of two: each dy element loaded serves all C
products). It loops over K in blocks of BLOCK_K and, inside, over the kernel's rows (t, r) - a
dynamic loop, fully unrolled by the compiler for small kernels (`UNROLL_TAPS`) - and its columns s
(unrolled): it loads the dy tile [BLOCK_K, BLOCK_P] that the tap reaches (masked where the position
falls outside dy or, at a stride, where the division is not exact) and the weight w[k, :, t, r, s]
[BLOCK_K, BLOCK_C], and adds their product summed over k to the fp32 accumulator [BLOCK_C,
BLOCK_P]. fp32 accumulation whatever the dtype (fp32 inputs are not rounded to TF32), fixed order
(deterministic). Every size and stride is a compile-time constant; tensors are addressed by their
strides (NCHW, channels-last or any other dense layout); offsets inside a sample are 32-bit unless
WIDE. 1D and 2D problems are 3D ones with unit leading spatial dimensions (`wgrad._as3d`);
`pad_post` only sets dy's size, so asymmetric padding is free.

A strided dgrad masks (SD*SH*SW - 1) of every SD*SH*SW taps in that gather. The sub-pixel
configurations (suffix "s", `_subpixel_kernel`, as in `depthwise`) walk coarse positions instead
and, per output parity class, visit only the rows and columns that reach it.

Configurations (`configs_for`): "k<BLOCK_K>p<BLOCK_P>w<warps>[s]", candidate keys
"triton:sc_<config>" (`PREFIX`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .depthwise import _on_device, format_of, sample_span
from .wgrad import _as3d

PREFIX = "triton:sc_"
MAX_C = 4
MAX_GRID_Y = 65535
# Kernels of at most this many taps get their row loop fully unrolled (the loop stays dynamic for
# larger ones, e.g. DeepSpeech2's 41x11: compile time).
UNROLL_TAPS = 64
CONFIGS = ("k8p256w4", "k16p128w4", "k32p128w4", "k16p512w8", "k4p512w4")
_CFG_RE = re.compile(r"^k(\d+)p(\d+)w(\d+)(s?)$")
_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Config:
    block_k: int
    block_p: int
    warps: int
    # strided dgrad: programs over COARSE positions, each output parity class with only the taps
    # that reach it (suffix "s"), instead of masking the others
    subpixel: bool = False

    @property
    def name(self) -> str:
        return f"k{self.block_k}p{self.block_p}w{self.warps}" + ("s" if self.subpixel else "")


@functools.lru_cache(maxsize=256)
def parse_config(name: str) -> Config:
    """'k16p256w4' -> Config(16, 256, 4); ValueError for anything else (powers of two only)."""
    m = _CFG_RE.match(name)
    if not m:
        raise ValueError(f"not a small-C dgrad kernel configuration: {name!r} "
                         "(expected like k16p256w4)")
    bk, bp, w = (int(g) for g in m.groups()[:3])
    for v in (bk, bp, w):
        if v <= 0 or v & (v - 1):
            raise ValueError(f"{name!r}: tile sizes and warps must be powers of two")
    if bk * bp > 8192:
        raise ValueError(f"{name!r}: tile of {bk * bp} elements is too large (at most 8192)")
    if w > 16:
        raise ValueError(f"{name!r}: at most 16 warps")
    return Config(bk, bp, w, subpixel=m.group(4) == "s")


def key_of(config: str) -> str:
    return PREFIX + config


def config_of(key: str) -> str | None:
    return key[len(PREFIX):] if key.startswith(PREFIX) else None


def configs_for(k: int, strided: bool = False) -> tuple[str, ...]:
    """The configurations offered for a problem of `k` output channels: `CONFIGS` less those whose
    K block is above K's power of two (all lanes of it would idle); a strided problem
    (`strided`) also gets their sub-pixel variants."""
    p2 = 1
    while p2 < max(int(k), 1):
        p2 *= 2
    base = tuple(c for c in CONFIGS if parse_config(c).block_k <= max(p2, 4))
    return base + tuple(c + "s" for c in base) if strided else base


def eligible(direction: str, ndim: int, c: int, k: int, groups: int, dtype: str = "float32",
             n: int = 1) -> str | None:
    """None when the kernel runs (and is offered for) this problem, else why not."""
    if direction != "dgrad":
        return f"{direction}: the small-C kernel computes data gradients only"
    if ndim not in (1, 2, 3):
        return f"{ndim}D: the small-C kernel runs 1D, 2D and 3D convolutions"
    if groups != 1:
        return "grouped: the small-C kernel runs ungrouped convolutions only"
    if c > MAX_C:
        return f"{c} input channels (the small-C kernel runs at most {MAX_C})"
    if dtype not in _DTYPES:
        return f"{dtype}: the small-C kernel runs float32, float16 and bfloat16"
    if n > MAX_GRID_Y:
        return f"batch {n} is above {MAX_GRID_Y} (one grid axis per sample)"
    if k < 1 or c < 1:
        return "no channels"
    return None


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """None when Triton can run here, else why not (checked once per process)."""
    from .depthwise import unavailable as dw_unavailable

    return dw_unavailable()


@functools.lru_cache(maxsize=1)
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def sc_kernel(dy, w, dx,
                  K: tl.constexpr, C: tl.constexpr, D: tl.constexpr, H: tl.constexpr,
                  W: tl.constexpr, OD: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
                  y_n: tl.constexpr, y_k: tl.constexpr, y_d: tl.constexpr, y_h: tl.constexpr,
                  y_w: tl.constexpr, x_n: tl.constexpr, x_c: tl.constexpr, x_d: tl.constexpr,
                  x_h: tl.constexpr, x_w: tl.constexpr, w_k: tl.constexpr, w_c: tl.constexpr,
                  w_t: tl.constexpr, w_r: tl.constexpr, w_s: tl.constexpr,
                  T: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                  SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                  PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                  DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                  BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr,
                  UNROLL: tl.constexpr, WIDE: tl.constexpr):
        # One program: BLOCK_P dx positions of sample n, all C channels. dy position of tap t
        # along depth: od = (id + PD - t*DD) / SD, exact division only; shifted by SD*T*DD to
        # stay non-negative before dividing (integer division truncates).
        pid_p = tl.program_id(0)
        n = tl.program_id(1).to(tl.int64)
        offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
        pm = offs_p < D * H * W
        if WIDE:  # a sample spans 2^31 elements or more: positions in 64 bits
            offs_p = offs_p.to(tl.int64)
        i_d = offs_p // (H * W)
        i_h = (offs_p // W) % H
        i_w = offs_p % W
        offs_c = tl.arange(0, BLOCK_C)
        cm = offs_c < C
        # a unit depth (1D and 2D problems) needs no depth test
        FLAT_D: tl.constexpr = D == 1 and OD == 1 and T == 1 and PD == 0
        dy_n = dy + n * y_n
        acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            km = offs_k < K
            if WIDE:
                k_off = offs_k.to(tl.int64) * y_k
            else:
                k_off = offs_k * y_k
            w_kc = w + offs_k[:, None] * w_k + offs_c[None, :] * w_c
            wm = km[:, None] & cm[None, :]
            for tr in tl.range(0, T * R, loop_unroll_factor=UNROLL):
                t = tr // R
                r = tr % R
                if SD == 1:
                    o_d = i_d + (PD - t * DD)
                    ok = pm
                    if not FLAT_D:
                        ok = ok & (o_d >= 0) & (o_d < OD)
                else:
                    e_d = i_d + (PD + SD * T * DD - t * DD)
                    o_d = e_d // SD - T * DD
                    ok = pm & (o_d >= 0) & (o_d < OD) & ((e_d % SD) == 0)
                if SH == 1:
                    o_h = i_h + (PH - r * DH)
                    ok = ok & (o_h >= 0) & (o_h < OH)
                else:
                    e_h = i_h + (PH + SH * R * DH - r * DH)
                    o_h = e_h // SH - R * DH
                    ok = ok & (o_h >= 0) & (o_h < OH) & ((e_h % SH) == 0)
                row = o_d * y_d + o_h * y_h
                w_tr = w_kc + (t * w_t + r * w_r)
                for s in tl.static_range(S):
                    if SW == 1:
                        o_w = i_w + (PW - s * DW)
                        m = ok & (o_w >= 0) & (o_w < OW)
                    else:
                        e_w = i_w + (PW + SW * S * DW - s * DW)
                        o_w = e_w // SW - S * DW
                        m = ok & (o_w >= 0) & (o_w < OW) & ((e_w % SW) == 0)
                    v = tl.load(dy_n + (k_off[:, None] + (row + o_w * y_w)[None, :]),
                                mask=km[:, None] & m[None, :], other=0.0)
                    wv = tl.load(w_tr + s * w_s, mask=wm, other=0.0)
                    acc += tl.sum(v.to(tl.float32)[:, None, :] * wv.to(tl.float32)[:, :, None],
                                  axis=0)
        dptr = (dx + n * x_n + offs_c[:, None] * x_c
                + (i_d * x_d + i_h * x_h + i_w * x_w)[None, :])
        tl.store(dptr, acc.to(dx.dtype.element_ty), mask=cm[:, None] & pm[None, :])

    return sc_kernel


@functools.lru_cache(maxsize=1)
def _subpixel_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def sc_subpixel(dy, w, dx,
                    K: tl.constexpr, C: tl.constexpr, D: tl.constexpr, H: tl.constexpr,
                    W: tl.constexpr, OD: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
                    JD: tl.constexpr, JH: tl.constexpr, JW: tl.constexpr,
                    y_n: tl.constexpr, y_k: tl.constexpr, y_d: tl.constexpr, y_h: tl.constexpr,
                    y_w: tl.constexpr, x_n: tl.constexpr, x_c: tl.constexpr, x_d: tl.constexpr,
                    x_h: tl.constexpr, x_w: tl.constexpr, w_k: tl.constexpr, w_c: tl.constexpr,
                    w_t: tl.constexpr, w_r: tl.constexpr, w_s: tl.constexpr,
                    T: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                    SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                    PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                    DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr,
                    UNROLL: tl.constexpr, WIDE: tl.constexpr):
        # A coarse position (jd, jh, jw) stands for the dx positions (jd*SD + qd, ...) of every
        # parity (qd, qh, qw). Row (t, r) reaches parity (qd, qh) only when qd + PD - t*DD is a
        # multiple of SD (and so for h) - a scalar test per row, folded away where the row loop
        # is unrolled - and then reads dy depth jd + (qd + PD - t*DD) / SD; column s reaches qw
        # only when qw + PW - s*DW is a multiple of SW (decided at compile time).
        pid_p = tl.program_id(0)
        n = tl.program_id(1).to(tl.int64)
        offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
        pm = offs_p < JD * JH * JW
        if WIDE:
            offs_p = offs_p.to(tl.int64)
        j_d = offs_p // (JH * JW)
        j_h = (offs_p // JW) % JH
        j_w = offs_p % JW
        offs_c = tl.arange(0, BLOCK_C)
        cm = offs_c < C
        dy_n = dy + n * y_n
        dx_n = dx + n * x_n + offs_c[:, None] * x_c
        for qd in tl.static_range(SD):
            for qh in tl.static_range(SH):
                for qw in tl.static_range(SW):
                    acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)
                    for k0 in range(0, K, BLOCK_K):
                        offs_k = k0 + tl.arange(0, BLOCK_K)
                        km = offs_k < K
                        if WIDE:
                            k_off = offs_k.to(tl.int64) * y_k
                        else:
                            k_off = offs_k * y_k
                        w_kc = w + offs_k[:, None] * w_k + offs_c[None, :] * w_c
                        wm = km[:, None] & cm[None, :]
                        for tr in tl.range(0, T * R, loop_unroll_factor=UNROLL):
                            t = tr // R
                            r = tr % R
                            e_d = qd + PD - t * DD
                            e_h = qh + PH - r * DH
                            if ((e_d % SD) == 0) & ((e_h % SH) == 0):
                                # exact: truncating division is floor division here
                                o_d = j_d + e_d // SD
                                o_h = j_h + e_h // SH
                                ok = pm & (o_d >= 0) & (o_d < OD) & (o_h >= 0) & (o_h < OH)
                                row = o_d * y_d + o_h * y_h
                                w_tr = w_kc + (t * w_t + r * w_r)
                                for s in tl.static_range(S):
                                    if (qw + PW - s * DW) % SW == 0:
                                        o_w = j_w + (qw + PW - s * DW) // SW
                                        m = ok & (o_w >= 0) & (o_w < OW)
                                        v = tl.load(dy_n + (k_off[:, None]
                                                            + (row + o_w * y_w)[None, :]),
                                                    mask=km[:, None] & m[None, :], other=0.0)
                                        wv = tl.load(w_tr + s * w_s, mask=wm, other=0.0)
                                        acc += tl.sum(v.to(tl.float32)[:, None, :]
                                                      * wv.to(tl.float32)[:, :, None], axis=0)
                    i_d = j_d * SD + qd
                    i_h = j_h * SH + qh
                    i_w = j_w * SW + qw
                    om = pm & (i_d < D) & (i_h < H) & (i_w < W)
                    tl.store(dx_n + (i_d * x_d + i_h * x_h + i_w * x_w)[None, :],
                             acc.to(dx.dtype.element_ty), mask=cm[:, None] & om[None, :])

    return sc_subpixel


def _triple(v: Sequence[int], nd: int, fill: int, what: str) -> tuple[int, int, int]:
    vals = tuple(int(x) for x in v)
    if len(vals) != nd:
        raise ValueError(f"small-C kernel: {what} {vals} has {len(vals)} values for a {nd}D "
                         "convolution")
    out = (fill,) * (3 - nd) + vals
    return out[0], out[1], out[2]


def run(dy: Any, w: Any, dx: Any, *, stride: Sequence[int], pad_pre: Sequence[int],
        dilation: Sequence[int], config: str, wide: bool | None = None) -> Any:
    """Compute `dx` (N, C, *spatial) in place from the output gradient `dy` (N, K, *out) and the
    weight `w` (K, C, *kernel) and return it. Any dense layout; `wide`: force (or forbid) 64-bit
    offsets inside a sample (default: where a sample needs them)."""
    cfg = parse_config(config)
    if not (dy.dim() == w.dim() == dx.dim()) or dy.dim() not in (3, 4, 5):
        raise ValueError(f"small-C kernel: dy {tuple(dy.shape)}, w {tuple(w.shape)} and dx "
                         f"{tuple(dx.shape)} must all have 3, 4 or 5 dims")
    nd = dy.dim() - 2
    (n, k, od, oh, ow), ys = _as3d(dy)
    (k2, c, kt, kr, ks), ws = _as3d(w)
    (n2, c2, d, h, wd), xs = _as3d(dx)
    if n2 != n or k2 != k or c2 != c:
        raise ValueError(f"small-C kernel: dy {tuple(dy.shape)}, w {tuple(w.shape)} and dx "
                         f"{tuple(dx.shape)} disagree on N, K or C")
    if c > MAX_C:
        raise ValueError(f"small-C kernel: {c} input channels (at most {MAX_C})")
    if not (dy.dtype == w.dtype == dx.dtype):
        raise ValueError(f"small-C kernel: dy is {dy.dtype}, w is {w.dtype}, dx is {dx.dtype} "
                         "(one dtype expected)")
    if str(dy.dtype).replace("torch.", "") not in _DTYPES:
        raise ValueError(f"small-C kernel: {dy.dtype} (float32, float16 or bfloat16 expected)")
    if n > MAX_GRID_Y:
        raise ValueError(f"small-C kernel: batch {n} above {MAX_GRID_Y}")
    sd, sh, sw = _triple(stride, nd, 1, "stride")
    pd, ph, pw = _triple(pad_pre, nd, 0, "pad_pre")
    dd, dh, dw = _triple(dilation, nd, 1, "dilation")
    if min(sd, sh, sw, dd, dh, dw) < 1 or min(pd, ph, pw) < 0:
        raise ValueError("small-C kernel: strides and dilations must be positive, pads "
                         "non-negative")
    if min(n, k, c, d, h, wd, od, oh, ow, kt, kr, ks) < 1:
        raise ValueError("small-C kernel: an empty dimension")
    if cfg.subpixel:
        jd, jh, jw = -(-d // sd), -(-h // sh), -(-wd // sw)
        positions = jd * jh * jw
    else:
        positions = d * h * wd
    if wide is None:
        wide = max(sample_span((n, k, od, oh, ow), ys), sample_span((n, c, d, h, wd), xs),
                   d * h * wd + cfg.block_p) >= 2**31
    block_c = 1 if c == 1 else 2 if c == 2 else 4
    args = dict(K=k, C=c, D=d, H=h, W=wd, OD=od, OH=oh, OW=ow,
                y_n=ys[0], y_k=ys[1], y_d=ys[2], y_h=ys[3], y_w=ys[4],
                x_n=xs[0], x_c=xs[1], x_d=xs[2], x_h=xs[3], x_w=xs[4],
                w_k=ws[0], w_c=ws[1], w_t=ws[2], w_r=ws[3], w_s=ws[4],
                T=kt, R=kr, S=ks, SD=sd, SH=sh, SW=sw, PD=pd, PH=ph, PW=pw, DD=dd, DH=dh, DW=dw,
                BLOCK_C=block_c, BLOCK_K=cfg.block_k, BLOCK_P=cfg.block_p,
                UNROLL=kt * kr if kt * kr * ks <= UNROLL_TAPS else 1, WIDE=bool(wide),
                num_warps=cfg.warps)
    grid = (-(-positions // cfg.block_p), n)
    with _on_device(dy):
        if cfg.subpixel:
            _subpixel_kernel()[grid](dy, w, dx, JD=jd, JH=jh, JW=jw, **args)
        else:
            _kernel()[grid](dy, w, dx, **args)
    return dx


def dgrad(dy: Any, w: Any, input_size: Sequence[int], *, stride: Sequence[int],
          pad_pre: Sequence[int], dilation: Sequence[int], config: str, out: Any = None) -> Any:
    """dx of a convolution of an input of `input_size` (N, C, *spatial) with weight `w`, from the
    output gradient `dy`; allocates `out` (dy's memory format) when not given."""
    import torch

    if out is None:
        out = torch.empty(tuple(int(v) for v in input_size), dtype=dy.dtype, device=dy.device,
                          memory_format=format_of(dy))
    return run(dy, w, out, stride=stride, pad_pre=pad_pre, dilation=dilation, config=config)
