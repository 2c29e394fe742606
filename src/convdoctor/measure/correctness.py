"""Correctness of a candidate's output against a float64 reference computed on the same inputs.

Two error measures, each with its tolerance table (data/):
- GPU candidates: norm-wise `||out - ref||_2 / ||ref||_2` (`compare_norm`), with a tolerance per
  dtype and math mode that grows with the reduction length (`tolerance`, data/tolerances.json);
- CPU candidates: `max |out - ref| / max |ref|` (`compare_max`, data/tolerances_cpu.json).
Any NaN or Inf in an output fails, whatever the measure.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..problem import ConvProblem


@dataclass(frozen=True)
class Correctness:
    ok: bool
    max_rel_err: float
    tolerance: float
    detail: str = ""


@functools.lru_cache(maxsize=2)
def _table(name: str) -> dict[str, Any]:
    text = resources.files("convdoctor.measure").joinpath(f"data/{name}").read_text("utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def reduction_length(problem: ConvProblem) -> int:
    """How many products each output element sums (sets how rounding error grows)."""
    kernel = math.prod(problem.kernel)
    if problem.direction == "fprop":
        return (problem.c // problem.groups) * kernel
    if problem.direction == "dgrad":
        # each dx element gathers from about K/g * kernel / prod(stride) dy elements
        return max(1, (problem.k // problem.groups) * kernel // max(1, math.prod(problem.stride)))
    return problem.n * math.prod(problem.out_spatial())


def tolerance(problem: ConvProblem) -> float:
    """Norm-wise relative error allowed for this problem's dtype, math mode and reduction length."""
    table = _table("tolerances.json")
    key = f"float32/{problem.math}" if problem.dtype == "float32" else problem.dtype
    base = float(table["base"][key])
    u, growth, cap = (float(table[k]) for k in ("unit_roundoff_fp32", "growth", "growth_cap"))
    return max(base, min(cap, growth * math.sqrt(reduction_length(problem)) * u))


def tolerance_cpu(problem: ConvProblem) -> float:
    """Max-norm relative error allowed for a CPU candidate of this dtype and math mode."""
    return float(_table("tolerances_cpu.json")["tolerances"][f"{problem.dtype}/{problem.math}"])


def rel_error(num: float, den: float) -> float:
    """||a-b|| / ||b|| from the two norms; a zero reference counts any difference as error 1."""
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def compare_norm(problem: ConvProblem, out: Any, ref: Any) -> Correctness:
    """Norm-wise relative error of `out` against the float64 `ref`; non-finite values fail."""
    import torch

    tol = tolerance(problem)
    o = out.double()
    if not bool(torch.isfinite(o).all().item()):
        bad = int((~torch.isfinite(o)).sum().item())
        return Correctness(False, math.inf, tol, f"{bad} of {o.numel()} outputs are NaN/Inf "
                           "(poisoned output not fully written, or overflow)")
    num = float(torch.linalg.vector_norm(o - ref).item())
    den = float(torch.linalg.vector_norm(ref).item())
    err = rel_error(num, den)
    ok = err <= tol
    return Correctness(ok, err, tol,
                       "" if ok else f"norm-wise relative error {err:.3g} > tolerance {tol:.3g}")


def compare_max(out: Any, ref: Any, tol: float) -> Correctness:
    """Max-norm relative error of `out` (any dtype/device) against the float64 `ref`."""
    import torch

    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if tuple(o.shape) != tuple(r.shape):
        return Correctness(False, math.inf, tol,
                           f"output shape {tuple(o.shape)} != expected {tuple(r.shape)}")
    finite = torch.isfinite(o)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return Correctness(False, math.inf, tol,
                           f"{bad} of {o.numel()} outputs are NaN/Inf (never written, or overflow)")
    scale = float(r.abs().max()) if r.numel() else 0.0
    err = float((o - r).abs().max()) if r.numel() else 0.0
    rel = err / scale if scale > 0 else err
    return Correctness(rel <= tol, rel, tol, "")
