"""The runtime executor of PyTorch's own paths: its convolution under chosen backend flags.

`FlagExec` runs `fprop` (x, w -> y) and the backward pair (dy -> dx, dw, db) of one convolution by
calling `aten::convolution` / `aten::convolution_backward` with the global backend flags (cudnn
enabled/benchmark/deterministic, mkldnn enabled) set around the call and put back right after, so
only that one call sees them. The flag table (candidate key -> flags) is data/routes.json. The
`torch` and `cpu` engines build these executors; the runtime's fallback chain ends in them.

This module imports torch: engines load it only when the runtime asks for an executor.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import torch

from .base import ConvArgs

# torch.convolution (the public binding) parses its arguments ~20 us faster per call than the
# OpOverload torch.ops.aten.convolution.default on CPU (measured here); both reach aten::convolution.
_aten_conv = torch.convolution
_aten_conv_bwd = torch.ops.aten.convolution_backward.default


@functools.lru_cache(maxsize=1)
def route_table() -> dict[str, Any]:
    text = resources.files("convdoctor.engines").joinpath("data/routes.json").read_text("utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


_SETTERS = {
    "cudnn_enabled": (torch._C._get_cudnn_enabled, torch._C._set_cudnn_enabled),
    "cudnn_benchmark": (torch._C._get_cudnn_benchmark, torch._C._set_cudnn_benchmark),
    "cudnn_deterministic": (torch._C._get_cudnn_deterministic, torch._C._set_cudnn_deterministic),
    "mkldnn_enabled": (torch._C._get_mkldnn_enabled, torch._C._set_mkldnn_enabled),
}


class FlagExec:
    """PyTorch's convolution with some global backend flags set for the duration of one call."""

    kind = "torch"

    def __init__(self, key: str, flags: dict[str, Any]) -> None:
        self.key = key
        flags = dict(flags)
        self.layout: str | None = flags.pop("layout", None)
        # Only the flags this route sets; (getter, setter, wanted) triples.
        self._flags = tuple((g, s, bool(v)) for name, v in flags.items() if v is not None
                            for g, s in (_SETTERS[name],))
        self.flags = {k: v for k, v in flags.items() if v is not None}
        if self.layout is not None:
            self.flags["layout"] = self.layout
            self.fprop = self._fprop_layout  # type: ignore[method-assign]
            self.backward = self._backward_layout  # type: ignore[method-assign]

    def is_noop(self) -> bool:
        """True when running this route now changes nothing: PyTorch's own path as configured."""
        if self.layout is not None:
            return False
        for get, _, want in self._flags:
            if get() != want:
                return False
        return True

    def _enter(self) -> list[tuple[Any, bool]]:
        saved = []
        for get, set_, want in self._flags:
            cur = get()
            if cur != want:
                set_(want)
                saved.append((set_, cur))
        return saved

    @staticmethod
    def _exit(saved: list[tuple[Any, bool]]) -> None:
        for set_, cur in reversed(saved):
            set_(cur)

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, a: ConvArgs
              ) -> torch.Tensor:
        if not self._flags:
            return _aten_conv(x, w, b, a.stride, a.padding, a.dilation, a.transposed,
                              a.output_padding, a.groups)
        saved = self._enter()
        try:
            return _aten_conv(x, w, b, a.stride, a.padding, a.dilation, a.transposed,
                              a.output_padding, a.groups)
        finally:
            self._exit(saved)

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        saved = self._enter() if self._flags else []
        try:
            gx, gw, gb = _aten_conv_bwd(gy, x, w, bias_sizes, a.stride, a.padding, a.dilation,
                                        a.transposed, a.output_padding, a.groups, list(mask))
        finally:
            if saved:
                self._exit(saved)
        return (gx if mask[0] else None, gw if mask[1] else None, gb if mask[2] else None)

    # ---- the same in another memory layout: convert in, run, convert back to the caller's layout
    def _fmt(self, t: torch.Tensor) -> torch.memory_format:
        if self.layout == "nhwc" and t.dim() in (4, 5):
            return torch.channels_last if t.dim() == 4 else torch.channels_last_3d
        return torch.contiguous_format

    def _fprop_layout(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, a: ConvArgs
                      ) -> torch.Tensor:
        back = _format_of(x)
        fmt = self._fmt(x)
        y = FlagExec.fprop(self, x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt),
                           b, a)
        return y.contiguous(memory_format=back)

    def _backward_layout(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                         bias_sizes: list[int] | None, a: ConvArgs,
                         mask: tuple[bool, bool, bool]) -> tuple[Any, Any, Any]:
        fmt = self._fmt(x)
        gx, gw, gb = FlagExec.backward(self, gy.contiguous(memory_format=fmt),
                                       x.contiguous(memory_format=fmt),
                                       w.contiguous(memory_format=fmt), bias_sizes, a, mask)
        if gx is not None:
            gx = gx.contiguous(memory_format=_format_of(x))
        if gw is not None:
            gw = gw.contiguous(memory_format=_format_of(w))
        return gx, gw, gb

    def describe(self) -> str:
        if not self.flags:
            return f"{self.key} (PyTorch as configured)"
        return f"{self.key} ({', '.join(f'{k}={v}' for k, v in self.flags.items())})"

    def __repr__(self) -> str:
        return f"FlagExec({self.key!r})"


def _format_of(t: torch.Tensor) -> torch.memory_format:
    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(
            memory_format=torch.channels_last):
        return torch.channels_last
    if t.dim() == 5 and not t.is_contiguous() and t.is_contiguous(
            memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.contiguous_format


def flag_exec(key: str) -> FlagExec | None:
    """The executor for a candidate key of the PyTorch/CPU kind, or None when not a flag route."""
    spec = route_table()["routes"].get(key)
    if spec is None:
        return None
    return _cached_flag_exec(key)


@functools.lru_cache(maxsize=64)
def _cached_flag_exec(key: str) -> FlagExec:
    return FlagExec(key, dict(route_table()["routes"][key]))


def default_exec() -> FlagExec:
    """PyTorch's own path exactly as the user configured it (no flag changes)."""
    return _cached_flag_exec("torch:default")


def fallback_tail(device_type: str) -> list[str]:
    table = route_table()["fallback_tail"]
    return list(table["cuda"] if device_type == "cuda" else table["cpu"])
