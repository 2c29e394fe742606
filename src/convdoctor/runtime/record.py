"""From a model and its example inputs to the ConvProblems its convolutions pose.

One forward pass with routed sites installed records each conv call's real signature (shapes,
strides, dtype, layout, which gradients are needed); buffers (batch-norm statistics) are put back
afterwards. Each recorded call gives a ConvProblem per direction it runs: fprop, and in training
dgrad (when the input needs a gradient) and wgrad (when the weight does), under the process's math
mode (TF32 or strict) and determinism.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import UsageError
from ..measure.steps import call_model
from ..problem import ConvProblem
from . import site as _site
from .state import is_optimized

Record = dict[str, Any]


def device_of(model: torch.nn.Module) -> torch.device:
    """Where the model lives: its first parameter's device, else its first buffer's, else CPU."""
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def record_calls(model: torch.nn.Module, inputs: Any, train: bool,
                 sites: dict[str, _site.Site]) -> dict[str, list[Record]]:
    """Run the model once on `inputs` and return each site's recorded calls (site name -> calls,
    in call order); the model's buffers are left as they were."""
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    for s in sites.values():
        s.recording = []
    try:
        with torch.set_grad_enabled(bool(train)):
            call_model(model, inputs)
        return {name: list(s.recording or []) for name, s in sites.items()}
    finally:
        for s in sites.values():
            s.recording = None
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)


class _CallView:
    """A traced call as `ConvProblem.from_conv_call` reads it (the inner call the engine runs)."""

    def __init__(self, rec: Record) -> None:
        self.x_shape = rec["x_shape"]
        self.w_shape = rec["w_shape"]
        self.y_shape = rec["y_shape"]
        self.stride = rec["stride"]
        self.padding = rec["padding"]
        self.dilation = rec["dilation"]
        self.groups = rec["groups"]
        self.transposed = rec["transposed"]
        self.padding_mode = "zeros"
        self.dtype = rec["dtype"]
        self.memory_format = rec["memory_format"]


def _math_mode() -> str:
    return "tf32" if torch.backends.cudnn.allow_tf32 else "strict"


def _deterministic() -> bool:
    return bool(torch.are_deterministic_algorithms_enabled() or torch.backends.cudnn.deterministic)


def problems_for(rec: Record, train: bool) -> dict[str, ConvProblem]:
    """direction -> ConvProblem for one recorded call (UsageError when it cannot be modelled)."""
    view = _CallView(rec)
    dirs = ["fprop"]
    if train and rec["grad"]:
        if rec["x_requires_grad"]:
            dirs.append("dgrad")
        if rec["w_requires_grad"]:
            dirs.append("wgrad")
    return {d: ConvProblem.from_conv_call(view, d, math=_math_mode(),
                                          deterministic=_deterministic()) for d in dirs}


@dataclass
class Calls:
    """The recorded calls, deduplicated: per site its distinct signatures (site name -> signature
    key -> (the first call with it, direction -> problem)), and every distinct problem (problem key
    -> problem, in call order), with the number of recorded calls that run each problem."""

    per_site: dict[str, dict[Any, tuple[Record, dict[str, ConvProblem]]]] = field(
        default_factory=dict)
    problems: dict[str, ConvProblem] = field(default_factory=dict)
    uses: dict[str, int] = field(default_factory=dict)


def distinct_calls(records: dict[str, list[Record]], train: bool, notes: list[str]) -> Calls:
    """Deduplicate `records` (see `Calls`); a call that cannot be modelled as a ConvProblem gets
    no problems (PyTorch's path) and a note."""
    out = Calls()
    for name, recs in records.items():
        sigs: dict[Any, tuple[Record, dict[str, ConvProblem]]] = {}
        for rec in recs:
            if rec["key"] in sigs:
                for p in sigs[rec["key"]][1].values():
                    out.uses[p.key()] = out.uses.get(p.key(), 0) + 1
                continue
            try:
                probs = problems_for(rec, train)
            except Exception as exc:  # noqa: BLE001 - an unmodellable call keeps PyTorch's path
                notes.append(f"{name}: not tunable ({exc}); PyTorch's path")
                probs = {}
            sigs[rec["key"]] = (rec, probs)
            for p in probs.values():
                out.problems.setdefault(p.key(), p)
                out.uses[p.key()] = out.uses.get(p.key(), 0) + 1
        out.per_site[name] = sigs
    return out


def model_problems(model: torch.nn.Module, example_inputs: Any, train: bool = True
                   ) -> list[ConvProblem]:
    """The unique ConvProblems `optimize` would look up for this model and input (in its current
    layout), in call order; the model is left exactly as it was. UsageError when a call cannot
    be modelled."""
    if is_optimized(model):
        raise UsageError("model_problems: the model is optimized; call convdoctor.restore first")
    dev = device_of(model).type
    sites = {name: _site.install(m, name, dev) for name, m in model.named_modules()
             if _site.routable(m)}
    try:
        records = record_calls(model, example_inputs, train, sites)
    finally:
        for m in model.modules():
            _site.uninstall(m)
    out: dict[str, ConvProblem] = {}
    for recs in records.values():
        for rec in recs:
            for p in problems_for(rec, train).values():
                out.setdefault(p.key(), p)
    return list(out.values())
