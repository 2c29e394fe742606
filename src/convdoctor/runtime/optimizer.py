"""`optimize(model, example_inputs)` and `restore(model)`: run a model on the tuned choices.

Steps of `optimize`:
1. Model-level layout: with `channels_last="auto"` the model is timed end to end (a copy, so its
   batch-norm statistics and gradients are untouched) in its own layout and in channels_last; the
   latter is chosen only when it is faster by more than the margin (`margin`, or by default the
   measurement's own: `timing.win_margin`, at least 1%). Channels_last converts the 4D/5D
   parameters in place (same Parameter objects, same values, same state_dict keys), the 4D/5D inputs
   on the way in and the outputs back to the caller's layout on the way out.
2. Every stock Conv/ConvTranspose module gets a routed forward (`site.install`); one forward pass on
   the example inputs records each call's real signature (shape, strides, dtype, grads needed).
   Buffers (batch-norm statistics) are put back afterwards.
3. Each call gives ConvProblems (fprop; dgrad and wgrad when training), deduplicated; choices come
   from the tuning database, and what is missing is tuned (`tune_missing`, progress bar).
4. Each signature gets a Route: per direction, the tuned candidates best first (cuDNN plans are
   prebuilt here), then PyTorch as configured, then the fallback tail.
5. `verify`: the routed model is timed end to end against the same model with routing off; routing
   stays on only when it is faster by the margin (so optimize never makes a model slower than
   PyTorch's path). On CUDA a third variant runs the routes ranked with no host cost per plan call
   (the graph routes): when the step is GPU-bound the host cost is hidden, and those can win.
6. Whole-model CUDA graphs (`graphs="auto"`, CUDA only): the forward (and the backward when
   training) is captured for the example input signature (`runtime.graphs`) and timed end to end
   against the eager model; kept only when faster by more than the margin. Calls with any other
   signature, mode or context run eagerly.
"""

from __future__ import annotations

import copy
import gc
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import UsageError
from ..measure.steps import (
    call_model,
    extend_while_undecided,
    gain_undecided,
    make_step,
    median,
    time_interleaved,
    win_margin,
)
from ..settings import Settings
from ..settings import current as current_settings
from . import graphs as _graphs
from . import site as _site

_STATE = "_convdoctor_state"
DIRS = ("fprop", "dgrad", "wgrad")


@dataclass
class DirectionChoice:
    direction: str
    key: str
    source: str                      # "db" | "tuned" | "pytorch" (no tuned choice)
    problem: str = ""
    winner_ms: float | None = None
    baseline_ms: float | None = None  # PyTorch's own path for this problem, measured by the tuner
    baseline_key: str = ""
    chain: list[str] = field(default_factory=list)
    graph_key: str = ""              # the route under CUDA graphs when it differs (no host cost)
    graph_chain: list[str] = field(default_factory=list)
    graph_winner_ms: float | None = None


@dataclass
class LayerChoice:
    layer: str
    x_shape: tuple[int, ...]
    dtype: str
    memory_format: str
    directions: list[DirectionChoice] = field(default_factory=list)


@dataclass
class OptimizeReport:
    device: str
    train: bool
    channels_last: bool = False
    channels_last_reason: str = ""
    layout_ms: dict[str, float] = field(default_factory=dict)
    graphs: bool = False
    graphs_reason: str = ""
    graphs_ms: dict[str, float] = field(default_factory=dict)
    routing: bool = True
    routing_reason: str = ""
    verify_ms: dict[str, float] = field(default_factory=dict)
    # the relative gain each decision needed to count as a win (`margin`, or the measurement's)
    margins: dict[str, float] = field(default_factory=dict)
    # how many extra rounds of samples each undecided decision took (`timing.MAX_EXTENSIONS`)
    extensions: dict[str, int] = field(default_factory=dict)
    layers: list[LayerChoice] = field(default_factory=list)
    problems: int = 0
    from_db: int = 0
    tuned: int = 0
    untuned: int = 0
    tuning_s: float = 0.0
    optimize_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        """End-to-end: PyTorch eager as given / the optimized model (measured in `optimize`)."""
        base = self.layout_ms.get("as_given")
        best = self.graphs_ms.get("chosen") or self.verify_ms.get("chosen")
        if not base or not best:
            return None
        return base / best


@dataclass
class _State:
    report: OptimizeReport
    modules: list[torch.nn.Module] = field(default_factory=list)
    param_formats: list[tuple[torch.nn.Parameter | torch.Tensor, torch.memory_format]] = field(
        default_factory=list)
    hooks: list[Any] = field(default_factory=list)

    def __deepcopy__(self, memo: dict[int, Any]) -> _State:
        return self


