"""`torch:im2col` at run time: a grouped convolution as a patch copy and one batched product.

The tuner offers `torch:im2col` for 1D/2D grouped convolutions that are not depthwise
(`im2col_math`) and keeps it only where it measured faster than every cuDNN path and
matched the float64 reference. Here it runs with TF32 exactly as the user's
`torch.backends.cudnn.allow_tf32` lets the convolution use it, fp16/bf16 reductions in fp32. All
three directions; ordinary (not transposed) convolutions only - anything else raises and the route
moves down its chain.
"""

from __future__ import annotations

from typing import Any

import torch

from . import gemm_math as gemm
from . import im2col_math as im2col
from .base import ConvArgs

_cl = gemm.is_channels_last


class Im2colExec:
    """The runtime executor (`base.Exec`): fprop and the backward pair by im2col products."""

    kind = "torch"
    key = "torch:im2col"  # the key `engines.im2col` owns
    flags: dict[str, Any] = {}

    def is_noop(self) -> bool:
        return False

    @staticmethod
    def _check(x: torch.Tensor, w: torch.Tensor, a: ConvArgs) -> None:
        if a.transposed or x.dim() not in (3, 4) or a.groups < 2 or w.dim() != x.dim():
            raise ValueError("torch:im2col runs ordinary grouped 1D/2D convolutions only")
        if (int(x.shape[1]) != int(w.shape[1]) * a.groups or int(w.shape[0]) % a.groups
                or x.dtype != w.dtype):
            raise ValueError(f"torch:im2col: input {tuple(x.shape)} {x.dtype} and weight "
                             f"{tuple(w.shape)} {w.dtype} do not make a convolution of "
                             f"{a.groups} groups")

    @staticmethod
    def _like(t: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
        """`t` in `ref`'s memory layout (as PyTorch's own gradients are)."""
        if t.dim() == 4 and _cl(ref) and not _cl(t):
            return t.contiguous(memory_format=torch.channels_last)
        if not _cl(ref) and not t.is_contiguous():
            return t.contiguous()
        return t

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, a: ConvArgs
              ) -> torch.Tensor:
        self._check(x, w, a)
        if b is not None and b.dtype != x.dtype:
            raise ValueError(f"torch:im2col: bias {b.dtype} with input {x.dtype}")
        with gemm.reduced_precision(gemm.conv_tf32_allowed()):
            y = im2col.fprop(x, w, a.stride, a.padding, a.padding, a.dilation, a.groups)
        if y.dim() == 4 and _cl(w) and not _cl(y):   # PyTorch: channels-last if either is
            y = y.contiguous(memory_format=torch.channels_last)
        if b is not None:
            y.add_(b.view(1, -1, *([1] * (y.dim() - 2))))
        return y

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        self._check(x, w, a)
        gx = gw = gb = None
        args = (a.stride, a.padding, a.padding, a.dilation, a.groups)
        with gemm.reduced_precision(gemm.conv_tf32_allowed()):
            if mask[0]:
                gx = self._like(im2col.dgrad(gy, w, x.shape[2:], *args), x)
            if mask[1]:
                gw = self._like(im2col.wgrad(x, gy, w.shape, *args), w)
        if mask[2] and bias_sizes is not None:
            gb = gy.sum(dim=[0, *range(2, gy.dim())])
        return gx, gw, gb

    def describe(self) -> str:
        return f"{self.key} (grouped convolution as one batched matrix product)"

    def __repr__(self) -> str:
        return "Im2colExec()"


IM2COL_EXEC = Im2colExec()
