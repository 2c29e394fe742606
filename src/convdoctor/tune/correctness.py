"""Correctness of a candidate's output against a float64 reference (shared by every backend).

The error measure is max |out - ref| / max |ref| over the whole output, with ref computed in float64
on the same inputs upcast; any NaN or Inf in the output fails. Tolerances per dtype and math mode are
data (`data/tolerances.json`, with the reasoning and sources).
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources
from typing import Any

from ..problem import ConvProblem
from .backend import Correctness


@functools.lru_cache(maxsize=1)
def _tolerances() -> dict[str, float]:
    text = resources.files("convdoctor.tune").joinpath("data/tolerances.json").read_text()
    return {str(k): float(v) for k, v in json.loads(text)["tolerances"].items()}


def tolerance_for(problem: ConvProblem) -> float:
    return _tolerances()[f"{problem.dtype}/{problem.math}"]


def compare(out: Any, ref: Any, tolerance: float) -> Correctness:
    """out: a tensor of the candidate's output (any dtype/device); ref: float64 tensor."""
    import torch

    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if tuple(o.shape) != tuple(r.shape):
        return Correctness(False, math.inf, tolerance,
                           f"output shape {tuple(o.shape)} != expected {tuple(r.shape)}")
    finite = torch.isfinite(o)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return Correctness(False, math.inf, tolerance,
                           f"{bad} of {o.numel()} outputs are NaN/Inf (never written, or overflow)")
    scale = float(r.abs().max()) if r.numel() else 0.0
    err = float((o - r).abs().max()) if r.numel() else 0.0
    rel = err / scale if scale > 0 else err
    return Correctness(rel <= tolerance, rel, tolerance, "")


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


def reference(problem: ConvProblem, x: Any, w: Any, dy: Any) -> Any:
    """float64 result on the CPU."""
    import torch

    def up(t: Any) -> Any:
        return None if t is None else t.detach().to("cpu", torch.float64).contiguous()

    return run_direction(problem, up(x), up(w), up(dy))
