"""The model-level memory layout: channels_last applied to a model, and the measured decision.

channels_last converts the 4D/5D parameters and buffers in place (same Parameter objects, same
values, same state_dict keys), the 4D/5D floating inputs on the way in (a forward pre-hook) and the
outputs back to the caller's layout on the way out (a forward hook). With `channels_last="auto"`
two copies of the model (so its batch-norm statistics and gradients are untouched) are timed end to
end, eagerly and, where CUDA graphs may be used, as graph replays; channels_last is chosen only when
its faster mode is faster beyond noise (`verdicts.layout_verdict`).
"""

from __future__ import annotations

import copy
import gc
from collections.abc import Callable
from typing import Any

import torch

from ..measure.steps import extend_while_undecided, make_step, median, time_interleaved
from . import graphs as _graphs
from .options import OptimizeOptions
from .quiet import own_steps
from .report import OptimizeReport
from .state import OptimizedState
from .verdicts import (
    ROUNDS,
    Samples,
    layout_undecided,
    layout_verdict,
    per_round,
    replayed_only,
)


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`obj` with `fn` applied to every tensor in it (nested tuples, lists and dicts)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        return tuple(map_tensors(o, fn) for o in obj)
    if isinstance(obj, list):
        return [map_tensors(o, fn) for o in obj]
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj


def cl_format(t: torch.Tensor) -> torch.memory_format | None:
    return torch.channels_last if t.dim() == 4 else torch.channels_last_3d if t.dim() == 5 else None


def to_cl(t: torch.Tensor) -> torch.Tensor:
    fmt = cl_format(t)
    return t if fmt is None or not t.is_floating_point() else t.contiguous(memory_format=fmt)


