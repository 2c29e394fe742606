"""`triton:dw_<config>` at run time: a depthwise convolution by convdoctor's Triton kernel
(`TritonDwExec`); `triton:wg_<config>`: an ungrouped weight gradient by its wgrad kernel
(`TritonWgExec`); `triton:sc_<config>`: the data gradient of a layer with at most 4 input
channels by its small-C kernel (`TritonScExec`).

The tuner offers the kernel (`convdoctor.kernels.depthwise`) for depthwise fprop and dgrad and keeps
it only where it measured faster than every cuDNN and PyTorch path and matched the float64
reference. Like a cuDNN plan, an executor is built for one problem and one direction: the fprop
executor runs forward calls, the dgrad one computes dx; asking it for another direction raises, and
the route falls back (`runtime.fallback`). The kernel accumulates in fp32 and does not round fp32
inputs to TF32, so it is at least as exact as the path it replaces. Ordinary (not transposed)
convolutions only.
"""

from __future__ import annotations

from typing import Any

import torch

from ..kernels import depthwise, smallc, wgrad
from .execs import ConvArgs


def _dense(t: torch.Tensor) -> torch.Tensor:
    """`t` if it is contiguous or channels-last (the layouts the kernel is compiled for), else a
    contiguous copy (any other stride pattern would compile a kernel of its own)."""
    if t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)):
        return t
    return t.contiguous()


class TritonDwExec:
    kind = "triton"

    def __init__(self, key: str, problem: Any) -> None:
        config = depthwise.config_of(key)
        if config is None:
            raise ValueError(f"{key} is not a depthwise kernel key")
        depthwise.parse_config(config)
        why = depthwise.eligible(problem.direction, problem.ndim, problem.c, problem.k,
                                 problem.groups, problem.n) or depthwise.unavailable()
        if why:
            raise ValueError(f"{key}: {why}")
        self.key = key
        self.config = config
        self.problem = problem
        self.direction = problem.direction
        self._bias_dims = [0, *range(2, 2 + problem.ndim)]

    @classmethod
    def build(cls, key: str, problem: Any) -> TritonDwExec:
        return cls(key, problem)

    def is_noop(self) -> bool:
        return False

    def _check(self, x: torch.Tensor, w: torch.Tensor, a: ConvArgs) -> None:
        if a.transposed or a.groups != w.shape[0] or w.shape[1] != 1 or x.dtype != w.dtype:
            raise RuntimeError(f"{self.key}: not a depthwise convolution of one dtype")

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              a: ConvArgs) -> torch.Tensor:
        if self.direction != "fprop":
            raise RuntimeError(f"{self.key} was tuned for {self.direction}, not fprop")
        self._check(x, w, a)
        y = depthwise.fprop(_dense(x), w.contiguous(), stride=a.stride, pad_pre=a.padding,
                            pad_post=a.padding, dilation=a.dilation, config=self.config)
        if b is not None:
            y.add_(b.view(1, -1, *([1] * (y.dim() - 2))))
        return y  # type: ignore[no-any-return]

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        if mask[1] or self.direction != "dgrad":
            raise RuntimeError(f"{self.key} was tuned for {self.direction}; it computes dx only")
        self._check(x, w, a)
        gx = gb = None
        if mask[0]:
            gy = _dense(gy)
            out = torch.empty(x.shape, dtype=gy.dtype, device=gy.device,
                              memory_format=depthwise.format_of(x))
            gx = depthwise.dgrad(gy, w.contiguous(), x.shape, stride=a.stride, pad_pre=a.padding,
                                 dilation=a.dilation, config=self.config, out=out)
        if mask[2]:
            gb = gy.sum(dim=self._bias_dims)
        return gx, None, gb

    def describe(self) -> str:
        return f"{self.key} (convdoctor's depthwise Triton kernel)"

    def __repr__(self) -> str:
        return f"TritonDwExec({self.key!r})"