# ---------------------------------------------------------------------- helpers
def _device_of(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def _prepare_inputs(example_inputs: Any, input_shape: Any, device: torch.device,
                    dtype: torch.dtype | None) -> Any:
    if example_inputs is None:
        if input_shape is None:
            raise UsageError("optimize needs example_inputs (or input_shape=...) to find the "
                             "model's convolution shapes")
        shape = tuple(int(v) for v in input_shape)
        return torch.randn(*shape, device=device, dtype=dtype or torch.float32)
    if isinstance(example_inputs, torch.Tensor):
        return example_inputs
    if isinstance(example_inputs, (tuple, list, dict)):
        return example_inputs
    raise UsageError(f"example_inputs must be a tensor, a tuple/list of inputs or a dict of keyword "
                     f"inputs, not {type(example_inputs).__name__}")


def _map_tensors(obj: Any, fn: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        return tuple(_map_tensors(o, fn) for o in obj)
    if isinstance(obj, list):
        return [_map_tensors(o, fn) for o in obj]
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _cl_format(t: torch.Tensor) -> torch.memory_format | None:
    return torch.channels_last if t.dim() == 4 else torch.channels_last_3d if t.dim() == 5 else None


def _to_cl(t: torch.Tensor) -> torch.Tensor:
    fmt = _cl_format(t)
    return t if fmt is None or not t.is_floating_point() else t.contiguous(memory_format=fmt)


def _from_cl(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous() if t.dim() in (4, 5) else t


def _cl_pre_hook(module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
    return _map_tensors(args, _to_cl), _map_tensors(kwargs, _to_cl)


def _cl_post_hook(module: torch.nn.Module, args: Any, kwargs: Any, out: Any) -> Any:
    return _map_tensors(out, _from_cl)


def _apply_channels_last(model: torch.nn.Module, state: _State | None) -> None:
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            fmt = _cl_format(t)
            if fmt is None or t.is_contiguous(memory_format=fmt) and not t.is_contiguous():
                continue
            if state is not None:
                state.param_formats.append((t, torch.contiguous_format))
            t.data = t.data.contiguous(memory_format=fmt)
    h1 = model.register_forward_pre_hook(_cl_pre_hook, with_kwargs=True)
    h2 = model.register_forward_hook(_cl_post_hook, with_kwargs=True)
    if state is not None:
        state.hooks += [h1, h2]


def _has_nd_convs(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.modules.conv._ConvNd) and len(m.kernel_size) in (2, 3)
               for m in model.modules())


# ---------------------------------------------------------------------- public
def is_optimized(model: torch.nn.Module) -> bool:
    return _STATE in model.__dict__


def report_of(model: torch.nn.Module) -> OptimizeReport | None:
    st = model.__dict__.get(_STATE)
    return None if st is None else st.report


def restore(model: Any) -> Any:
    """Undo `optimize`: stock forwards, no hooks, parameters back in their original layout."""
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"restore expects a torch.nn.Module, not {type(model).__name__}")
    st: _State | None = model.__dict__.pop(_STATE, None)
    _graphs.uninstall(model)
    for m in model.modules():
        _site.uninstall(m)
    if st is not None:
        for h in st.hooks:
            h.remove()
        with torch.no_grad():
            for t, fmt in st.param_formats:
                t.data = t.data.contiguous(memory_format=fmt)
    return model


def optimize(model: Any, example_inputs: Any = None, train: bool = True, db: Any = None,
             tune_missing: bool = True, *, input_shape: Any = None,
             dtype: torch.dtype | None = None, channels_last: bool | str = "auto",
             tune_on_first_sight: bool = False, backend: str = "auto", verify: bool = True,
             budget_s: float = 2.0, steps: int = 10, margin: float | None = None,
             progress: Any = None, isolate: bool = True,
             tune_time_limit_s: float | None = None, graphs: bool | str = "auto") -> Any:
    """Route every convolution of `model` to its tuned winner; returns the same model object.

    db: a `convdoctor.db.TuningDB`, a path, None (the default database) or False (no database).
    channels_last: "auto" (measure, choose only when faster), True or False.
    verify: time routed vs unrouted end to end and keep routing only when it is faster.
    margin: how much faster (relative) a layout, routing or graph variant must measure to be
        chosen; None (default): from the measurement itself, three standard errors of the two
        medians compared, at least 1% (`timing.win_margin`).
    tune_time_limit_s: stop tuning new problems after this long (the rest: PyTorch's path).
    graphs: "auto" (capture CUDA graphs of the whole forward/backward, keep them only when measured
        faster), True (keep them when capture works) or False.
    """
    t_start = time.monotonic()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"optimize expects a torch.nn.Module, not {type(model).__name__}")
    if margin is not None and not (isinstance(margin, (int, float)) and 0 <= margin < 1):
        raise UsageError(f"margin must be a number in [0, 1) or None, not {margin!r}")
    if graphs not in ("auto", True, False):
        raise UsageError(f"graphs must be 'auto', True or False, not {graphs!r}")
    if channels_last not in ("auto", True, False):
        raise UsageError(f"channels_last must be 'auto', True or False, not {channels_last!r}")
    if is_optimized(model):
        restore(model)
    device = _device_of(model)
    dev = device.type
    inputs = _prepare_inputs(example_inputs, input_shape, device, dtype)
    report = OptimizeReport(device=str(device), train=bool(train))
    state = _State(report)

    # 1. model-level layout
    use_cl = _decide_layout(model, inputs, train, channels_last, report, dev, steps, margin,
                            graphs=graphs is not False and dev == "cuda")
    if use_cl:
        _apply_channels_last(model, state)

    # 2. install and record
    sites: dict[str, _site.Site] = {}
    try:
        for name, m in model.named_modules():
            if _site.routable(m):
                sites[name or type(m).__name__] = _site.install(m, name or type(m).__name__, dev)
                state.modules.append(m)
        model.__dict__[_STATE] = state
        records = _record(model, inputs, train, sites)

        # 3-4. problems, choices, routes (and the routes ranked without host cost per plan call:
        # verify times them eagerly, the graphs decision under graphs)
        may_graph = graphs is not False and dev == "cuda" and verify
        _build_routes(sites, records, train, db, tune_missing, backend, budget_s, report,
                      progress, isolate, dev, tune_time_limit_s,
                      graph_routes=dev == "cuda" and verify)
        if tune_on_first_sight:
            hook = _FirstSight(db, backend, budget_s, train, isolate, dev)
            for s in sites.values():
                s.on_new_shape = hook

        # 5. verify end to end (routes that lose in eager stay installed, disabled, until the
        # graphs decision has timed them under graphs too: there the host cost of a route is gone)
        if verify and sites:
            _verify(model, inputs, train, sites, report, dev, steps, margin, keep_sites=may_graph)

        # 6. whole-model CUDA graphs (with and without the routes when routing lost in eager)
        used = _decide_graphs(model, inputs, train, graphs, use_cl, report, dev, steps, margin,
                              sites=sites if verify else None)
        if not used:
            for s in sites.values():
                s.graph_routes = {}  # not used: release their plans and workspaces
        if verify and sites and not report.routing:
            for m in model.modules():  # no wrapper left: exactly PyTorch's path
                _site.uninstall(m)
    except BaseException:
        restore(model)
        raise
    report.optimize_s = time.monotonic() - t_start
    return model


def model_problems(model: torch.nn.Module, example_inputs: Any, train: bool = True
                   ) -> list[Any]:
    """The unique ConvProblems `optimize` would look up for this model and input (in its current
    layout), in call order; the model is left exactly as it was."""
    if is_optimized(model):
        raise UsageError("model_problems: the model is optimized; call convdoctor.restore first")
    dev = _device_of(model).type
    sites = {name: _site.install(m, name, dev) for name, m in model.named_modules()
             if _site.routable(m)}
    try:
        records = _record(model, example_inputs, train, sites)
    finally:
        for m in model.modules():
            _site.uninstall(m)
    out: dict[str, Any] = {}
    for recs in records.values():
        for rec in recs:
            for p in problems_for(rec, train).values():
                out.setdefault(p.key(), p)
    return list(out.values())


# ---------------------------------------------------------------------- 1. layout
def _margin(margin: float | None, a: list[float], b: list[float]) -> float:
    """The relative gain that counts as a win between the samples `a` and `b`: the caller's
    fixed `margin`, or by default the measurement's own (`timing.win_margin`)."""
    return float(margin) if margin is not None else win_margin(a, b)


def layout_verdict(samples: dict[str, list[float]], margin: float | None
                   ) -> tuple[bool, float, str, str]:
    """channels_last or not, from the per-step samples of each layout eagerly ("as_given",
    "channels_last") and, where CUDA graphs were captured, replayed ("<layout>_graphed").
    Each layout is judged by its faster mode: on a host-bound step the eager comparison measures
    the host (an NCHW TF32 step issues transposes around every convolution), not the kernels a
    graph replays (3D U-Net inference, session 20: channels_last won eagerly, 2.902 vs 3.156 ms,
    and its graph replayed slower than the NCHW kernels ran). Returns (channels_last wins, the
    margin it needed, the as-given variant and the channels_last variant compared)."""
    ms = {k: median(v) for k, v in samples.items() if v}

    def best(layout: str) -> str:
        keys = [k for k in (layout, f"{layout}_graphed") if k in ms]
        return min(keys, key=lambda k: ms[k])

    a, c = best("as_given"), best("channels_last")
    m = _margin(margin, samples[c], samples[a])
    return ms[c] < ms[a] * (1.0 - m), m, a, c


def layout_undecided(samples: dict[str, list[float]], margin: float | None) -> bool:
    """Would more samples decide the layout? channels_last's faster mode measures faster than
    the as-given layout's but not by the margin its noise demands (a fixed `margin`: no)."""
    if margin is not None:
        return False
    win, need, a, c = layout_verdict(samples, None)
    return not win and gain_undecided(samples[c], samples[a], need)


def _graph_args(inputs: Any, use_cl: bool) -> tuple[torch.Tensor, ...] | None:
    """The positional tensors a graph of the model is captured on (what forward receives after
    the channels_last pre-hook when `use_cl`); None when the inputs are not all tensors."""
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if not all(isinstance(a, torch.Tensor) for a in args):
        return None
    return tuple(_to_cl(a) for a in args) if use_cl else args


def _layout_graphs(copies: dict[str, torch.nn.Module], inputs: Any, train: bool,
                   report: OptimizeReport) -> dict[str, Any]:
    """CUDA graphs of the layout copies: {layout: GraphedForward}; a layout that cannot be
    captured is left out (compared eagerly only)."""
    out: dict[str, Any] = {}
    for name, m in copies.items():
        args = _graph_args(inputs, name == "channels_last")
        if args is None:
            return {}
        try:
            out[name] = _graphs.install(m, args, train)
        except Exception as exc:  # noqa: BLE001 - that layout is compared eagerly only
            report.notes.append(f"layout under CUDA graphs: {name} not capturable "
                                f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})")
    return out


