"""What `optimize` leaves on a model so that `restore` can undo it exactly, and `report_of` /
`is_optimized`, which read it; `state_kept`, which puts a model's statistics and gradients back
after `optimize` timed it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from .report import OptimizeReport

ATTR = "_convdoctor_state"


@dataclass
class OptimizedState:
    report: OptimizeReport
    modules: list[torch.nn.Module] = field(default_factory=list)
    # tensors whose layout was changed in place, with the layout to put back
    param_formats: list[tuple[torch.nn.Parameter | torch.Tensor, torch.memory_format]] = field(
        default_factory=list)
    hooks: list[Any] = field(default_factory=list)

    def __deepcopy__(self, memo: dict[int, Any]) -> OptimizedState:
        return self


def is_optimized(model: torch.nn.Module) -> bool:
    return ATTR in model.__dict__


def report_of(model: torch.nn.Module) -> OptimizeReport | None:
    st = model.__dict__.get(ATTR)
    return None if st is None else st.report


def attach(model: torch.nn.Module, state: OptimizedState) -> None:
    model.__dict__[ATTR] = state


def detach(model: torch.nn.Module) -> OptimizedState | None:
    return model.__dict__.pop(ATTR, None)


@contextmanager
def state_kept(model: torch.nn.Module) -> Iterator[None]:
    """Run timing steps on `model` and put its buffers (batch-norm statistics) and gradients
    back afterwards. The gradients are set aside (None while inside): a backward accumulates
    into an existing `.grad` in place."""
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    grads = [(p, p.grad) for p in model.parameters()]
    for p, _ in grads:
        p.grad = None
    try:
        yield
    finally:
        with torch.no_grad():
            for b, v in buffers:
                b.copy_(v)
        for p, g in grads:
            p.grad = g
