"""convdoctor's Triton kernels at run time: `triton:dw_<config>`, a depthwise convolution
(`TritonDwExec`, `convdoctor.kernels.depthwise`); `triton:wg_<config>`, the weight gradient of an
ungrouped convolution with a small weight (`TritonWgExec`, `convdoctor.kernels.wgrad`);
`triton:sc_<config>`, the data gradient of an ungrouped convolution with at most 4 input channels
(`TritonScExec`, `convdoctor.kernels.smallc`); `triton:fp_<config>`, the forward call of an
ungrouped fp32 1D/2D convolution (`TritonFpExec`, `convdoctor.kernels.fprop`).

The tuner offers each kernel where it runs the problem and keeps it only where it measured faster
than every cuDNN and PyTorch path and matched the float64 reference. Like a cuDNN plan, an executor
is built for one problem and one direction: the depthwise fprop executor runs forward calls, a
dgrad one computes dx, the wgrad one dw; asking one for another direction raises, and the route
falls back (`runtime.fallback`). The kernels accumulate in fp32; the depthwise and small-C kernels
never round fp32 inputs to TF32, the wgrad and forward kernels do only where PyTorch's TF32 flag for
convolutions allows it at the time of the call (as cuDNN would). Ordinary (not transposed)
convolutions only.
"""

from __future__ import annotations

from typing import Any

import torch

from ..kernels import depthwise, fprop, smallc, wgrad
from ..tune import gemm
from .execs import ConvArgs


def _dense(t: torch.Tensor) -> torch.Tensor:
    """`t` if it is contiguous or channels-last (2D) / channels-last-3d (3D) - the layouts the
    tuner timed - else a contiguous copy (any other stride pattern would compile a kernel of its
    own)."""
    if t.is_contiguous() or depthwise.format_of(t) != torch.contiguous_format:
        return t
    return t.contiguous()


class _TritonExec:
    """What the three executors share: the key's configuration checked against the problem, the
    direction it was tuned for, the bias gradient."""

    kind = "triton"
    KERNEL: Any = None
    WHAT = ""

    def __init__(self, key: str, problem: Any) -> None:
        config = self.KERNEL.config_of(key)
        if config is None:
            raise ValueError(f"{key} is not a {self.WHAT} kernel key")
        self.KERNEL.parse_config(config)
        why = self.KERNEL.unfit(problem) or self.KERNEL.unavailable()
        if why:
            raise ValueError(f"{key}: {why}")
        self.key = key
        self.config = config
        self.problem = problem
        self.direction = problem.direction
        self._bias_dims = [0, *range(2, 2 + problem.ndim)]

    @classmethod
    def build(cls, key: str, problem: Any) -> Any:
        return cls(key, problem)

    def is_noop(self) -> bool:
        return False

    def _only(self, direction: str, what: str, asked_other: bool) -> None:
        """Raise unless tuned for `direction` and asked for nothing but `what`."""
        if asked_other or self.direction != direction:
            raise RuntimeError(f"{self.key} was tuned for {self.direction}; it computes {what} "
                               "only")

    def _ungrouped(self, a: ConvArgs, *ts: torch.Tensor) -> None:
        if a.transposed or a.groups != 1 or len({t.dtype for t in ts}) != 1:
            raise RuntimeError(f"{self.key}: not an ungrouped convolution of one dtype")

    def _bias_grad(self, gy: torch.Tensor) -> torch.Tensor:
        return gy.sum(dim=self._bias_dims)

    def describe(self) -> str:
        return f"{self.key} (convdoctor's {self.WHAT} Triton kernel)"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r})"


class TritonDwExec(_TritonExec):
    """`triton:dw_<config>`: depthwise fprop (forward calls) or dgrad (dx)."""

    KERNEL = depthwise
    WHAT = "depthwise"

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
        self._only("dgrad", "dx", mask[1])
        self._check(x, w, a)
        gx = gb = None
        if mask[0]:
            gy = _dense(gy)
            out = torch.empty(x.shape, dtype=gy.dtype, device=gy.device,
                              memory_format=depthwise.format_of(x))
            gx = depthwise.dgrad(gy, w.contiguous(), x.shape, stride=a.stride, pad_pre=a.padding,
                                 dilation=a.dilation, config=self.config, out=out)
        if mask[2]:
            gb = self._bias_grad(gy)
        return gx, None, gb


