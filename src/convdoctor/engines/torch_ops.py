"""PyTorch's own convolution ops for one problem, and the float64 references every check uses.

`torch_conv(problem, a, b, like)` runs a problem's direction with PyTorch's functional ops under
the backend flags `torch_flags(mode, problem)` sets (the tuner's `torch:*` candidates and the CUDA
reference); `run_direction` is the same on symmetric-padded tensors through aten (the CPU
candidates); `reference_cuda`/`reference_cpu` compute the problem in float64 on the upcast inputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..problem import ConvProblem


@contextlib.contextmanager
def torch_flags(mode: str, problem: ConvProblem) -> Iterator[None]:
    """PyTorch's backend flags for a torch:* candidate, restored on exit."""
    import torch

    tf32 = problem.math == "tf32"
    old_mm = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        with torch.backends.cudnn.flags(enabled=(mode != "cudnn-off"),
                                        benchmark=(mode == "benchmark"),
                                        deterministic=problem.deterministic, allow_tf32=tf32):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_mm


def _pad_arg(problem: ConvProblem) -> list[int]:
    """F.pad argument (last dim first) for asymmetric padding."""
    out: list[int] = []
    for pre, post in zip(reversed(problem.pad_pre), reversed(problem.pad_post), strict=True):
        out += [pre, post]
    return out


def torch_conv(problem: ConvProblem, a: Any, b: Any, x_like: Any = None) -> Any:
    """Run the problem's direction with PyTorch ops under the current flags; returns the output.

    fprop(a=x, b=w) -> y; dgrad(a=dy, b=w) -> dx (x_like gives dx's shape/format);
    wgrad(a=x, b=dy) -> dw. Asymmetric padding: the input is padded explicitly (PyTorch has no
    asymmetric conv padding), dgrad's result is sliced back.
    """
    import torch
    import torch.nn.functional as F

    nd = problem.ndim
    sym = problem.symmetric_padding
    pad = list(problem.pad_pre) if sym else [0] * nd
    stride, dil, groups = list(problem.stride), list(problem.dilation), problem.groups
    aten = torch.ops.aten
    if problem.direction == "fprop":
        x = a if sym else F.pad(a, _pad_arg(problem))
        conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
        return conv(x, b, None, stride, pad, dil, groups)
    if problem.direction == "dgrad":
        w = b
        if sym:
            xl = x_like
        else:
            shape = [s + p + q for s, p, q in zip(problem.spatial, problem.pad_pre,
                                                  problem.pad_post, strict=True)]
            xl = torch.empty((problem.n, problem.c, *shape), device=a.device, dtype=a.dtype)
            if problem.layout == "nhwc" and nd in (2, 3):
                xl = xl.contiguous(memory_format=torch.channels_last if nd == 2
                                   else torch.channels_last_3d)
        dx = aten.convolution_backward(a, xl, w, None, stride, pad, dil, False, [0] * nd, groups,
                                       [True, False, False])[0]
        if not sym:
            idx = [slice(None), slice(None)] + [slice(p, p + s) for p, s in
                                                zip(problem.pad_pre, problem.spatial, strict=True)]
            dx = dx[tuple(idx)]
        return dx
    x = a if sym else F.pad(a, _pad_arg(problem))
    return aten.convolution_backward(b, x, x_like, None, stride, pad, dil, False, [0] * nd,
                                     groups, [False, True, False])[1]


def reference_cuda(problem: ConvProblem, a: Any, b: Any, x_like: Any, w_like: Any) -> Any:
    """float64 result of the problem on the upcast inputs, by PyTorch's native CUDA kernels."""
    import torch

    a64, b64 = a.double(), b.double()
    with torch.backends.cudnn.flags(enabled=False):
        if problem.direction == "wgrad":
            return torch_conv(problem, a64, b64, w_like.double())
        if problem.direction == "dgrad":
            return torch_conv(problem, a64, b64, x_like.double())
        return torch_conv(problem, a64, b64)



# ---------------------------------------------------------------------- reference math (torch)
def padded(problem: ConvProblem) -> tuple[ConvProblem, bool]:
    """PyTorch pads symmetrically; an asymmetric problem runs as a pre-padded input with pad 0."""
    if problem.symmetric_padding:
        return problem, False
    from dataclasses import replace

    sp = tuple(s + a + b for s, a, b in zip(problem.spatial, problem.pad_pre, problem.pad_post,
                                            strict=True))
    zero = (0,) * problem.ndim
    return replace(problem, spatial=sp, pad_pre=zero, pad_post=zero), True


def run_direction(problem: ConvProblem, x: Any, w: Any, dy: Any) -> Any:
    """The output of `problem.direction` on symmetric-padded tensors (x/w/dy as needed)."""
    import torch

    nd = problem.ndim
    stride, pad, dil = list(problem.stride), list(problem.pad_pre), list(problem.dilation)
    if problem.direction == "fprop":
        return torch.ops.aten.convolution(x, w, None, stride, pad, dil, False, [0] * nd,
                                          problem.groups)
    mask = [True, False, False] if problem.direction == "dgrad" else [False, True, False]
    gx, gw, _ = torch.ops.aten.convolution_backward(dy, x, w, None, stride, pad, dil, False,
                                                    [0] * nd, problem.groups, mask)
    return gx if problem.direction == "dgrad" else gw


def reference_cpu(problem: ConvProblem, x: Any, w: Any, dy: Any) -> Any:
    """float64 result on the CPU."""
    import torch

    def up(t: Any) -> Any:
        return None if t is None else t.detach().to("cpu", torch.float64).contiguous()

    return run_direction(problem, up(x), up(w), up(dy))