def _decide_layout(model: torch.nn.Module, inputs: Any, train: bool, choice: bool | str,
                   report: OptimizeReport, dev: str, steps: int, margin: float | None,
                   graphs: bool = False) -> bool:
    """Measure the model as given and in channels_last (eagerly and, with `graphs`, as CUDA graph
    replays) and choose channels_last only when its faster mode wins by the margin."""
    if choice is True or choice is False:
        report.channels_last = bool(choice)
        report.channels_last_reason = "asked for" if choice else "not asked for"
        return bool(choice)
    if not _has_nd_convs(model):
        report.channels_last_reason = "no 2D/3D convolutions"
        return False
    captured: dict[str, Any] = {}
    by_variant: dict[str, Any] = {}  # "<layout>_graphed" -> its graph
    variants: dict[str, Any] = {}
    copies: dict[str, torch.nn.Module] = {}
    base: torch.nn.Module | None = None
    cl: torch.nn.Module | None = None
    try:
        base = copy.deepcopy(model)
        cl = copy.deepcopy(model)
        _apply_channels_last(cl, None)
        copies.update(as_given=base, channels_last=cl)
        if graphs:
            captured.update(_layout_graphs(copies, inputs, train, report))
        by_variant.update({f"{k}_graphed": g for k, g in captured.items()})
        for name, m in copies.items():
            g = captured.get(name)
            variants[name] = _layout_step(m, inputs, train, g, on=False)
            if g is not None:
                variants[f"{name}_graphed"] = _layout_step(m, inputs, train, g, on=True)
        samples = time_interleaved(variants, dev, warmup=2, steps=steps)
        report.extensions["layout"] = extend_while_undecided(
            samples, variants, dev,
            lambda s: layout_undecided(_replayed_only(s, by_variant), margin), steps=steps)
        samples = _replayed_only(samples, by_variant)
    except Exception as exc:  # noqa: BLE001 - a model that cannot run channels_last keeps its layout
        report.channels_last_reason = f"channels_last not measurable: {type(exc).__name__}: {exc}"
        report.notes.append(report.channels_last_reason)
        return False
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
    ms = {k: median(v) for k, v in samples.items()}
    report.layout_ms = ms
    win, need, a, c = layout_verdict(samples, margin)
    report.margins["layout"] = need
    report.channels_last = win

    def shown(layout: str) -> str:
        g = ms.get(f"{layout}_graphed")
        return f"{ms[layout]:.3f} ms" + (f" (graphed {g:.3f} ms)" if g is not None else "")

    report.channels_last_reason = (
        f"measured end to end: as given {shown('as_given')}, channels_last "
        f"{shown('channels_last')} per {'training step' if train else 'inference'}"
        + (f"; compared {a.replace('_', ' ')} with {c.replace('_', ' ')}"
           if "_graphed" in a + c else "")
        + f" (a win needs {need:.1%}) -> {'channels_last' if win else 'as given'}")
    return win


