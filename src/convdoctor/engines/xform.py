"""The weight of a convolution's dual problem (`cudnn_policy.dual_problem`): flipped in space, with its
channel axes swapped within each group, written in the dual plan's memory layout by ONE gather.

    w  (K, C/g, *ks)  ->  w' (C, K/g, *ks),   w'[g*Cg + c, k, t] = w[g*Kg + k, c, ks-1-t]

`weight_index` builds, once per problem, the source offset in w's memory of every element of w' in
w' memory order; `transform` is then a single `index_select` (no Python per call, CUDA-graph safe).
The tuner times it as part of the candidate (`cudnn-dual:`), and `optimize` runs the same code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..problem import ConvProblem


def weight_index(w_shape: Sequence[int], w_strides: Sequence[int], wt_strides: Sequence[int],
                 groups: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Offsets into w's storage, in the storage order of w' (strides `wt_strides`).

    `w_shape`/`w_strides`: the logical shape (K, C/g, *ks) and strides of the weight (packed:
    NCHW or channels-last); `wt_strides`: the strides w' has in the dual plan's layout. int32 when
    the weight has fewer than 2**31 elements (half the index traffic), else int64."""
    shape = tuple(int(v) for v in w_shape)
    k, cg, ks = shape[0], shape[1], shape[2:]
    g = int(groups)
    if k % g:
        raise ValueError(f"groups={g} does not divide the weight's {k} output channels")
    kg, n = k // g, math.prod(shape)
    src = torch.arange(n, dtype=torch.int64).as_strided(shape, tuple(int(s) for s in w_strides))
    nd = len(ks)
    t = src.reshape(g, kg, cg, *ks).transpose(1, 2).flip(dims=list(range(3, 3 + nd)))
    t = t.reshape(g * cg, kg, *ks)
    dst = torch.empty_strided(tuple(t.shape), tuple(int(s) for s in wt_strides), dtype=torch.int64)
    dst.copy_(t)
    flat = dst.as_strided((n,), (1,))
    out = flat.to(torch.int32) if n < 2 ** 31 else flat.clone()
    return out.to(device) if device is not None else out


def index_for(problem: ConvProblem, dual: ConvProblem,
              device: torch.device | str | None = None) -> torch.Tensor:
    """`weight_index` for a problem's weight (in its layout's packed strides) and its dual's
    (`cudnn_policy.dual_problem`): what the tuner's runner and `optimize`'s executor both gather by."""
    from ..measure.buffers import logical_strides

    return weight_index(problem.w_shape(), logical_strides(problem, "w"),
                        logical_strides(dual, "w"), problem.groups, device=device)


def storage_flat(t: torch.Tensor) -> torch.Tensor:
    """A dense (packed, any dim order) tensor's memory as a 1-D view, in storage order."""
    return t.as_strided((t.numel(),), (1,))


def transform(w: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Write w' into `out` (allocated with the dual weight's shape and strides); returns `out`.
    `w` must be laid out as the strides `index` was built from."""
    torch.index_select(storage_flat(w), 0, index, out=storage_flat(out))
    return out
