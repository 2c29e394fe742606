"""Grouped convolutions as one batched matrix product per call (im2col + cuBLAS/BLAS).

For a convolution of G groups (C = G*Cg inputs, K = G*Kg outputs, kernel R x S) the input patches
form, per group, a matrix of J = Cg*R*S rows and one column per output position of every sample:
    fprop  y_g  = W_g (Kg x J)   @ cols_g (J x N*P)
    dgrad  dx   = col2im(W_g^T (J x Kg) @ dy_g (Kg x N*P))       (F.fold sums overlapping patches)
    wgrad  dW_g = dy_g (Kg x N*P) @ cols_g^T (N*P x J)
`cols` is ONE strided copy of the padded input (an `as_strided` view in group-major order, so the G
products are one `torch.bmm`); dgrad's patches go back through one permute and `F.fold`. Every copy
is part of the candidate's time. Offered for grouped layers that are not depthwise
(1 < groups < C): cuDNN runs the wav2vec2 positional convolution (16 groups of 48 channels, kernel
128) at ~13 TFLOPs on the H100 (296 us for a 3.8 GFLOP dgrad), while one batched GEMM
of that size runs far faster; whether the copies leave a gain is measured by the tuner
(`torch:im2col`), never assumed. 1D and 2D; the tuner offers it where the patch matrix fits in
1 GiB (`engines.im2col.unfit`).

Math mode: the caller sets TF32 through `gemm.reduced_precision` (as `torch:gemm` does; fp16/bf16
products reduce in fp32); the copies are exact; dgrad's products and fold run in fp32 for fp16/bf16
inputs (the fold sums the kernel's taps), then round once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .gemm_math import is_channels_last


def _as4d(t: torch.Tensor) -> torch.Tensor:
    return t.unsqueeze(2) if t.dim() == 3 else t


def _pairs(v: Sequence[int], nd: int, one: int) -> tuple[int, int]:
    return (one, int(v[0])) if nd == 1 else (int(v[0]), int(v[1]))


def _pad(x4: torch.Tensor, pre: tuple[int, int], post: tuple[int, int]) -> torch.Tensor:
    if not any(pre) and not any(post):
        return x4
    return F.pad(x4, (pre[1], post[1], pre[0], post[0]))


def _cols(xp: torch.Tensor, groups: int, ker: tuple[int, int], dil: tuple[int, int],
          stride: tuple[int, int], out: tuple[int, int]) -> torch.Tensor:
    """(G, Cg*R*S, N*OH*OW): the padded input's patches, group-major (one copy)."""
    n, c = int(xp.shape[0]), int(xp.shape[1])
    cg = c // groups
    sn, sc, sh, sw = xp.stride()
    v = xp.as_strided((groups, cg, ker[0], ker[1], n, out[0], out[1]),
                      (cg * sc, sc, dil[0] * sh, dil[1] * sw, sn, stride[0] * sh, stride[1] * sw),
                      xp.storage_offset())
    return v.reshape(groups, cg * ker[0] * ker[1], n * out[0] * out[1])


def _out_size(size: int, pre: int, post: int, k: int, d: int, s: int) -> int:
    return (size + pre + post - d * (k - 1) - 1) // s + 1


def _grouped_out(m: torch.Tensor, groups: int, n: int, sp: tuple[int, int], nd: int,
                 channels_last: bool) -> torch.Tensor:
    """(G, Kg, N*P) -> (N, G*Kg, *spatial) in the caller's layout."""
    kg = int(m.shape[1])
    y = m.view(groups, kg, n, sp[0], sp[1]).permute(2, 0, 1, 3, 4).reshape(
        n, groups * kg, sp[0], sp[1])
    fmt = torch.channels_last if (channels_last and nd == 2) else torch.contiguous_format
    y = y.contiguous(memory_format=fmt)   # the one copy (reshape may have returned a view)
    return y.squeeze(2) if nd == 1 else y