def _replayed_only(samples: dict[str, list[float]], graphs: dict[str, Any]
                   ) -> dict[str, list[float]]:
    """`samples` without the variants whose graph (`graphs`: variant name -> its
    GraphedForward) never replayed: they timed the eager path. Variants without a graph stay."""
    return {k: v for k, v in samples.items() if not (k in graphs and graphs[k].replays == 0)}


def _layout_step(model: torch.nn.Module, inputs: Any, train: bool, g: Any, *, on: bool) -> Any:
    """A step of one layout copy with its graph `g` (if captured) switched on or off."""
    step = make_step(model, inputs, train)
    if g is None:
        return step

    def run() -> None:
        g.enabled = on
        step()

    return run


# ---------------------------------------------------------------------- 2. record
def _record(model: torch.nn.Module, inputs: Any, train: bool,
            sites: dict[str, _site.Site]) -> dict[str, list[dict[str, Any]]]:
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


# ---------------------------------------------------------------------- 3-4. choices and routes
class _CallView:
    """A traced call as `ConvProblem.from_conv_call` reads it (the inner call the engine runs)."""

    def __init__(self, rec: dict[str, Any]) -> None:
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


def problems_for(rec: dict[str, Any], train: bool) -> dict[str, Any]:
    """direction -> ConvProblem for one recorded call (UsageError when it cannot be modelled)."""
    from ..problem import ConvProblem

    view = _CallView(rec)
    dirs = ["fprop"]
    if train and rec["grad"]:
        if rec["x_requires_grad"]:
            dirs.append("dgrad")
        if rec["w_requires_grad"]:
            dirs.append("wgrad")
    out = {}
    for d in dirs:
        out[d] = ConvProblem.from_conv_call(view, d, math=_math_mode(),
                                            deterministic=_deterministic())
    return out


def _baseline(result: Any) -> tuple[str, float | None]:
    for key in ("torch:heuristic", "cpu:mkldnn-on", "cpu:default"):
        s = result.stats_for(key) if hasattr(result, "stats_for") else None
        if s is not None and s.status == "ok" and s.median_s is not None:
            return key, s.median_s * 1e3
    return "", None


def _tuned_s(result: Any, key: str) -> float | None:
    """The tuned median of `key` in a tuning result (None: not measured there)."""
    s = result.stats_for(key) if result is not None and hasattr(result, "stats_for") else None
    return None if s is None or s.median_s is None else float(s.median_s)


def _executors(keys: list[str], problem: Any, dev: str, notes: list[str],
               result: Any = None, guard: bool = True) -> list[Any]:
    """Executors for `keys`, in order, from their engines (`engines.registry`); those that do not
    build here are skipped with a note. The first one, when its engine holds its setup to the
    tuned time (a cuDNN plan's workspace guard, unless `guard` is off), gets that time; the
    fallbacks behind it are not timed: they rarely run. A replaced workspace is noted."""
    from ..engines.registry import engine_of

    out: list[Any] = []
    for key in keys:
        engine = engine_of(key)
        if engine is None:
            notes.append(f"candidate {key} has no runtime route; skipped")
            continue
        if engine.device not in (dev, "any"):
            continue
        try:
            ref = None if out or not guard else _tuned_s(result, key)
            ex = engine.executor(key, problem, ref)
        except Exception as exc:  # noqa: BLE001 - an executor that does not build is skipped
            notes.append(f"{key} for {problem.short()} not used: {type(exc).__name__}: {exc}")
            continue
        if ex is None:
            notes.append(f"candidate {key} has no runtime route; skipped")
            continue
        out.append(ex)
        g = getattr(ex, "guard", None)
        if g is not None and g.replaced:
            notes.append(f"{key} for {problem.short()}: {g.summary()}")
        if getattr(ex, "guard_error", ""):
            notes.append(f"{key} for {problem.short()}: workspace guard not run "
                         f"({ex.guard_error}); the plan runs with its own workspace")
    return out


def _route_keys(result: Any, transposed: bool, train: bool, graphed: bool = False) -> list[str]:
    from ..tune.select import route_order

    return route_order(result, transposed=transposed, train=train, graphed=graphed)


