"""Pure logic of the cuDNN engines, with no torch or cudnn import (unit-tested on any machine).

- the candidate keys: "cudnn:<plan name>" and "cudnn-dual:<plan name>", plan names parsed;
- which cuDNN numerical/behaviour notes a problem forbids (PyTorch's own filter, made explicit);
- the dual problem of a stride-1 fprop or dgrad;
- knob value enumeration, bounded;
- tensor dims and strides as cuDNN sees them, with 1D mapped to 2D.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from ..measure.buffers import packed_strides, role_shapes

if TYPE_CHECKING:
    from ..problem import ConvProblem

# "cudnn:<plan name>": a cuDNN engine configuration run through cudnn-frontend
CUDNN_PREFIX = "cudnn:"
# "cudnn-dual:<plan name>": a stride-1 fprop or dgrad run as the OTHER direction of its dual problem
# (`dual_problem`) with the flipped, channel-swapped weight (`xform.py`); the weight's transform is a
# kernel inside the timed run.
DUAL_PREFIX = "cudnn-dual:"


# Heuristic modes queried, in this order; "enum" marks plans added by engine/knob enumeration.
HEUR_MODES = ("A", "B", "FALLBACK")


# ---------------------------------------------------------------- notes
@dataclass(frozen=True)
class NoteFilter:
    """Numerical notes (cudnn.numerical_note names) whose engines are dropped, and why."""

    numeric: tuple[str, ...]
    reasons: tuple[str, ...]


def note_filter(problem: ConvProblem) -> NoteFilter:
    """The engines a problem's math mode and determinism forbid.

    Same rule as PyTorch's cuDNN v8 path (aten/src/ATen/native/cudnn/Conv_v8.cpp): DOWN_CONVERT_INPUTS
    always (such engines compute in a lower precision than the inputs), TENSOR_CORE for float32 in
    strict mode (fp32 tensor-core engines use TF32), NONDETERMINISTIC when determinism is required.
    """
    numeric = ["DOWN_CONVERT_INPUTS"]
    reasons = ["DOWN_CONVERT_INPUTS: computes in lower precision than its inputs"]
    if problem.dtype == "float32" and problem.math == "strict":
        numeric.append("TENSOR_CORE")
        reasons.append("TENSOR_CORE: float32 tensor-core engines use TF32 (math=strict forbids it)")
    if problem.deterministic:
        numeric.append("NONDETERMINISTIC")
        reasons.append("NONDETERMINISTIC: results may differ run to run (det=1 forbids it)")
    return NoteFilter(tuple(numeric), tuple(reasons))


# ---------------------------------------------------------------- plan names and keys
_PLAN_RE = re.compile(r"^eng(-?\d+)((?:_k\d+=-?\d+)*)$")
_KNOB_RE = re.compile(r"_k(\d+)=(-?\d+)")


def parse_plan_name(name: str) -> tuple[int, dict[int, int]]:
    """`eng0_k2=1_k3=0` -> (0, {2: 1, 3: 0}); knob numbers are cuDNN backend knob types.

    Raises ValueError for anything else.
    """
    m = _PLAN_RE.match(name.strip())
    if not m:
        raise ValueError(f"not a cuDNN plan name: {name!r} (expected e.g. 'eng0_k2=1_k3=0')")
    knobs = {int(k): int(v) for k, v in _KNOB_RE.findall(m.group(2))}
    return int(m.group(1)), knobs


def cudnn_key(plan_name: str) -> str:
    return CUDNN_PREFIX + plan_name


def plan_name_of(key: str) -> str | None:
    """The plan name inside a `cudnn:` candidate key, else None."""
    return key[len(CUDNN_PREFIX):] if key.startswith(CUDNN_PREFIX) else None


def dual_key(plan_name: str) -> str:
    return DUAL_PREFIX + plan_name


def dual_plan_name_of(key: str) -> str | None:
    """The plan name inside a `cudnn-dual:` candidate key, else None."""
    return key[len(DUAL_PREFIX):] if key.startswith(DUAL_PREFIX) else None


def dual_problem(problem: ConvProblem) -> ConvProblem | None:
    """The problem whose other direction computes this one, or None when there is none.

    At stride 1, the data gradient of a convolution is a forward convolution of dy with the weight
    flipped in space and its channel axes swapped within each group, padded by d*(r-1)-pad on each
    side (a transposed convolution is a convolution):
        dx[i] = sum_t dy[i + pad_pre - t*d] w[t] = sum_t' dy[i - (d*(r-1) - pad_pre) + t'*d] w[r-1-t']
    The map is its own inverse: a stride-1 fprop is the dgrad of its dual. So for a stride-1 fprop
    or dgrad problem P the dual D has the other direction, c = P.k, k = P.c, spatial = P's output
    spatial, the same kernel, dilation and groups, and padding d*(r-1) - P's padding; its inputs are
    P's inputs (the weight transformed) and its output is P's output, same shapes and layout.
    None for wgrad, a stride above 1, or padding above d*(r-1) (the dual would need negative
    padding)."""
    from dataclasses import replace

    if problem.direction not in ("fprop", "dgrad") or any(s != 1 for s in problem.stride):
        return None
    span = [d * (r - 1) for d, r in zip(problem.dilation, problem.kernel, strict=True)]
    pre = tuple(s - p for s, p in zip(span, problem.pad_pre, strict=True))
    post = tuple(s - p for s, p in zip(span, problem.pad_post, strict=True))
    if any(p < 0 for p in pre + post):
        return None
    return replace(problem, direction="dgrad" if problem.direction == "fprop" else "fprop",
                   c=problem.k, k=problem.c, spatial=problem.out_spatial(), pad_pre=pre,
                   pad_post=post)


def dedupe(names: Iterable[str]) -> list[str]:
    """First occurrence wins; order is kept (heuristic rank A, then B, then fallback, then enum)."""
    seen: set[str] = set()
    out: list[str] = []
    for n in names:
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


# ---------------------------------------------------------------- knobs
def knob_values(min_value: int, max_value: int, stride: int, limit: int = 3) -> list[int]:
    """Up to `limit` values of a knob's range: both ends first, then evenly spaced inner values."""
    if stride <= 0 or max_value < min_value:
        return [min_value]
    count = (max_value - min_value) // stride + 1
    if count <= limit:
        return [min_value + i * stride for i in range(count)]
    picks = {0, count - 1}
    if limit > 2:
        for j in range(1, limit - 1):
            picks.add(round(j * (count - 1) / (limit - 1)))
    return [min_value + i * stride for i in sorted(picks)][:max(limit, 1)]


def knob_combinations(knobs: Sequence[tuple[object, int, int, int]], *, per_knob: int = 3,
                      limit: int = 6) -> list[dict[object, int]]:
    """Bounded knob settings for one engine: `knobs` are (type, min, max, stride).

    The first setting is every knob at its minimum; the rest walk the cartesian product of each
    knob's `knob_values` in a fixed order, at most `limit` settings in all.
    """
    if not knobs:
        return [{}]
    axes = [[(t, v) for v in knob_values(lo, hi, st, per_knob)] for t, lo, hi, st in knobs]
    out: list[dict[object, int]] = []
    for combo in itertools.product(*axes):
        out.append(dict(combo))
        if len(out) >= limit:
            break
    return out


def knob_axis(min_value: int, max_value: int, stride: int, limit: int = 32) -> list[int]:
    """Every value of a knob's range when there are at most `limit`, else `limit` spread values
    (both ends kept): the axis a knob-space search walks."""
    if stride <= 0 or max_value < min_value:
        return [min_value]
    if (max_value - min_value) // stride + 1 <= limit:
        return list(range(min_value, max_value + 1, stride))
    return knob_values(min_value, max_value, stride, limit)


def neighbor_settings(axes: Sequence[Sequence[int]], seed: Sequence[int]) -> list[tuple[int, ...]]:
    """Knob settings one knob away from `seed`: each knob in turn walks its whole axis while the
    others keep the seed's values (the seed itself excluded, no duplicates, a fixed order)."""
    if len(axes) != len(seed):
        raise ValueError(f"{len(seed)} seed values for {len(axes)} knobs")
    base = tuple(int(v) for v in seed)
    out: list[tuple[int, ...]] = []
    seen = {base}
    for j, axis in enumerate(axes):
        for v in axis:
            c = base[:j] + (int(v),) + base[j + 1:]
            if c not in seen:
                seen.add(c)
                out.append(c)
    return out


@functools.lru_cache(maxsize=1)
def _knob_table() -> dict[str, int]:
    text = resources.files("convdoctor.engines").joinpath("data/knob_numbers.json").read_text()
    return {str(k): int(v) for k, v in json.loads(text)["numbers"].items()}


def knob_number_by_name(knob_type: object) -> int | None:
    """The plan-name knob number of a frontend knob type, from its name (`knob_type.TILEK` ->
    13, data/knob_numbers.json), or None for a name the table does not list."""
    name = str(knob_type).rsplit(".", 1)[-1].split(":")[0].strip().upper()
    return _knob_table().get(name)


def knob_number_map(base: dict[int, int], changed: dict[object, dict[int, int]]
                    ) -> dict[object, int]:
    """Which cuDNN knob number (the `k<n>` of plan names) each frontend knob type is.

    cudnn-frontend's Python knob types are numbered differently from the backend's knob numbers
    that plan names carry. `base` is the parsed knobs of a plan built with every knob at one
    setting; `changed[t]` the parsed knobs of the same setting with only knob type `t` changed.
    A type maps to the one knob number whose value differs; types with no single difference
    (the change was not accepted, or did not show in the name) are left out."""
    out: dict[object, int] = {}
    for t, knobs in changed.items():
        diff = [n for n in set(base) | set(knobs) if base.get(n) != knobs.get(n)]
        if len(diff) == 1:
            out[t] = diff[0]
    return out


def cudnn_dims_strides(problem: ConvProblem, role: str) -> tuple[list[int], list[int]]:
    """Dims and strides cuDNN sees for a role; a 1D problem becomes 2D with H=1."""
    shape = role_shapes(problem)[role]
    if problem.ndim == 1:
        dims = (shape[0], shape[1], 1, shape[2])
        return list(dims), list(packed_strides(dims, problem.layout))
    return list(shape), list(packed_strides(shape, problem.layout))


def cudnn_conv_params(problem: ConvProblem) -> dict[str, list[int]]:
    """pre_padding, post_padding, stride, dilation for cuDNN (1D: H axis with 0 pad, 1 stride)."""
    if problem.ndim == 1:
        return {"pre_padding": [0, problem.pad_pre[0]], "post_padding": [0, problem.pad_post[0]],
                "stride": [1, problem.stride[0]], "dilation": [1, problem.dilation[0]]}
    return {"pre_padding": list(problem.pad_pre), "post_padding": list(problem.pad_post),
            "stride": list(problem.stride), "dilation": list(problem.dilation)}


