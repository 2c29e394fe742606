"""Pure logic of the GPU backend, with no torch or cudnn import (unit-tested on any machine).

- which cuDNN numerical/behaviour notes a problem forbids (PyTorch's own filter, made explicit),
- candidate keys and plan names (parse, dedupe in a stable order),
- knob value enumeration, bounded,
- correctness tolerances per dtype/math mode,
- tensor dims and strides per layout, with 1D mapped to 2D for cuDNN.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...problem import ConvProblem

CUDNN_PREFIX = "cudnn:"
TORCH_KEYS = ("torch:benchmark", "torch:heuristic", "torch:cudnn-off")
# PyTorch's heuristic path run in the other memory layout: inputs converted in, the output converted
# back, both conversions inside the timed run (what `optimize` pays per call on this route). Offered
# for 2D/3D NCHW problems, where PyTorch otherwise runs its NCHW path as given.
LAYOUT_KEYS = ("torch:heuristic+nhwc",)
# A 1x1 convolution (no padding, one group) run as a matrix product by cuBLAS
# (`convdoctor.tune.gemm`); the subsampling copy of a strided input is inside the timed run.
GEMM_KEYS = ("torch:gemm",)
# A grouped (not depthwise) 1D/2D convolution as one batched matrix product over the groups
# (`convdoctor.tune.im2col`); the patch copy (and dgrad's fold) are inside the timed run.
IM2COL_KEYS = ("torch:im2col",)
# "cudnn-dual:<plan name>": a stride-1 fprop or dgrad run as the OTHER direction of its dual problem
# (`dual_problem`) with the flipped, channel-swapped weight (`convdoctor.tune.xform`); the weight's
# transform is a kernel inside the timed run.
DUAL_PREFIX = "cudnn-dual:"
PLAN_PREFIXES = (CUDNN_PREFIX, DUAL_PREFIX)
# "triton:dw_<config>": a depthwise fprop or dgrad by convdoctor's own Triton kernel
# (`convdoctor.kernels.depthwise`), one key per tile configuration
TRITON_PREFIX = "triton:dw_"
# "triton:wg_<config>": an ungrouped wgrad by convdoctor's split-reduction Triton kernel
# (`convdoctor.kernels.wgrad`), one key per configuration
TRITON_WG_PREFIX = "triton:wg_"
# "triton:sc_<config>": an ungrouped dgrad of a layer with at most 4 input channels by convdoctor's
# direct Triton kernel (`convdoctor.kernels.smallc`), one key per configuration
TRITON_SC_PREFIX = "triton:sc_"
# "triton:fp_<config>": an ungrouped fp32 1D/2D fprop by convdoctor's implicit-GEMM Triton kernel
# reading NCHW in place (`convdoctor.kernels.fprop`), one key per configuration
TRITON_FP_PREFIX = "triton:fp_"
TRITON_PREFIXES = (TRITON_PREFIX, TRITON_WG_PREFIX, TRITON_SC_PREFIX, TRITON_FP_PREFIX)
# "twin:<key>": candidate <key> run in the torch:heuristic child process, so the bench referee can
# compare a choice with PyTorch's heuristic path inside one process (never a tuning candidate)
TWIN_PREFIX = "twin:"


def gemm_eligible(problem: ConvProblem) -> bool:
    """The problem is exactly a matrix product: 1x1 kernel, no padding, one group."""
    return (problem.groups == 1 and all(k == 1 for k in problem.kernel)
            and not any(problem.pad_pre) and not any(problem.pad_post))


def triton_dw_configs(problem: ConvProblem) -> tuple[str, ...]:
    """The depthwise kernel's configurations offered for `problem` (none when the kernel does not
    run it: not depthwise, wgrad, 3D, or a batch over the grid's limit)."""
    from ...kernels import depthwise

    if depthwise.unfit(problem) is not None:
        return ()
    # the kernel writes planes of the output (fprop) or of the input (dgrad)
    plane = problem.out_spatial() if problem.direction == "fprop" else problem.spatial
    coarse = None
    if problem.direction == "dgrad" and any(s > 1 for s in problem.stride):
        coarse = math.prod(-(-n // s) for n, s in zip(problem.spatial, problem.stride, strict=True))
    return depthwise.configs_for(problem.layout, math.prod(plane), coarse)


def triton_wg_configs(problem: ConvProblem) -> tuple[str, ...]:
    """The wgrad kernel's configurations offered for `problem` (none when it is not an ungrouped
    wgrad with a weight of at most `wgrad.MAX_WEIGHT` elements in fp32, fp16 or bf16)."""
    from ...kernels import wgrad

    if wgrad.unfit(problem) is not None:
        return ()
    return wgrad.configs_for(problem.k)


def triton_sc_configs(problem: ConvProblem) -> tuple[str, ...]:
    """The small-C dgrad kernel's configurations offered for `problem` (none unless it is an
    ungrouped dgrad with at most `smallc.MAX_C` input channels; strided ones get sub-pixel
    configurations only)."""
    from ...kernels import smallc

    if smallc.unfit(problem) is not None:
        return ()
    return smallc.configs_for(problem.k, strided=any(s > 1 for s in problem.stride))


def triton_fp_configs(problem: ConvProblem) -> tuple[str, ...]:
    """The forward kernel's configurations offered for `problem` (none unless it is an ungrouped
    fp32 1D/2D fprop)."""
    from ...kernels import fprop

    return fprop.configs_for(problem)


# `torch:im2col` allocates its patch matrix per call: larger ones are not offered
IM2COL_MAX_BYTES = 1 << 30


def im2col_bytes(problem: ConvProblem) -> int:
    """Bytes `torch:im2col` allocates for its patches: N x C x kernel x output positions, twice
    for dgrad (the products and their permuted copy for the fold, in fp32 for fp16/bf16)."""
    from ...problem import DTYPE_BYTES

    one = problem.n * problem.c * math.prod(problem.kernel) * math.prod(problem.out_spatial())
    if problem.direction == "dgrad":
        return 2 * one * 4
    return one * DTYPE_BYTES[problem.dtype]


def im2col_unfit(problem: ConvProblem) -> str | None:
    """None when `torch:im2col` is offered for `problem`, else why not: 1D/2D grouped convolutions
    that are not depthwise (those have `triton:dw_`), with a patch matrix of at most 1 GiB."""
    if problem.ndim not in (1, 2):
        return f"{problem.ndim}D: im2col runs 1D and 2D convolutions only"
    if problem.groups < 2:
        return "offered for grouped convolutions only (this one has one group)"
    if problem.groups == problem.c == problem.k:
        return "depthwise: the depthwise kernel (`triton:dw_`) covers it"
    nbytes = im2col_bytes(problem)
    if nbytes > IM2COL_MAX_BYTES:
        return f"its patch matrix would take {nbytes / 2**30:.1f} GiB (at most 1 GiB)"
    return None


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


def is_plan_key(key: str) -> bool:
    """A key run by a cuDNN plan through cudnn-frontend (`cudnn:` or `cudnn-dual:`)."""
    return key.startswith(PLAN_PREFIXES)


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
    text = resources.files("convdoctor.tune.gpu").joinpath("data/knob_numbers.json").read_text()
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


# ---------------------------------------------------------------- tolerances
@functools.lru_cache(maxsize=1)
def _tolerance_table() -> dict[str, object]:
    text = resources.files("convdoctor.tune.gpu").joinpath("data/tolerances.json").read_text()
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
    table = _tolerance_table()
    base_tab: dict[str, float] = table["base"]  # type: ignore[assignment]
    key = f"float32/{problem.math}" if problem.dtype == "float32" else problem.dtype
    base = float(base_tab[key])
    u = float(table["unit_roundoff_fp32"])  # type: ignore[arg-type]
    growth = float(table["growth"])  # type: ignore[arg-type]
    cap = float(table["growth_cap"])  # type: ignore[arg-type]
    return max(base, min(cap, growth * math.sqrt(reduction_length(problem)) * u))


# ---------------------------------------------------------------- layouts
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


def io_roles(direction: str) -> tuple[tuple[str, str], str]:
    """(input roles, output role) of a direction: fprop x,w->y; dgrad dy,w->dx; wgrad x,dy->dw."""
    if direction == "fprop":
        return ("x", "w"), "y"
    if direction == "dgrad":
        return ("dy", "w"), "dx"
    if direction == "wgrad":
        return ("x", "dy"), "dw"
    raise ValueError(f"unknown direction {direction!r}")


def rel_error(num: float, den: float) -> float:
    """||a-b|| / ||b|| from the two norms; a zero reference counts any difference as error 1."""
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den
