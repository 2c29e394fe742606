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
products). It loops over K in blocks of BLOCK_K and, inside, over the kernel's rows (t, r) (a
dynamic loop: compile time stays ~1 s even for DeepSpeech2's 41x11) and its columns s (unrolled):
it loads the dy tile [BLOCK_K, BLOCK_P] that the tap reaches (masked where the position falls
outside dy or, at a stride, where the division is not exact) and the weight slice [BLOCK_K,
BLOCK_C], and adds their product summed over k to the fp32 accumulator [BLOCK_C, BLOCK_P]. fp32
accumulation whatever the dtype (fp32 inputs are not rounded to TF32), fixed order
(deterministic). Every size and stride is a compile-time constant; tensors are addressed by their
strides (NCHW, channels-last or any other dense layout); offsets inside a sample are 32-bit unless
WIDE. Along a stride-1 dimension a tap's dy address is the position's own plus a scalar, so the
loads are a loop-invariant pointer vector plus a per-row scalar plus immediate offsets. The weight
is repacked per call (`pack_weight`: [taps, K padded to BLOCK_K, C padded to BLOCK_C], one small
copy) so its loads need no mask. 1D and 2D problems are 3D ones with unit leading spatial
dimensions (`wgrad._as3d`); `pad_post` only sets dy's size, so asymmetric padding is free.

A strided dgrad masks (SD*SH*SW - 1) of every SD*SH*SW taps in that gather. The sub-pixel
configurations (suffix "s", `_subpixel_kernel`, as in `depthwise`) walk coarse positions instead
and, per output parity class, visit only the rows and columns that reach it.

Configurations (`configs_for`): "k<BLOCK_K>p<BLOCK_P>w<warps>[s]", candidate keys
"triton:sc_<config>" (`PREFIX`): `CONFIGS` (masked gather) at stride 1, `SUBPIXEL_CONFIGS` at a
stride. Measured (H100, fp32 NCHW, lab/sc_probe.py, best configuration vs PyTorch's
cuDNN heuristic): Inception Conv2d_1a_3x3 139 vs 287 us and EfficientNet-B0's stem 215 vs 313 us
(wins); VGG16 conv3-64@224 367 vs 281, UNet2D enc1a 132 vs 105, UNet3D enc1 330 vs 172, ResNet-50
conv1 1189 vs 530, wav2vec2 conv0 257 vs 71, DeepSpeech2 conv1 2581 vs 1105 us (losses). The
masked gather at a stride was 4-80x slower than the sub-pixel kernel (register spills on top of
the masked taps), so strided problems get sub-pixel configurations only. Nsight Compute on UNet3D
enc1 (k4p512w4): L1 hit rate 95%, L1 throughput 90% of peak, L2 8% - bound by L1 traffic for
the repeated tap loads, not by DRAM; it counted ~15 sectors per global load request where 32
consecutive fp32 lanes need 4-5 (not explained yet: the next thing to look at).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.triton import TritonEngine
from .depthwise import _on_device, format_of, sample_span
from .depthwise import unavailable as _dw_unavailable
from .wgrad import _as3d, geometry

PREFIX = "triton:sc_"
MAX_C = 4
MAX_GRID_Y = 65535
# the fastest of a 10-configuration sweep on the suite's 8 eligible rows (module docstring)
CONFIGS = ("k4p1024w4", "k8p1024w4", "k4p512w4", "k8p512w4", "k4p1024w8")
SUBPIXEL_CONFIGS = ("k8p256w4s", "k16p256w4s", "k8p512w4s", "k4p1024w4s", "k16p512w8s")
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
    """The configurations offered for a problem of `k` output channels: `CONFIGS`, or for a
    strided problem (`strided`) `SUBPIXEL_CONFIGS`, less those whose K block is above K's power
    of two (most of its lanes would idle)."""
    p2 = 1
    while p2 < max(int(k), 1):
        p2 *= 2
    return tuple(c for c in (SUBPIXEL_CONFIGS if strided else CONFIGS)
                 if parse_config(c).block_k <= max(p2, 4))


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