class _Tuning:
    """Database lookups and tuning with one backend (a worker process started only if needed)."""

    def __init__(self, db: Any, backend: str, budget_s: float, isolate: bool,
                 settings: Settings | None = None) -> None:
        self.settings = settings if settings is not None else current_settings()
        self.db = _open_db(db)
        self.backend_name = backend
        self.budget_s = budget_s
        self.isolate = isolate
        self._be: Any = None
        self._worker: Any = None
        self.env: dict[str, str] | None = None
        self.available = True
        self.why = ""
        try:
            from ..tune.backend import get_backend
            from ..tune.harness import environment_of

            self._be = get_backend(backend, self.settings)
            self.env = environment_of(self._be)
        except Exception as exc:  # noqa: BLE001 - no tuner: PyTorch's path everywhere
            self.available = False
            self.why = f"tuning backend unavailable ({type(exc).__name__}: {exc})"

    def lookup(self, problem: Any) -> Any:
        if not self.available or self.db is None or self.env is None:
            return None
        try:
            return self.db.get(problem, self.env)
        except Exception:  # noqa: BLE001 - the database is a cache
            return None

    def tune(self, problem: Any, progress: Any = None) -> Any:
        if not self.available:
            return None
        from ..tune.harness import tune_problem

        be = self._be
        if self.isolate:
            if self._worker is None:
                from ..tune.worker import WorkerBackend

                self._worker = WorkerBackend(self.backend_name, settings=self.settings)
            be = self._worker
        return tune_problem(problem, backend=be, db=self.db, budget_s=self.budget_s,
                            progress=progress)

    def close(self) -> None:
        if self._worker is not None:
            try:
                self._worker.shutdown()
            except Exception:  # noqa: BLE001
                pass
            self._worker = None


def _open_db(db: Any) -> Any:
    if db is False:
        return None
    try:
        from ..db.store import TuningDB
    except Exception:  # noqa: BLE001
        return db if db not in (None, False) and hasattr(db, "get") else None
    if db is None:
        return TuningDB()
    if isinstance(db, TuningDB) or hasattr(db, "get"):
        return db
    return TuningDB(db)


def _build_routes(sites: dict[str, _site.Site], records: dict[str, list[dict[str, Any]]],
                  train: bool, db: Any, tune_missing: bool, backend: str, budget_s: float,
                  report: OptimizeReport, progress: Any, isolate: bool, dev: str,
                  time_limit_s: float | None = None, graph_routes: bool = False,
                  settings: Settings | None = None) -> None:
    settings = settings if settings is not None else current_settings()
    ws_guard = settings.ws_guard
    # Unique signatures per site, then unique problems overall.
    per_site: dict[str, dict[Any, tuple[dict[str, Any], dict[str, Any]]]] = {}
    unique: dict[str, Any] = {}
    for name, recs in records.items():
        sigs: dict[Any, tuple[dict[str, Any], dict[str, Any]]] = {}
        for rec in recs:
            if rec["key"] in sigs:
                continue
            try:
                probs = problems_for(rec, train)
            except Exception as exc:  # noqa: BLE001 - an unmodellable call keeps PyTorch's path
                report.notes.append(f"{name}: not tunable ({exc}); PyTorch's path")
                probs = {}
            sigs[rec["key"]] = (rec, probs)
            for p in probs.values():
                unique.setdefault(p.key(), p)
        per_site[name] = sigs
    report.problems = len(unique)

    results: dict[str, tuple[Any, str]] = {}
    tuning = _Tuning(db, backend, budget_s, isolate, settings)
    if not tuning.available:
        report.notes.append(tuning.why + "; every convolution runs PyTorch's path")
    t0 = time.monotonic()
    try:
        missing = []
        for pk, p in unique.items():
            res = tuning.lookup(p)
            if res is not None and getattr(res, "winner", None) is not None:
                results[pk] = (res, "db")
                report.from_db += 1
            else:
                missing.append((pk, p))
        if missing and tune_missing and tuning.available:
            prog = progress
            if prog is None:
                from ..progress import Progress

                prog = Progress(len(missing), "convdoctor: tuning")
            try:
                skipped = 0
                for pk, p in missing:
                    if time_limit_s is not None and time.monotonic() - t0 > time_limit_s:
                        skipped += 1
                        continue
                    prog.update(0, p.short())
                    try:
                        res = tuning.tune(p, prog)
                    except Exception as exc:  # noqa: BLE001 - one problem failing keeps PyTorch's path
                        report.notes.append(f"tuning {p.short()} failed: {type(exc).__name__}: "
                                            f"{exc}")
                        res = None
                    prog.update(1, p.short())
                    if res is not None and getattr(res, "winner", None) is not None:
                        results[pk] = (res, "tuned")
                        report.tuned += 1
                    elif res is not None:
                        why = "; ".join(getattr(res, "notes", []) or []) or "no candidate won"
                        report.notes.append(f"{p.short()}: not tuned ({why}); PyTorch's path")
                if skipped:
                    report.notes.append(f"tuning time limit ({time_limit_s:.0f} s) reached: "
                                        f"{skipped} problems not tuned, PyTorch's path")
            finally:
                if progress is None:
                    prog.close()
    finally:
        tuning.close()
    report.tuning_s = time.monotonic() - t0
    report.untuned = len(unique) - len(results)

    exec_cache: dict[Any, list[Any]] = {}
    for name, sigs in per_site.items():
        s = sites[name]
        for key, (rec, probs) in sigs.items():
            chains: dict[str, list[Any]] = {}
            layer = LayerChoice(layer=name, x_shape=tuple(rec["x_shape"]), dtype=rec["dtype"],
                                memory_format=rec["memory_format"])
            graph_chains: dict[str, list[Any]] = {}
            for d in DIRS:
                p = probs.get(d)
                tuned_execs: list[Any] = []
                graph_execs: list[Any] = []
                choice = DirectionChoice(direction=d, key="torch:default", source="pytorch")
                if p is not None:
                    hit = results.get(p.key())
                    if hit is not None:
                        res, src = hit
                        if p.key() not in exec_cache:
                            exec_cache[p.key()] = _executors(
                                _route_keys(res, s.transposed, train), p, dev, report.notes, res,
                                guard=ws_guard)
                        tuned_execs = exec_cache[p.key()]
                        if graph_routes:
                            gk = ("graph", p.key())
                            if gk not in exec_cache:
                                keys_g = _route_keys(res, s.transposed, train, graphed=True)
                                same = keys_g == [ex.key for ex in tuned_execs]
                                exec_cache[gk] = [] if same else _executors(
                                    keys_g, p, dev, report.notes, res, guard=ws_guard)
                            graph_execs = exec_cache[gk]
                        chosen = tuned_execs[0].key if tuned_execs else ""
                        ws = res.stats_for(chosen) if chosen else None
                        bkey, bms = _baseline(res)
                        choice = DirectionChoice(
                            direction=d, key=tuned_execs[0].key if tuned_execs else "torch:default",
                            source=src, problem=p.short(),
                            winner_ms=None if ws is None or ws.median_s is None
                            else ws.median_s * 1e3, baseline_ms=bms, baseline_key=bkey)
                    else:
                        choice.problem = p.short()
                chains[d] = _site.build_chain(tuned_execs, dev)
                choice.chain = [ex.key for ex in chains[d]]
                if graph_execs:
                    graph_chains[d] = _site.build_chain(graph_execs, dev)
                    if graph_execs[0].key != choice.key:
                        choice.graph_key = graph_execs[0].key
                        choice.graph_chain = [ex.key for ex in graph_chains[d]]
                        gs = res.stats_for(choice.graph_key)
                        choice.graph_winner_ms = (None if gs is None or gs.median_s is None
                                                  else gs.median_s * 1e3)
                if p is not None:
                    layer.directions.append(choice)
            s.routes[key] = _site.Route(chains, source="tuned")
            if graph_chains:
                s.graph_routes[key] = _site.Route({d: graph_chains.get(d, chains[d])
                                                   for d in chains}, source="tuned-graph")
            report.layers.append(layer)


