"""A problem's tensors by role (x/dx, w/dw, y/dy): shapes, the strides of its layout, allocation.

Roles of a direction: fprop x, w -> y; dgrad dy, w -> dx; wgrad x, dy -> dw. A 1D problem's
tensors keep PyTorch's 3-dim shapes; their strides are the 2D layout's without the unit H axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..problem import ConvProblem


def io_roles(direction: str) -> tuple[tuple[str, str], str]:
    """(input roles, output role) of a direction: fprop x,w->y; dgrad dy,w->dx; wgrad x,dy->dw."""
    if direction == "fprop":
        return ("x", "w"), "y"
    if direction == "dgrad":
        return ("dy", "w"), "dx"
    if direction == "wgrad":
        return ("x", "dy"), "dw"
    raise ValueError(f"unknown direction {direction!r}")


def packed_strides(dims: Sequence[int], layout: str) -> tuple[int, ...]:
    """Strides of a packed N,C,spatial... tensor: `nchw` row-major, `nhwc` channels-last."""
    nd = len(dims)
    if layout == "nchw":
        order = list(range(nd - 1, -1, -1))          # innermost first: last spatial ... N
    else:
        order = [1] + list(range(nd - 1, 1, -1)) + [0]  # C, last spatial ... first spatial, N
    strides = [0] * nd
    acc = 1
    for ax in order:
        strides[ax] = acc
        acc *= dims[ax]
    return tuple(strides)


def role_shapes(problem: ConvProblem) -> dict[str, tuple[int, ...]]:
    """Logical (PyTorch) shapes by role: x/dx, w/dw, y/dy."""
    x, w, y = problem.x_shape(), problem.w_shape(), problem.y_shape()
    return {"x": x, "dx": x, "w": w, "dw": w, "y": y, "dy": y}


def logical_strides(problem: ConvProblem, role: str) -> tuple[int, ...]:
    """Strides of the PyTorch tensor for a role (1D: the 2D strides without the unit H axis)."""
    shape = role_shapes(problem)[role]
    if problem.ndim == 1:
        s4 = packed_strides((shape[0], shape[1], 1, shape[2]), problem.layout)
        return (s4[0], s4[1], s4[3])
    return packed_strides(shape, problem.layout)


def torch_dtype(torch: Any, name: str) -> Any:
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def empty_for(problem: ConvProblem, role: str, device: Any = "cuda", dtype: Any = None) -> Any:
    """An uninitialised tensor for a role with the problem's layout (strides cuDNN expects)."""
    import torch

    dt = dtype if dtype is not None else torch_dtype(torch, problem.dtype)
    return torch.empty_strided(role_shapes(problem)[role], logical_strides(problem, role),
                               dtype=dt, device=device)


def fill_random(t: Any, gen: Any) -> None:
    """Fill `t` with uniform(-1, 1) noise drawn in fp32 from `gen` (then cast to t's dtype)."""
    import torch

    tmp = torch.empty(t.shape, dtype=torch.float32, device=t.device)
    tmp.uniform_(-1.0, 1.0, generator=gen)
    t.copy_(tmp)