def from_cl(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous() if t.dim() in (4, 5) else t


def _cl_pre_hook(module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
    return map_tensors(args, to_cl), map_tensors(kwargs, to_cl)


def _cl_post_hook(module: torch.nn.Module, args: Any, kwargs: Any, out: Any) -> Any:
    return map_tensors(out, from_cl)


def apply_channels_last(model: torch.nn.Module, state: OptimizedState | None) -> None:
    """Make `model` run channels_last; with a `state`, record what `restore` must undo."""
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            fmt = cl_format(t)
            if fmt is None or t.is_contiguous(memory_format=fmt) and not t.is_contiguous():
                continue
            if state is not None:
                state.param_formats.append((t, torch.contiguous_format))
            t.data = t.data.contiguous(memory_format=fmt)
    h1 = model.register_forward_pre_hook(_cl_pre_hook, with_kwargs=True)
    h2 = model.register_forward_hook(_cl_post_hook, with_kwargs=True)
    if state is not None:
        state.hooks += [h1, h2]


def has_nd_convs(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.modules.conv._ConvNd) and len(m.kernel_size) in (2, 3)
               for m in model.modules())


def graph_args(inputs: Any, use_cl: bool) -> tuple[torch.Tensor, ...] | None:
    """The positional tensors a graph of the model is captured on (what forward receives after
    the channels_last pre-hook when `use_cl`); None when the inputs are not all tensors."""
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if not all(isinstance(a, torch.Tensor) for a in args):
        return None
    return tuple(to_cl(a) for a in args) if use_cl else args


def decide_layout(model: torch.nn.Module, inputs: Any, opts: OptimizeOptions,
                  report: OptimizeReport, dev: str) -> bool:
    """channels_last or not: as asked, or (with "auto") measured, eagerly and, where CUDA graphs
    may be used, as graph replays; chosen only when its faster mode wins by the margin."""
    choice = opts.channels_last
    if choice is True or choice is False:
        report.channels_last = bool(choice)
        report.channels_last_reason = "asked for" if choice else "not asked for"
        return bool(choice)
    if not has_nd_convs(model):
        report.channels_last_reason = "no 2D/3D convolutions"
        return False
    try:
        samples = _measure_layouts(model, inputs, opts, report, dev)
    except Exception as exc:  # noqa: BLE001 - a model that cannot run channels_last keeps its layout
        report.failed_steps.append("layout")
        report.channels_last_reason = f"channels_last not measurable: {type(exc).__name__}: {exc}"
        report.notes.append(report.channels_last_reason)
        return False
    ms = {k: median(v) for k, v in samples.items()}
    report.layout_ms = ms
    win, need, a, c = layout_verdict(samples, opts.margin, rounds=per_round(opts.steps))
    report.margins["layout"] = need
    report.channels_last = win

    def shown(layout: str) -> str:
        g = ms.get(f"{layout}_graphed")
        return f"{ms[layout]:.3f} ms" + (f" (graphed {g:.3f} ms)" if g is not None else "")

    report.channels_last_reason = (
        f"measured end to end: as given {shown('as_given')}, channels_last "
        f"{shown('channels_last')} per {'training step' if opts.train else 'inference'}"
        + (f"; compared {a.replace('_', ' ')} with {c.replace('_', ' ')}"
           if "_graphed" in a + c else "")
        + f" (a win needs {need:.1%}) -> {'channels_last' if win else 'as given'}")
    return win


def _measure_layouts(model: torch.nn.Module, inputs: Any, opts: OptimizeOptions,
                     report: OptimizeReport, dev: str) -> Samples:
    """Per-step samples of a copy as given and a copy in channels_last ("<layout>" eagerly,
    "<layout>_graphed" replayed where captured), without the replays that never happened."""
    captured: dict[str, Any] = {}
    by_variant: dict[str, Any] = {}  # "<layout>_graphed" -> its graph
    variants: dict[str, Any] = {}
    copies: dict[str, torch.nn.Module] = {}
    base: torch.nn.Module | None = None
    cl: torch.nn.Module | None = None
    try:
        base = copy.deepcopy(model)
        cl = copy.deepcopy(model)
        apply_channels_last(cl, None)
        copies.update(as_given=base, channels_last=cl)
        if opts.graphs_possible(dev):
            captured.update(_layout_graphs(copies, inputs, opts.train, report))
        by_variant.update({f"{k}_graphed": g for k, g in captured.items()})
        for name, m in copies.items():
            g = captured.get(name)
            variants[name] = _layout_step(m, inputs, opts.train, g, on=False)
            if g is not None:
                variants[f"{name}_graphed"] = _layout_step(m, inputs, opts.train, g, on=True)
        n = per_round(opts.steps)
        with own_steps():
            samples = time_interleaved(variants, dev, warmup=2, steps=opts.steps, rounds=ROUNDS)
            report.extensions["layout"] = extend_while_undecided(
                samples, variants, dev,
                lambda s: layout_undecided(replayed_only(s, by_variant), opts.margin, rounds=n),
                steps=opts.steps)
        return replayed_only(samples, by_variant)
    finally:
        # A captured copy and its graph reference each other (model.forward is the graph, the
        # graph holds the model): break that cycle, or the copies, their graph pools and
        # thousands of Python objects live on until a full garbage collection, in the middle of
        # the later timings and of the user's steps.
        for twin in (base, cl):
            if twin is not None:
                _graphs.uninstall(twin)
        base = cl = None  # noqa: F841 - free the copies (their steps hold them too)
        for held in (copies, captured, variants, by_variant):
            held.clear()
        if dev == "cuda":
            gc.collect()
            torch.cuda.empty_cache()  # the copies' graph pools


def _layout_graphs(copies: dict[str, torch.nn.Module], inputs: Any, train: bool,
                   report: OptimizeReport) -> dict[str, Any]:
    """CUDA graphs of the layout copies: {layout: GraphedForward}; a layout that cannot be
    captured is left out (compared eagerly only)."""
    out: dict[str, Any] = {}
    for name, m in copies.items():
        args = graph_args(inputs, name == "channels_last")
        if args is None:
            return {}
        try:
            out[name] = _graphs.install(m, args, train)
        except Exception as exc:  # noqa: BLE001 - that layout is compared eagerly only
            report.failed_steps.append(f"layout graphs {name}")
            report.notes.append(f"layout under CUDA graphs: {name} not capturable "
                                f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})")
    return out


def _layout_step(model: torch.nn.Module, inputs: Any, train: bool, g: Any, *, on: bool) -> Any:
    """A step of one layout copy with its graph `g` (if captured) switched on or off."""
    step = make_step(model, inputs, train)
    if g is None:
        return step

    def run() -> None:
        g.enabled = on
        step()

    return run