class _FirstSight:
    """Tune a shape the first time it is seen (optimize(..., tune_on_first_sight=True))."""

    def __init__(self, db: Any, backend: str, budget_s: float, train: bool, isolate: bool,
                 dev: str) -> None:
        self.db, self.backend, self.budget_s = db, backend, budget_s
        self.train, self.isolate, self.dev = train, isolate, dev

    def __call__(self, site: _site.Site, key: Any, facts: dict[str, Any]) -> _site.Route | None:
        rec = dict(facts, y_shape=None, key=key, grad=self.train, x_requires_grad=self.train,
                   w_requires_grad=self.train)
        # y shape of the inner call, from the problem arithmetic (fprop)
        from ..problem import ConvProblem

        if rec["transposed"]:
            return None
        probs = problems_for(dict(rec, y_shape=(1, 1, 1)), self.train)
        tuning = _Tuning(self.db, self.backend, self.budget_s, self.isolate)
        chains: dict[str, list[Any]] = {}
        try:
            for d in DIRS:
                p = probs.get(d)
                execs: list[Any] = []
                if isinstance(p, ConvProblem):
                    res = tuning.lookup(p) or tuning.tune(p)
                    if res is not None and res.winner is not None:
                        execs = _executors(_route_keys(res, False, self.train), p, self.dev, [],
                                           res)
                chains[d] = _site.build_chain(execs, self.dev)
        finally:
            tuning.close()
        return _site.Route(chains, source="first-sight")


# ---------------------------------------------------------------------- 5. verify
def _verify(model: torch.nn.Module, inputs: Any, train: bool, sites: dict[str, _site.Site],
            report: OptimizeReport, dev: str, steps: int, margin: float | None,
            keep_sites: bool = False) -> None:
    """Time the routed model against routing off, and (when there are graph routes) against the
    routes ranked without host cost per plan call; keep the fastest routing only when it wins by
    the margin. Graph routes that win eagerly become the eager routes."""
    def set_enabled(on: bool) -> None:
        for s in sites.values():
            s.enabled = on

    try:
        twin = copy.deepcopy(model)  # sites are shared with the copy; BN statistics are not
    except Exception as exc:  # noqa: BLE001
        report.notes.append(f"not verified end to end (model cannot be copied: {exc})")
        return
    step = make_step(twin, inputs, train)
    eager_routes = {id(s): s.routes for s in sites.values()}
    free_routes = {id(s): {**s.routes, **s.graph_routes} for s in sites.values()}

    def use(routes: dict[int, Any] | None) -> None:
        set_enabled(routes is not None)
        for s in sites.values():
            s.routes = (routes or eager_routes)[id(s)]

    def variant(routes: dict[int, Any] | None) -> Any:
        def run() -> None:
            use(routes)
            step()
        return run

    variants = {"routed": variant(eager_routes), "unrouted": variant(None)}
    # Routes ranked with no host cost per plan call: what a GPU-bound step pays for them.
    if any(s.graph_routes for s in sites.values()):
        variants["routed_nohost"] = variant(free_routes)
    def undecided(s: dict[str, list[float]]) -> bool:
        if margin is not None:
            return False
        best, m, keep = routing_choice(s, None)
        return not keep and gain_undecided(s[best], s["unrouted"], m)

    try:
        samples = time_interleaved(variants, dev, warmup=2, steps=steps)
        report.extensions["routing"] = extend_while_undecided(samples, variants, dev, undecided,
                                                              steps=steps)
    except Exception as exc:  # noqa: BLE001
        use(None)
        report.routing = False
        report.routing_reason = f"routed model failed end to end ({type(exc).__name__}: {exc}); " \
                                "PyTorch's path kept"
        return
    finally:
        del twin
    ms = {k: median(v) for k, v in samples.items()}
    best, m, keep = routing_choice(samples, margin)
    nohost = keep and best == "routed_nohost"
    use(eager_routes)
    set_enabled(keep)
    if nohost:
        _adopt_graph_routes(sites, report)
    if not keep and not keep_sites:  # no wrapper left at all: exactly PyTorch's path
        for mod in model.modules():
            _site.uninstall(mod)
    report.routing = keep
    report.verify_ms = dict(ms, chosen=ms[best] if keep else ms["unrouted"])
    report.margins["routing"] = m
    extra = (f", routed without host cost per plan call {ms['routed_nohost']:.3f} ms"
             if "routed_nohost" in ms else "")
    verdict = ("routed without host cost per plan call" if nohost else "routed") if keep \
        else "PyTorch path (routing was not faster)"
    report.routing_reason = (f"measured end to end: routed {ms['routed']:.3f} ms{extra}, "
                             f"PyTorch's path {ms['unrouted']:.3f} ms (a win needs {m:.1%}) -> "
                             f"{verdict}")