def unfit(problem: Any) -> str | None:
    """`eligible` for a `ConvProblem` (None: the kernel runs it and is offered for it)."""
    return eligible(problem.direction, problem.ndim, problem.c, problem.k, problem.groups,
                    problem.dtype, problem.n)


# None when Triton can run here, else why not: one check (and one cache) for every kernel
unavailable = _dw_unavailable


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
                  x_h: tl.constexpr, x_w: tl.constexpr,
                  T: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                  SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                  PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                  DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                  BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr,
                  WIDE: tl.constexpr):
        # One program: BLOCK_P dx positions of sample n, all C channels. The dy position of tap
        # t along depth is od = (id + PD - t*DD) / SD, exact division only (shifted by SD*T*DD
        # to stay non-negative before dividing: integer division truncates). Along a stride-1
        # dimension it is id + (PD - t*DD): the position's own offset plus a per-tap scalar, so
        # a tap's addresses are a loop-invariant pointer vector plus a scalar (per row) plus a
        # constant (per column and k).
        # w: the packed weight (`pack_weight`): [taps, KP, BLOCK_C], contiguous, zero-padded.
        KP: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K * BLOCK_K
        EVEN_K: tl.constexpr = K % BLOCK_K == 0
        FLAT_D: tl.constexpr = D == 1 and OD == 1 and T == 1 and PD == 0
        pid_p = tl.program_id(0)
        n = tl.program_id(1).to(tl.int64)
        offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
        pm = offs_p < D * H * W
        offs_c = tl.arange(0, BLOCK_C)
        kk = tl.arange(0, BLOCK_K)
        if WIDE:  # a sample spans 2^31 elements or more: offsets in 64 bits
            offs_p = offs_p.to(tl.int64)
            z = tl.full([], 0, tl.int64)
            kk_y = kk.to(tl.int64) * y_k
            c_x = offs_c.to(tl.int64) * x_c
        else:
            z = 0
            kk_y = kk * y_k
            c_x = offs_c * x_c
        i_d = offs_p // (H * W)
        i_h = (offs_p // W) % H
        i_w = offs_p % W
        kc = kk[:, None] * BLOCK_C + offs_c[None, :]  # a tap's weight slice (k, c)
        base = i_w * 0
        if SD == 1:
            base += i_d * y_d
        if SH == 1:
            base += i_h * y_h
        if SW == 1:
            base += i_w * y_w
        p0 = dy + n * y_n + base
        acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            km = (k0 + kk) < K
            for tr in range(T * R):
                t = (tr + z) // R
                r = (tr + z) % R
                p_row = p0 + ((k0 + z) * y_k)
                ok = pm
                if SD == 1:
                    p_row += (PD - t * DD) * y_d
                    if not FLAT_D:
                        ok = ok & (i_d >= t * DD - PD) & (i_d < OD - PD + t * DD)
                else:
                    e_d = i_d + (PD + SD * T * DD - t * DD)
                    o_d = e_d // SD - T * DD
                    ok = ok & (o_d >= 0) & (o_d < OD) & ((e_d % SD) == 0)
                    p_row += o_d * y_d
                if SH == 1:
                    p_row += (PH - r * DH) * y_h
                    ok = ok & (i_h >= r * DH - PH) & (i_h < OH - PH + r * DH)
                else:
                    e_h = i_h + (PH + SH * R * DH - r * DH)
                    o_h = e_h // SH - R * DH
                    ok = ok & (o_h >= 0) & (o_h < OH) & ((e_h % SH) == 0)
                    p_row += o_h * y_h
                w_row = w + (tr * (S * KP * BLOCK_C) + k0 * BLOCK_C)
                for s in tl.static_range(S):
                    if SW == 1:
                        p_col = p_row + (PW - s * DW) * y_w
                        m = ok & (i_w >= s * DW - PW) & (i_w < OW - PW + s * DW)
                    else:
                        e_w = i_w + (PW + SW * S * DW - s * DW)
                        o_w = e_w // SW - S * DW
                        m = ok & (o_w >= 0) & (o_w < OW) & ((e_w % SW) == 0)
                        p_col = p_row + o_w * y_w
                    if EVEN_K:
                        mk = m[None, :]
                    else:
                        mk = km[:, None] & m[None, :]
                    v = tl.load(p_col[None, :] + kk_y[:, None], mask=mk, other=0.0)
                    wv = tl.load(w_row + (s * KP * BLOCK_C) + kc)
                    acc += tl.sum(v.to(tl.float32)[:, None, :] * wv.to(tl.float32)[:, :, None],
                                  axis=0)
        dptr = dx + n * x_n + c_x[:, None] + (i_d * x_d + i_h * x_h + i_w * x_w)[None, :]
        tl.store(dptr, acc.to(dx.dtype.element_ty), mask=(offs_c < C)[:, None] & pm[None, :])

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
                    x_h: tl.constexpr, x_w: tl.constexpr,
                    T: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                    SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                    PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                    DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr,
                    WIDE: tl.constexpr):
        # A coarse position (jd, jh, jw) stands for the dx positions (jd*SD + qd, ...) of every
        # parity (qd, qh, qw). Row (t, r) reaches parity (qd, qh) only when qd + PD - t*DD is a
        # multiple of SD (and so for h) - a scalar test per row - and then reads dy depth
        # jd + (qd + PD - t*DD) / SD; column s reaches qw only when qw + PW - s*DW is a multiple
        # of SW (decided at compile time). Every address is the coarse position's own (a
        # loop-invariant pointer vector) plus a scalar per row plus a constant per column and k.
        KP: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K * BLOCK_K
        EVEN_K: tl.constexpr = K % BLOCK_K == 0
        FLAT_D: tl.constexpr = D == 1 and OD == 1 and T == 1 and PD == 0
        pid_p = tl.program_id(0)
        n = tl.program_id(1).to(tl.int64)
        offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
        pm = offs_p < JD * JH * JW
        offs_c = tl.arange(0, BLOCK_C)
        kk = tl.arange(0, BLOCK_K)
        if WIDE:
            offs_p = offs_p.to(tl.int64)
            z = tl.full([], 0, tl.int64)
            kk_y = kk.to(tl.int64) * y_k
            c_x = offs_c.to(tl.int64) * x_c
        else:
            z = 0
            kk_y = kk * y_k
            c_x = offs_c * x_c
        j_d = offs_p // (JH * JW)
        j_h = (offs_p // JW) % JH
        j_w = offs_p % JW
        kc = kk[:, None] * BLOCK_C + offs_c[None, :]
        p0 = dy + n * y_n + (j_d * y_d + j_h * y_h + j_w * y_w)
        dx_n = dx + n * x_n + c_x[:, None]
        cm = (offs_c < C)[:, None]
        for qd in tl.static_range(SD):
            for qh in tl.static_range(SH):
                for qw in tl.static_range(SW):
                    acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)
                    for k0 in range(0, K, BLOCK_K):
                        km = (k0 + kk) < K
                        for tr in range(T * R):
                            t = (tr + z) // R
                            r = (tr + z) % R
                            e_d = qd + PD - t * DD
                            e_h = qh + PH - r * DH
                            if ((e_d % SD) == 0) & ((e_h % SH) == 0):
                                # exact: truncating division is floor division here
                                f_d = e_d // SD
                                f_h = e_h // SH
                                ok = pm & (j_h >= -f_h) & (j_h < OH - f_h)
                                if not FLAT_D:
                                    ok = ok & (j_d >= -f_d) & (j_d < OD - f_d)
                                p_row = p0 + ((k0 + z) * y_k + f_d * y_d + f_h * y_h)
                                w_row = w + (tr * (S * KP * BLOCK_C) + k0 * BLOCK_C)
                                for s in tl.static_range(S):
                                    if (qw + PW - s * DW) % SW == 0:
                                        f_w = (qw + PW - s * DW) // SW
                                        m = ok & (j_w >= -f_w) & (j_w < OW - f_w)
                                        if EVEN_K:
                                            mk = m[None, :]
                                        else:
                                            mk = km[:, None] & m[None, :]
                                        v = tl.load((p_row + f_w * y_w)[None, :] + kk_y[:, None],
                                                    mask=mk, other=0.0)
                                        wv = tl.load(w_row + (s * KP * BLOCK_C) + kc)
                                        acc += tl.sum(v.to(tl.float32)[:, None, :]
                                                      * wv.to(tl.float32)[:, :, None], axis=0)
                    i_d = j_d * SD + qd
                    i_h = j_h * SH + qh
                    i_w = j_w * SW + qw
                    om = pm & (i_d < D) & (i_h < H) & (i_w < W)
                    tl.store(dx_n + (i_d * x_d + i_h * x_h + i_w * x_w)[None, :],
                             acc.to(dx.dtype.element_ty), mask=cm & om[None, :])

    return sc_subpixel


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
    (k2, c, kt, kr, ks), _ = _as3d(w)
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
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = geometry(nd, stride, pad_pre, dilation,
                                                        "small-C kernel")
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
                T=kt, R=kr, S=ks, SD=sd, SH=sh, SW=sw, PD=pd, PH=ph, PW=pw, DD=dd, DH=dh, DW=dw,
                BLOCK_C=block_c, BLOCK_K=cfg.block_k, BLOCK_P=cfg.block_p, WIDE=bool(wide),
                num_warps=cfg.warps)
    grid = (-(-positions // cfg.block_p), n)
    with _on_device(dy):
        wp = pack_weight(w, cfg.block_k)
        if cfg.subpixel:
            _subpixel_kernel()[grid](dy, wp, dx, JD=jd, JH=jh, JW=jw, **args)
        else:
            _kernel()[grid](dy, wp, dx, **args)
    return dx


def pack_weight(w: Any, block_k: int) -> Any:
    """w (K, C, *kernel) -> contiguous (taps, KP, BLOCK_C): K padded with zeros to a multiple of
    `block_k` and C to BLOCK_C (1, 2 or 4), so a tap's [BLOCK_K, BLOCK_C] slice is one contiguous
    run at a constant offset from the row's, and no weight load needs a mask. One small copy per
    call (at most KP * 4 * taps elements)."""
    import torch.nn.functional as F

    k, c = int(w.shape[0]), int(w.shape[1])
    block_c = 1 if c == 1 else 2 if c == 2 else 4
    kp = -(-k // block_k) * block_k
    wt = w.reshape(k, c, -1).permute(2, 0, 1)
    if block_c > c or kp > k:
        return F.pad(wt, (0, block_c - c, 0, kp - k))
    return wt.contiguous()


def dgrad(dy: Any, w: Any, input_size: Sequence[int], *, stride: Sequence[int],
          pad_pre: Sequence[int], dilation: Sequence[int], config: str, out: Any = None) -> Any:
    """dx of a convolution of an input of `input_size` (N, C, *spatial) with weight `w`, from the
    output gradient `dy`; allocates `out` (dy's memory format) when not given."""
    import torch

    if out is None:
        out = torch.empty(tuple(int(v) for v in input_size), dtype=dy.dtype, device=dy.device,
                          memory_format=format_of(dy))
    return run(dy, w, out, stride=stride, pad_pre=pad_pre, dilation=dilation, config=config)


def offered(problem: Any) -> tuple[str, ...]:
    """The configurations offered for `problem` (none unless it is an ungrouped dgrad with at
    most `MAX_C` input channels; strided ones get sub-pixel configurations only)."""
    if unfit(problem) is not None:
        return ()
    return configs_for(problem.k, strided=any(s > 1 for s in problem.stride))


def compute(direction: str, a: Any, b: Any, out: Any, *, stride: Sequence[int],
            pad_pre: Sequence[int], dilation: Sequence[int], config: str,
            tf32: bool = False) -> Any:
    """The engine's launch: dgrad (a=dy, b=w) -> out=dx (no TF32)."""
    return run(a, b, out, stride=stride, pad_pre=pad_pre, dilation=dilation, config=config)


# a fixed order of fp32 adds, no atomics: the same bits run to run
ENGINE = TritonEngine(name="triton-sc", module=__name__, prefix=PREFIX, directions=("dgrad",),
                      what="small-C dgrad",
                      note="direct small-C dgrad kernel (Triton, convdoctor.kernels.smallc), fp32 "
                           "accumulation")