class TritonWgExec:
    """`triton:wg_<config>` at run time: the weight gradient of an ungrouped convolution by
    convdoctor's split-reduction Triton kernel (`convdoctor.kernels.wgrad`). Built for the wgrad
    problem it was tuned on: it computes dw (and the bias gradient) only; asked for dx or a
    forward call it raises, and the route falls back (`runtime.fallback`). fp32 accumulation, TF32
    products only where the tuned problem's math mode allowed them."""

    kind = "triton"

    def __init__(self, key: str, problem: Any) -> None:
        config = wgrad.config_of(key)
        if config is None:
            raise ValueError(f"{key} is not a wgrad kernel key")
        wgrad.parse_config(config)
        why = wgrad.eligible(problem.direction, problem.ndim, problem.c, problem.k,
                             problem.groups, problem.kernel, problem.dtype) or wgrad.unavailable()
        if why:
            raise ValueError(f"{key}: {why}")
        self.key = key
        self.config = config
        self.problem = problem
        self.direction = problem.direction
        self.tf32 = problem.math == "tf32"
        self._bias_dims = [0, *range(2, 2 + problem.ndim)]

    @classmethod
    def build(cls, key: str, problem: Any) -> TritonWgExec:
        return cls(key, problem)

    def is_noop(self) -> bool:
        return False

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              a: ConvArgs) -> torch.Tensor:
        raise RuntimeError(f"{self.key} computes weight gradients only, not fprop")

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        if mask[0] or self.direction != "wgrad":
            raise RuntimeError(f"{self.key} was tuned for {self.direction}; it computes dw only")
        if a.transposed or a.groups != 1 or x.dtype != gy.dtype or x.dtype != w.dtype:
            raise RuntimeError(f"{self.key}: not an ungrouped convolution of one dtype")
        gw = gb = None
        if mask[1]:
            gw = torch.empty(w.shape, dtype=w.dtype, device=w.device,
                             memory_format=depthwise.format_of(w))
            wgrad.run(_dense(x), _dense(gy), gw, stride=a.stride, pad_pre=a.padding,
                      dilation=a.dilation, config=self.config, tf32=self.tf32)
        if mask[2]:
            gb = gy.sum(dim=self._bias_dims)
        return None, gw, gb

    def describe(self) -> str:
        return f"{self.key} (convdoctor's wgrad Triton kernel)"

    def __repr__(self) -> str:
        return f"TritonWgExec({self.key!r})"


class TritonScExec:
    """`triton:sc_<config>` at run time: dx of an ungrouped convolution with at most 4 input
    channels by convdoctor's small-C Triton kernel (`convdoctor.kernels.smallc`). Built for the
    dgrad problem it was tuned on: it computes dx (and the bias gradient) only; asked for dw or a
    forward call it raises, and the route falls back (`runtime.fallback`). fp32 accumulation, no
    TF32 rounding (at least as exact as the path it replaces)."""

    kind = "triton"

    def __init__(self, key: str, problem: Any) -> None:
        config = smallc.config_of(key)
        if config is None:
            raise ValueError(f"{key} is not a small-C kernel key")
        smallc.parse_config(config)
        why = smallc.eligible(problem.direction, problem.ndim, problem.c, problem.k,
                              problem.groups, problem.dtype, problem.n) or smallc.unavailable()
        if why:
            raise ValueError(f"{key}: {why}")
        self.key = key
        self.config = config
        self.problem = problem
        self.direction = problem.direction
        self._bias_dims = [0, *range(2, 2 + problem.ndim)]

    @classmethod
    def build(cls, key: str, problem: Any) -> TritonScExec:
        return cls(key, problem)

    def is_noop(self) -> bool:
        return False

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              a: ConvArgs) -> torch.Tensor:
        raise RuntimeError(f"{self.key} computes data gradients only, not fprop")

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        if mask[1] or self.direction != "dgrad":
            raise RuntimeError(f"{self.key} was tuned for {self.direction}; it computes dx only")
        if a.transposed or a.groups != 1 or gy.dtype != w.dtype:
            raise RuntimeError(f"{self.key}: not an ungrouped convolution of one dtype")
        gx = gb = None
        if mask[0]:
            gy = _dense(gy)
            out = torch.empty(x.shape, dtype=gy.dtype, device=gy.device,
                              memory_format=depthwise.format_of(x))
            gx = smallc.run(gy, w.contiguous(), out, stride=a.stride, pad_pre=a.padding,
                            dilation=a.dilation, config=self.config)
        if mask[2]:
            gb = gy.sum(dim=self._bias_dims)
        return gx, None, gb

    def describe(self) -> str:
        return f"{self.key} (convdoctor's small-C dgrad Triton kernel)"

    def __repr__(self) -> str:
        return f"TritonScExec({self.key!r})"