def routing_choice(samples: dict[str, list[float]], margin: float | None
                   ) -> tuple[str, float, bool]:
    """The fastest routed variant, the margin it needs over "unrouted", and whether it wins:
    routes must win by the margin (a tie, seen: 3.818 vs 3.821 ms, is noise, not a reason)."""
    ms = {k: median(v) for k, v in samples.items()}
    best = min((k for k in ms if k != "unrouted"), key=lambda k: ms[k])
    m = _margin(margin, samples[best], samples["unrouted"])
    return best, m, ms[best] < ms["unrouted"] * (1.0 - m)


def _adopt_graph_routes(sites: dict[str, _site.Site], report: OptimizeReport) -> None:
    """The graph routes won eagerly: they are the routes now (eager and captured alike)."""
    for s in sites.values():
        s.routes = {**s.routes, **s.graph_routes}
        s.graph_routes = {}
    for lay in report.layers:
        for d in lay.directions:
            if d.graph_key:
                d.key, d.graph_key = d.graph_key, ""
                d.chain, d.graph_chain = d.graph_chain, []
                d.winner_ms, d.graph_winner_ms = d.graph_winner_ms, None


# ---------------------------------------------------------------------- 6. graphs
# A graphed step within this much of the eager one counts as a tie.
GRAPHS_TIE = 0.01
# An eager step whose host CPU time to issue it is at least this share of its wall time is
# host-bound: its speed is the host's, and the same stock step measured 3.42-4.04 ms (speech front
# end, training) and 2.31-3.06 ms (3D U-Net, inference) in fresh processes on the H100 host, clock
# steady at 1980 MHz (docs/benchmarks-runtime.md, session 4). A graph replay issues one launch.
GRAPHS_HOST_BOUND = 0.6


def graphs_verdict(graphed_ms: float, eager_ms: float, eager_host_ms: float, margin: float,
                   *, forced: bool = False) -> tuple[bool, str]:
    """Keep the graphs? Yes when asked, when faster by more than `margin`, or when tied (within
    GRAPHS_TIE) with an eager step that is host-bound: the replay does not depend on how fast
    this process's host code runs, the eager step does."""
    if forced:
        return True, "asked for"
    if graphed_ms < eager_ms * (1.0 - margin):
        return True, ""
    host_bound = eager_ms > 0 and eager_host_ms >= GRAPHS_HOST_BOUND * eager_ms
    if host_bound and graphed_ms <= eager_ms * (1.0 + GRAPHS_TIE):
        return True, ("a tie, and the eager step is host-bound: the replay's time is the GPU's, "
                      "the eager step's varies with the host")
    return False, ""


@dataclass
class GraphsChoice:
    keep: bool
    routed: bool          # the graph routes' capture (it beat the plain one by `routes_margin`)
    best: str             # the replay compared with eager: "graphed" or "graphed_routed"
    margin: float         # what `best` needed over eager
    routes_margin: float | None
    why: str


def graphs_choice(samples: dict[str, list[float]], eager_host_ms: float, margin: float | None,
                  *, forced: bool = False) -> GraphsChoice:
    """The graphs decision from the samples of "eager", "graphed" and (when captured and
    replayed) "graphed_routed": the graph routes only when their replay beats the plain
    capture's (`routed_graphs_verdict`), then the chosen replay against eager (`graphs_verdict`)."""
    ms = {k: median(v) for k, v in samples.items()}
    routed, mr = False, None
    if samples.get("graphed_routed"):
        mr = _margin(margin, samples["graphed_routed"], samples["graphed"])
        routed = routed_graphs_verdict(ms["graphed"], ms["graphed_routed"], mr)
    best = "graphed_routed" if routed else "graphed"
    m = _margin(margin, samples[best], samples["eager"])
    keep, why = graphs_verdict(ms[best], ms["eager"], eager_host_ms, m, forced=forced)
    return GraphsChoice(keep, routed, best, m, mr, why)


def graphs_undecided(samples: dict[str, list[float]], host: dict[str, list[float]],
                     margin: float | None, *, forced: bool = False) -> bool:
    """Would more samples decide the graphs? The replay `graphs_choice` compares measures faster
    than the eager step but is not kept by the margin its noise demands. Graphs asked for
    (`forced`) or a fixed margin: no."""
    if forced or margin is not None or not samples.get("eager") or not samples.get("graphed"):
        return False
    c = graphs_choice(samples, median(host.get("eager", [])), None)
    return not c.keep and gain_undecided(samples[c.best], samples["eager"], c.margin)


def routed_graphs_verdict(graphed_ms: float, graphed_routed_ms: float, margin: float) -> bool:
    """Under CUDA graphs, take the graph routes when their replay is faster than the plain
    capture's by more than `margin` (their host cost per plan call is gone there). Two captures
    of the very same kernels measured 2.1% apart (speech front end, session 6, H100): a capture
    keeps its addresses for its life, so the faster one stays faster in this process."""
    return graphed_routed_ms < graphed_ms * (1.0 - margin)


PYTORCH_PATH_KEYS = ("torch:default", "torch:heuristic")