class TritonWgExec(_TritonExec):
    """`triton:wg_<config>`: dw (and the bias gradient) of the wgrad problem it was tuned on."""

    KERNEL = wgrad
    WHAT = "wgrad"

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              a: ConvArgs) -> torch.Tensor:
        raise RuntimeError(f"{self.key} computes weight gradients only, not fprop")

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        self._only("wgrad", "dw", mask[0])
        self._ungrouped(a, x, gy, w)
        gw = gb = None
        if mask[1]:
            gw = torch.empty(w.shape, dtype=w.dtype, device=w.device,
                             memory_format=depthwise.format_of(w))
            wgrad.run(_dense(x), _dense(gy), gw, stride=a.stride, pad_pre=a.padding,
                      dilation=a.dilation, config=self.config, tf32=gemm.conv_tf32_allowed())
        if mask[2]:
            gb = self._bias_grad(gy)
        return None, gw, gb


class TritonScExec(_TritonExec):
    """`triton:sc_<config>`: dx (and the bias gradient) of the dgrad problem it was tuned on."""

    KERNEL = smallc
    WHAT = "small-C dgrad"

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              a: ConvArgs) -> torch.Tensor:
        raise RuntimeError(f"{self.key} computes data gradients only, not fprop")

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        self._only("dgrad", "dx", mask[1])
        self._ungrouped(a, gy, w)
        gx = gb = None
        if mask[0]:
            gy = _dense(gy)
            out = torch.empty(x.shape, dtype=gy.dtype, device=gy.device,
                              memory_format=depthwise.format_of(x))
            gx = smallc.run(gy, w, out, stride=a.stride, pad_pre=a.padding,
                            dilation=a.dilation, config=self.config)
        if mask[2]:
            gb = self._bias_grad(gy)
        return gx, None, gb


class TritonFpExec(_TritonExec):
    """`triton:fp_<config>`: the forward calls of the fprop problem it was tuned on."""

    KERNEL = fprop
    WHAT = "forward implicit-GEMM"

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              a: ConvArgs) -> torch.Tensor:
        if self.direction != "fprop":
            raise RuntimeError(f"{self.key} was tuned for {self.direction}, not fprop")
        self._ungrouped(a, x, w)
        nd = x.dim() - 2
        if nd not in (1, 2) or w.dim() != x.dim():
            raise RuntimeError(f"{self.key}: runs 1D and 2D convolutions only")
        out = [(int(x.shape[2 + i]) + 2 * a.padding[i] - a.dilation[i] * (int(w.shape[2 + i]) - 1)
                - 1) // a.stride[i] + 1 for i in range(nd)]
        if min(out) < 1 or x.shape[0] == 0 or x.shape[1] != w.shape[1]:
            raise RuntimeError(f"{self.key}: input {tuple(x.shape)} and weight {tuple(w.shape)} "
                               "give no output")
        if b is not None and (b.dtype != x.dtype or b.numel() != w.shape[0]):
            raise RuntimeError(f"{self.key}: a bias of {b.dtype} x {b.numel()} for a "
                               f"{x.dtype} layer of {w.shape[0]} output channels")
        # channels-last where x or w is, as PyTorch's CUDA convolution (and its fake kernel under
        # torch.compile) returns it
        fmt = depthwise.format_of(x)
        if fmt == torch.contiguous_format:
            fmt = depthwise.format_of(w)
        y = torch.empty((x.shape[0], w.shape[0], *out), dtype=x.dtype, device=x.device,
                        memory_format=fmt)
        fprop.run(_dense(x), w, y, stride=a.stride, pad_pre=a.padding, dilation=a.dilation,
                  config=self.config, tf32=gemm.conv_tf32_allowed())
        if b is not None:
            y.add_(b.reshape(1, -1, *([1] * nd)))
        return y

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        raise RuntimeError(f"{self.key} computes forward calls only, not gradients")
