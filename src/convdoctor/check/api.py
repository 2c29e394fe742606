"""check_model: trace a model on meta tensors and check every convolution it runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..report import Finding, Report
from .checker import check_call
from .shapes import numel
from .trace import ConvCall, TraceFailure, trace

_SIZE_MESSAGES = re.compile(
    r"Output size is too small|Kernel size can't be greater|Padding size should be less than|"
    r"Padding value causes wrapping around more than once|input size .* is too small|"
    r"Only zero batch or zero channel inputs are supported|Invalid computed output size|"
    r"Expected more than 1 value per channel when training|output size is too small|"
    r"Output size is too small|too small for the", re.I)


def _size_failure(f: TraceFailure | None) -> bool:
    return f is not None and bool(_SIZE_MESSAGES.search(f.message))


def check_model(model: Any, example_inputs: Any = None, *, input_shape: Sequence[int] | None = None,
                dtype: Any = "float32", memory_format: str = "contiguous", device: str = "cuda",
                train: bool = True, min_input: bool = True, allow_tf32: bool | None = None,
                cudnn_version: int | None = None, gpu_memory_bytes: int | None = None) -> Report:
    """Trace `model` with meta tensors (no GPU, no memory) and check every convolution it runs.

    Findings carry the module path (`layer3.1.conv2`) and the shapes seen. When an input is too
    small, the report also gives the smallest input the whole model accepts (`min_input=False` skips
    that search). `dtype=None` keeps the dtypes of the model and the example inputs.
    """
    res = trace(model, example_inputs, input_shape=input_shape, dtype=dtype,
                memory_format=memory_format, train=train)
    report = Report(kind="check")
    seen: set[tuple[Any, ...]] = set()
    errors_at: set[str] = set()
    for call in res.calls:
        key = (call.layer, call.key())
        if key in seen:
            continue
        seen.add(key)
        fs = check_call(call, device=device, allow_tf32=allow_tf32, cudnn_version=cudnn_version)
        report.extend(fs)
        if any(f.severity == "error" for f in fs):
            errors_at.add(call.layer)
    f = res.failure
    if f is not None and f.layer not in errors_at:
        fid = "input-too-small" if _size_failure(f) else "model-error"
        title = (f"{f.op} fails: the feature map is too small here" if fid == "input-too-small"
                 else f"the model raises {f.exc_type} in {f.op}")
        report.add(Finding(fid, "error", title, f.message,
                           "feed a larger input or remove a downsampling step before this layer"
                           if fid == "input-too-small" else
                           "fix the model code at this layer (convdoctor traced it with meta tensors)",
                           layer=f.layer or None, data={"op": f.op}))
    if min_input and any(x.id == "input-too-small" for x in report.findings) and len(res.input_shapes) == 1:
        smallest = min_input_shape(model, res.input_shapes[0], dtype=dtype, memory_format=memory_format,
                                   train=train, device=device)
        if smallest is not None:
            report.facts["min_input_shape"] = list(smallest)
            text = "x".join(str(s) for s in smallest[2:])
            report.findings = [
                Finding(x.id, x.severity, x.title,
                        f"{x.message}\nThe whole model accepts spatial inputs from {text} up "
                        f"(input shape {tuple(smallest)}).", x.fix, x.evidence, x.sources, x.layer,
                        {**x.data, "min_input_shape": list(smallest)})
                if x.id == "input-too-small" else x for x in report.findings]
    if device == "cuda" and gpu_memory_bytes and report.ok:
        mem = estimate_memory(res.calls, train=train)
        report.facts["memory_estimate_bytes"] = mem
        if mem["total"] > gpu_memory_bytes:
            report.add(Finding(
                "memory-estimate", "warning",
                f"estimated {mem['total'] / 2**30:.1f} GiB > GPU memory {gpu_memory_bytes / 2**30:.1f} GiB",
                f"Convolution activations {mem['activations'] / 2**30:.1f} GiB"
                f"{' (kept for backward)' if train else ''} + parameters {mem['weights'] / 2**30:.2f} GiB "
                f"+ largest cuDNN workspace estimate {mem['workspace'] / 2**30:.1f} GiB.",
                "lower the batch size, use bf16/fp16 with autocast, or activation checkpointing "
                "(torch.utils.checkpoint)", data=mem))
    report.facts.update({
        "device": device, "convolutions": len(res.calls), "distinct_problems": len({c.key() for c in res.calls}),
        "input_shapes": [list(s) for s in res.input_shapes], "dtype": str(dtype),
        "memory_format": memory_format, "train": train,
        "trace_failure": None if f is None else {"layer": f.layer, "op": f.op, "message": f.message},
        "layers": [{"layer": c.layer, "op": c.op, "x": list(c.x_shape), "w": list(c.w_shape),
                    "y": list(c.y_shape)} for c in res.calls],
    })
    return report


_ELEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "complex64": 8, "complex128": 16,
         "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1}


def estimate_memory(calls: Sequence[ConvCall], *, train: bool) -> dict[str, int]:
    """Rough GPU memory for the convolutions: activations (all conv inputs and outputs kept for
    backward when training, the largest input+output pair otherwise), weights, and a workspace
    estimate (the largest conv output again: cuDNN's fast engines ask for up to that order)."""
    acts = 0
    peak = 0
    weights = 0
    ws = 0
    layers: set[str] = set()
    for c in calls:
        e = _ELEM.get(c.dtype, 4)
        xb, yb = numel(c.x_shape) * e, numel(c.y_shape) * e
        acts += xb + yb
        peak = max(peak, xb + yb)
        if c.layer not in layers:
            weights += numel(c.w_shape) * _ELEM.get(c.weight_dtype, 4) * (4 if train else 1)
            layers.add(c.layer)
        ws = max(ws, yb)
    activations = acts if train else peak
    return {"activations": activations, "weights": weights, "workspace": ws,
            "total": activations + weights + ws}


def min_input_shape(model: Any, shape: Sequence[int], *, dtype: Any = "float32",
                    memory_format: str = "contiguous", train: bool = True,
                    device: str = "cuda", limit: int = 1 << 16) -> tuple[int, ...] | None:
    """The smallest spatial size per dim (others held large) for which nothing is too small."""
    from .trace import torch_dtype

    shape = tuple(int(s) for s in shape)
    if len(shape) < 3:
        return None
    dt = None if dtype is None else torch_dtype(dtype)

    def fits(sp: Sequence[int]) -> bool:
        import torch

        x = torch.empty((*shape[:2], *sp), dtype=dt or torch.float32, device="meta")
        r = trace(model, (x,), dtype=dtype, memory_format=memory_format, train=train)
        if r.failure is not None:
            return False
        for c in r.calls:
            if any(f.id in ("input-too-small", "empty-tensor") for f in check_call(c, device=device,
                                                                                   performance=False)):
                return False
        return True

    big = max(max(shape[2:]), 1)
    while not fits([big] * (len(shape) - 2)):
        big *= 2
        if big > limit:
            return None
    result = []
    for i in range(len(shape) - 2):
        lo, hi = 1, big  # hi fits
        while lo < hi:
            mid = (lo + hi) // 2
            sp = [big] * (len(shape) - 2)
            sp[i] = mid
            if fits(sp):
                hi = mid
            else:
                lo = mid + 1
        result.append(hi)
    if not fits(result):
        # Per-dim minima need not combine (e.g. train-mode BatchNorm needs > 1 value at the bottom
        # of a U-Net): grow all dims together to the smallest size that runs.
        lo, hi = max(result), big
        while lo < hi:
            mid = (lo + hi) // 2
            if fits([max(r, mid) for r in result]):
                hi = mid
            else:
                lo = mid + 1
        result = [max(r, hi) for r in result]
    return (*shape[:2], *result)