def _graph_route_differs(report: OptimizeReport) -> bool:
    """Would a graph captured with the graph routes run anything the plain capture does not? The
    plain capture runs the eager routes when routing is on, PyTorch's own path when it is off."""
    for lay in report.layers:
        for d in lay.directions:
            if d.source not in ("db", "tuned"):
                continue
            if report.routing and d.graph_key:
                return True
            if not report.routing and (d.graph_key or d.key) not in PYTORCH_PATH_KEYS:
                return True
    return False


def _decide_graphs(model: torch.nn.Module, inputs: Any, train: bool, choice: bool | str,
                   use_cl: bool, report: OptimizeReport, dev: str, steps: int,
                   margin: float | None, sites: dict[str, _site.Site] | None = None) -> bool:
    """Decide (and install) whole-model CUDA graphs; True when the graph routes were kept."""
    if choice is False:
        report.graphs_reason = "not asked for"
        return False
    if dev != "cuda":
        report.graphs_reason = "CUDA graphs need a CUDA device"
        return False
    found = _graph_args(inputs, use_cl)
    if found is None:
        report.graphs_reason = "graphs need positional tensor inputs"
        return False
    args = found
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    grads = [(p, p.grad) for p in model.parameters()]
    try:
        g = _graphs.install(model, args, train)
    except Exception as exc:  # noqa: BLE001 - not capturable: stay eager
        report.graphs_reason = f"not capturable ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
        report.notes.append(f"CUDA graphs: {report.graphs_reason}")
        return False
    # Routes ranked for graphs (no host cost per plan call) that differ from what the plain
    # capture runs: capture a second graph with them, and time it too.
    g_routed: _graphs.GraphedForward | None = None
    if sites and report.verify_ms and _graph_route_differs(report):
        _graphs.uninstall(model)
        was = {id(s): (s.enabled, s.routes) for s in sites.values()}
        for s in sites.values():
            s.enabled = True
            s.routes = {**s.routes, **s.graph_routes}  # graph_routes keeps them alive after
        try:
            g_routed = _graphs.install(model, args, train)
            _graphs.uninstall(model)
        except Exception as exc:  # noqa: BLE001 - the unrouted graph is still there
            _graphs.uninstall(model)
            report.notes.append(f"CUDA graphs with the routes: not capturable "
                                f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")
        finally:
            for s in sites.values():
                s.enabled, s.routes = was[id(s)]  # eager routes back
        _graphs.attach(model, g)
    step = make_step(model, inputs, train)

    def use(gx: _graphs.GraphedForward, on: bool) -> None:
        _graphs.attach(model, gx)
        gx.enabled = on

    def graphed() -> None:
        use(g, True)
        step()

    def eager() -> None:
        use(g, False)
        step()

    variants: dict[str, Any] = {"graphed": graphed, "eager": eager}
    if g_routed is not None:
        gr = g_routed

        def graphed_routed() -> None:
            use(gr, True)
            step()

        variants["graphed_routed"] = graphed_routed
    host: dict[str, list[float]] = {}
    # a routed graph that never replayed timed the eager path: its samples decide nothing
    by_variant: dict[str, Any] = {} if g_routed is None else {"graphed_routed": g_routed}
    try:
        samples = time_interleaved(variants, dev, warmup=2, steps=steps, host=host)
        report.extensions["graphs"] = extend_while_undecided(
            samples, variants, dev,
            lambda s: graphs_undecided(_replayed_only(s, by_variant), host, margin,
                                       forced=choice is True), steps=steps, host=host)
        ok = g.replays > 0
    except Exception as exc:  # noqa: BLE001
        samples, ok = {}, False
        report.notes.append(f"CUDA graphs failed end to end ({type(exc).__name__}: {exc})")
    finally:
        with torch.no_grad():
            for b, v in buffers:
                b.copy_(v)
        for p, gr_ in grads:
            p.grad = gr_
        _graphs.attach(model, g)
    if not ok:
        _graphs.uninstall(model)
        report.graphs_reason = report.graphs_reason or "graphs did not replay; eager kept"
        return False
    samples = _replayed_only(samples, by_variant)
    ms = {k: median(v) for k, v in samples.items()}
    eager_host = median(host.get("eager", []))
    c = graphs_choice(samples, eager_host, margin, forced=choice is True)
    if c.routes_margin is not None:
        report.margins["graph_routes"] = c.routes_margin
    routed, best, m, keep, why = c.routed, ms[c.best], c.margin, c.keep, c.why
    report.margins["graphs"] = m
    report.graphs = keep
    report.graphs_ms = dict(ms, chosen=best if keep else ms["eager"], eager_host_cpu=eager_host)
    report.graphs_reason = (f"measured end to end: eager {ms['eager']:.3f} ms "
                            f"({eager_host:.3f} ms of host CPU to issue it), graphed "
                            f"{ms['graphed']:.3f} ms"
                            + (f", graphed with the routes {ms['graphed_routed']:.3f} ms"
                               if "graphed_routed" in ms else "")
                            + f" (a win needs {m:.1%})"
                            + f" -> {('graphed with the routes' if routed else 'graphed') if keep else 'eager'}"
                            + (f" ({why})" if why else ""))
    if keep and routed and g_routed is not None and sites:
        _graphs.attach(model, g_routed)
        g_routed.enabled = True
        for s in sites.values():
            s.enabled = True  # eager fallbacks (other shapes, contexts) route too
        other = "the eager routes" if report.routing else "PyTorch's path"
        report.routing = True
        report.routing_reason += (f"; under CUDA graphs, the graph routes (no host cost per "
                                  f"plan call) {ms['graphed_routed']:.3f} ms vs {other} "
                                  f"{ms['graphed']:.3f} ms -> graph routes")
    elif keep:
        g.enabled = True
    else:
        _graphs.uninstall(model)
    return bool(keep and routed)
