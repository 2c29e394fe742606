"""1x1 convolutions as matrix products (cuBLAS on the GPU, the CPU BLAS elsewhere).

A convolution with a kernel of ones, no padding and one group is a matrix product per sample:
    fprop  y[n] = W (K x C) @ x[n] (C x P)           P = output positions
    dgrad  dx[n] = W^T (C x K) @ dy[n] (K x P)        scattered back to the strided positions
    wgrad  dW = sum_n dy[n] (K x P) @ x[n]^T (P x C)
In channels-last memory the samples fold into one matrix of M = N*P rows and each direction is ONE
plain GEMM with no copy at stride 1; in NCHW memory fprop and dgrad are a batched GEMM with the
weight broadcast (no copy), and wgrad transposes dy and x into (K, N*P) and (C, N*P) first (both
copies are part of its time). A stride above 1 subsamples the input first (a copy, timed too).

PyTorch's cuDNN path for fp32 NCHW runs transposes around its kernel (see the issue's profile);
these products need none. Whether that wins is measured by the tuner (`torch:gemm`), never assumed.

Math mode: the caller sets `torch.backends.cuda.matmul.allow_tf32` (TF32 allowed or strict fp32)
and `reduced_precision()` keeps fp16/bf16 reductions in fp32 (cuBLAS may otherwise reduce split-K
partial sums in half precision, looser than cuDNN's fp32 accumulation).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch


def eligible(kernel: Sequence[int], pad_pre: Sequence[int], pad_post: Sequence[int],
             groups: int, transposed: bool = False) -> bool:
    """True when the convolution is exactly a matrix product (1x1 kernel, no padding, 1 group)."""
    return (not transposed and groups == 1 and all(int(k) == 1 for k in kernel)
            and all(int(p) == 0 for p in pad_pre) and all(int(p) == 0 for p in pad_post))


def _cl_format(nd: int) -> torch.memory_format | None:
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(nd)


def is_channels_last(t: torch.Tensor) -> bool:
    """Channels-last memory (strictly: a tensor contiguous both ways counts as NCHW)."""
    fmt = _cl_format(t.dim())
    return fmt is not None and not t.is_contiguous() and t.is_contiguous(memory_format=fmt)


def _perm(nd: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(to channels-last order, back to logical NC... order) for an nd-dim tensor."""
    to = (0, *range(2, nd), 1)
    back = (0, nd - 1, *range(1, nd - 1))
    return to, back


def _subsample(x: torch.Tensor, stride: Sequence[int]) -> torch.Tensor:
    if all(int(s) == 1 for s in stride):
        return x
    return x[(slice(None), slice(None)) + tuple(slice(None, None, int(s)) for s in stride)]


def fprop(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int],
          bias: torch.Tensor | None = None, channels_last: bool | None = None) -> torch.Tensor:
    """y = conv(x, w) for a 1x1 kernel; y has x's memory layout."""
    n, c = int(x.shape[0]), int(x.shape[1])
    k = int(w.shape[0])
    w2 = w.reshape(k, c)
    cl = is_channels_last(x) if channels_last is None else channels_last
    xs = _subsample(x, stride)
    sp = tuple(int(s) for s in xs.shape[2:])
    if cl:
        to, back = _perm(x.dim())
        xm = xs.permute(to).reshape(-1, c)
        y = torch.mm(xm, w2.t()) if bias is None else torch.addmm(bias, xm, w2.t())
        return y.view(n, *sp, k).permute(back)
    y = torch.matmul(w2, xs.reshape(n, c, -1)).view(n, k, *sp)
    if bias is not None:
        y.add_(bias.view(1, k, *([1] * len(sp))))
    return y


def dgrad(dy: torch.Tensor, w: torch.Tensor, x_spatial: Sequence[int], stride: Sequence[int],
          channels_last: bool | None = None) -> torch.Tensor:
    """dx for a 1x1 kernel; positions the stride skipped get zero; dx has dy's memory layout."""
    n, k = int(dy.shape[0]), int(dy.shape[1])
    c = int(w.shape[1])
    w2 = w.reshape(k, c)
    so = tuple(int(s) for s in dy.shape[2:])
    cl = is_channels_last(dy) if channels_last is None else channels_last
    if cl:
        to, back = _perm(dy.dim())
        core = torch.mm(dy.permute(to).reshape(-1, k), w2).view(n, *so, c).permute(back)
    else:
        core = torch.matmul(w2.t(), dy.reshape(n, k, -1)).view(n, c, *so)
    xs = tuple(int(s) for s in x_spatial)
    if so == xs and all(int(s) == 1 for s in stride):
        return core
    fmt = (_cl_format(dy.dim()) if cl else None) or torch.contiguous_format
    dx = torch.empty((n, c, *xs), dtype=dy.dtype, device=dy.device,
                     memory_format=fmt).zero_()
    dx[(slice(None), slice(None)) + tuple(slice(None, None, int(s)) for s in stride)] = core
    return dx


def wgrad(x: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
          channels_last: bool | None = None) -> torch.Tensor:
    """dW (K, C, 1, ...) for a 1x1 kernel, contiguous."""
    n, c = int(x.shape[0]), int(x.shape[1])
    k = int(dy.shape[1])
    xs = _subsample(x, stride)
    cl = is_channels_last(x) if channels_last is None else channels_last
    if cl:
        to, _ = _perm(x.dim())
        dw = torch.mm(dy.permute(to).reshape(-1, k).t(), xs.permute(to).reshape(-1, c))
    elif n == 1:
        dw = torch.mm(dy.reshape(k, -1), xs.reshape(c, -1).t())
    else:
        dym = dy.reshape(n, k, -1).transpose(0, 1).reshape(k, -1)
        xm = xs.reshape(n, c, -1).transpose(0, 1).reshape(c, -1)
        dw = torch.mm(dym, xm.t())
    return dw.view(k, c, *([1] * (x.dim() - 2)))


@contextlib.contextmanager
def reduced_precision(allow_tf32: bool | None = None) -> Iterator[None]:
    """Matmul flags for one call: fp16/bf16 reductions in fp32; TF32 as asked (None: as set).

    A user who set TF32 through PyTorch's newer `matmul.fp32_precision` cannot have the legacy
    `allow_tf32` read (PyTorch raises on the mix): then the newer setting is used and put back."""
    m = torch.backends.cuda.matmul
    half = (m.allow_fp16_reduced_precision_reduction, m.allow_bf16_reduced_precision_reduction)
    try:
        legacy: bool | None = bool(m.allow_tf32)
    except RuntimeError:
        legacy = None
    newer = getattr(m, "fp32_precision", None) if legacy is None else None
    try:
        if allow_tf32 is not None:
            if legacy is None:
                m.fp32_precision = "tf32" if allow_tf32 else "ieee"
            else:
                m.allow_tf32 = bool(allow_tf32)
        m.allow_fp16_reduced_precision_reduction = False
        m.allow_bf16_reduced_precision_reduction = False
        yield
    finally:
        if legacy is None:
            if newer is not None:
                m.fp32_precision = newer
        else:
            m.allow_tf32 = legacy
        m.allow_fp16_reduced_precision_reduction, m.allow_bf16_reduced_precision_reduction = half


def conv_tf32_allowed() -> bool:
    """Whether the user lets convolutions use TF32 (`cudnn.allow_tf32`, or the newer
    `cudnn.conv.fp32_precision` where the legacy flag cannot be read)."""
    try:
        return bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:
        conv = getattr(torch.backends.cudnn, "conv", None)
        return getattr(conv, "fp32_precision", "") == "tf32"
