"""`torch:gemm` at run time: a 1x1 convolution as matrix products (`gemm_math`).

The tuner offers `torch:gemm` for 1x1 convolutions with no padding and one group and keeps it only
where it measured faster than every cuDNN path and checked it against float64. Here it runs with
TF32 exactly as the user's `torch.backends.cudnn.allow_tf32` lets the convolution use it (the
numerics the convolution would have had), and fp16/bf16 reductions in fp32.
"""

from __future__ import annotations

from typing import Any

import torch

from . import gemm_math as gemm
from .base import ConvArgs


class GemmExec:
    """The runtime executor (`base.Exec`): fprop and the backward pair as GEMMs."""

    kind = "torch"
    key = "torch:gemm"  # the key `engines.gemm` owns
    flags: dict[str, Any] = {}

    def is_noop(self) -> bool:
        return False

    @staticmethod
    def _check(w: torch.Tensor, a: ConvArgs) -> None:
        if not gemm.eligible(w.shape[2:], a.padding, a.padding, a.groups, a.transposed):
            raise ValueError("torch:gemm runs 1x1 convolutions with no padding and one group only")

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, a: ConvArgs
              ) -> torch.Tensor:
        self._check(w, a)
        with gemm.reduced_precision(gemm.conv_tf32_allowed()):
            return gemm.fprop(x, w, a.stride, b)

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        self._check(w, a)
        gx = gw = gb = None
        cl = gemm.is_channels_last(x)
        if cl and not gemm.is_channels_last(gy):
            gy = gy.contiguous(memory_format=gemm._cl_format(gy.dim()) or torch.contiguous_format)
        elif not cl and not gy.is_contiguous():
            gy = gy.contiguous()
        with gemm.reduced_precision(gemm.conv_tf32_allowed()):
            if mask[0]:
                gx = gemm.dgrad(gy, w, x.shape[2:], a.stride, channels_last=cl)
            if mask[1]:
                gw = gemm.wgrad(x, gy, a.stride, channels_last=cl).to(memory_format=(
                    gemm._cl_format(w.dim()) if gemm.is_channels_last(w) else
                    torch.contiguous_format) or torch.contiguous_format)
        if mask[2] and bias_sizes is not None:
            gb = gy.sum(dim=[0, *range(2, gy.dim())])
        return gx, gw, gb

    def describe(self) -> str:
        return f"{self.key} (1x1 convolution as cuBLAS/BLAS matrix products)"

    def __repr__(self) -> str:
        return "GemmExec()"


GEMM_EXEC = GemmExec()