def _dy_matrix(dy4: torch.Tensor, groups: int) -> torch.Tensor:
    """dy (N, K, OH, OW) as (G, Kg, N*OH*OW) (one copy)."""
    n, k, oh, ow = (int(v) for v in dy4.shape)
    return dy4.reshape(n, groups, k // groups, oh, ow).permute(1, 2, 0, 3, 4).reshape(
        groups, k // groups, n * oh * ow)


def fprop(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int], pad_pre: Sequence[int],
          pad_post: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor:
    """y = conv(x, w) (groups, 1D/2D); y has x's memory layout."""
    nd = x.dim() - 2
    x4, k = _as4d(x), int(w.shape[0])
    ker = _pairs(w.shape[2:], nd, 1)
    st, dl = _pairs(stride, nd, 1), _pairs(dilation, nd, 1)
    pre, post = _pairs(pad_pre, nd, 0), _pairs(pad_post, nd, 0)
    out = (_out_size(int(x4.shape[2]), pre[0], post[0], ker[0], dl[0], st[0]),
           _out_size(int(x4.shape[3]), pre[1], post[1], ker[1], dl[1], st[1]))
    cols = _cols(_pad(x4, pre, post), groups, ker, dl, st, out)
    y = torch.bmm(w.reshape(groups, k // groups, -1), cols)
    return _grouped_out(y, groups, int(x.shape[0]), out, nd, is_channels_last(x))


def dgrad(dy: torch.Tensor, w: torch.Tensor, x_spatial: Sequence[int], stride: Sequence[int],
          pad_pre: Sequence[int], pad_post: Sequence[int], dilation: Sequence[int],
          groups: int) -> torch.Tensor:
    """dx of conv(x, w) for an input of spatial size `x_spatial`; dx has dy's memory layout."""
    nd = dy.dim() - 2
    dy4, k, cg = _as4d(dy), int(w.shape[0]), int(w.shape[1])
    n = int(dy.shape[0])
    ker = _pairs(w.shape[2:], nd, 1)
    st, dl = _pairs(stride, nd, 1), _pairs(dilation, nd, 1)
    pre, post = _pairs(pad_pre, nd, 0), _pairs(pad_post, nd, 0)
    xs = _pairs(x_spatial, nd, 1)
    padded = (xs[0] + pre[0] + post[0], xs[1] + pre[1] + post[1])
    oh, ow = int(dy4.shape[2]), int(dy4.shape[3])
    wm, dym = w.reshape(groups, k // groups, -1), _dy_matrix(dy4, groups)
    if dy.dtype in (torch.float16, torch.bfloat16):
        # the fold below sums the kernel's taps: keep the products in fp32 until then, as the
        # convolution's own fp32 accumulation would
        wm, dym = wm.float(), dym.float()
    patches = torch.bmm(wm.transpose(1, 2), dym)                      # (G, J, N*P)
    j = int(patches.shape[1])
    cols = patches.view(groups, j, n, oh * ow).permute(2, 0, 1, 3).reshape(n, groups * j, oh * ow)
    dxp = F.fold(cols, padded, ker, dilation=dl, stride=st)          # (N, C, Hp, Wp)
    dx = dxp[:, :, pre[0]:pre[0] + xs[0], pre[1]:pre[1] + xs[1]]
    fmt = torch.channels_last if (is_channels_last(dy) and nd == 2) else torch.contiguous_format
    dx = dx.to(dtype=dy.dtype, memory_format=fmt)
    if not dx.is_contiguous(memory_format=fmt):   # `to` keeps a view that needs no conversion
        dx = dx.contiguous(memory_format=fmt)
    assert int(dx.shape[1]) == groups * cg
    return dx.squeeze(2) if nd == 1 else dx


def wgrad(x: torch.Tensor, dy: torch.Tensor, w_shape: Sequence[int], stride: Sequence[int],
          pad_pre: Sequence[int], pad_post: Sequence[int], dilation: Sequence[int],
          groups: int) -> torch.Tensor:
    """dW (K, Cg, *kernel), contiguous."""
    nd = x.dim() - 2
    x4, dy4 = _as4d(x), _as4d(dy)
    ker = _pairs(w_shape[2:], nd, 1)
    st, dl = _pairs(stride, nd, 1), _pairs(dilation, nd, 1)
    pre, post = _pairs(pad_pre, nd, 0), _pairs(pad_post, nd, 0)
    out = (int(dy4.shape[2]), int(dy4.shape[3]))
    cols = _cols(_pad(x4, pre, post), groups, ker, dl, st, out)       # (G, J, N*P)
    dw = torch.bmm(_dy_matrix(dy4, groups), cols.transpose(1, 2))   # (G, Kg, J)
    return dw.reshape(tuple(int(v) for v in w_shape))
