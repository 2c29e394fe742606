"""`optimize(model, example_inputs)` and `restore(model)`: run a model on the tuned choices.

Steps of `optimize` (each in its own module):
0. With `verify`, a deep copy of the model as given is kept aside for step 7 (`speedup`), and the
   decisions measured before for this model and environment are looked up (`decisions`); without
   them, the tuning worker and the Triton compile processes start now (`tuning.Tuning.prestart`),
   so that their start-up overlaps step 1.
1. Model-level layout (`layout`): channels_last as asked, or with "auto" measured end to end and
   chosen only when faster beyond noise.
2. Every stock Conv/ConvTranspose module gets a routed forward (`site.install`); one forward pass
   on the example inputs records each call's real signature (`record`).
3. Each call gives ConvProblems (fprop; dgrad and wgrad when training), deduplicated; choices come
   from the tuning database, and what is missing is tuned (`tuning`, with the progress
   `feedback` the caller asked for).
4. Each signature gets a Route: per direction, the tuned candidates in `tune.select.route_order`'s
   order, then PyTorch as configured, then the fallback tail (`routes`).
5. `verify`: the routed model is timed end to end against routing off; routing stays on only when
   it is faster beyond noise, so optimize never makes a model slower than PyTorch's path.
6. Whole-model CUDA graphs (`graphs_decision`, CUDA only): captured for the example input
   signature and kept only when faster than eager beyond noise.
7. `speedup`: the model as it now is against the copy from step 0, interleaved in one session;
   the changes stay only when that measures them faster beyond noise, and the figure is the
   report's `speedup` with its interval. Then one summary line (`feedback`).
"Beyond noise": faster by the margin (the caller's `margin`, or by default the measurement's own)
and round by round (`verdicts`). Warnings PyTorch raises because of these timing and capture
steps are filtered around them only (`quiet`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ..errors import UsageError
from ..settings import current as current_settings
from . import graphs as _graphs
from . import site as _site
from . import tuning as _tuning
from .decisions import REUSED, Decision, DecisionStore, reuse_layout, reuse_speedup
from .feedback import announce
from .graphs_decision import decide_graphs, replay_graphs
from .layout import apply_channels_last, decide_layout
from .options import OptimizeOptions
from .record import device_of, distinct_calls, model_problems, record_calls
from .report import DirectionChoice, LayerChoice, OptimizeReport
from .routes import FirstSight, build_routes
from .speedup import confirmed, copy_as_given, forced, measure_speedup, record_undone
from .state import OptimizedState, attach, detach, is_optimized, report_of
from .tuning import find_results
from .verify import replay_routing, verify_routing

__all__ = ["optimize", "restore", "report_of", "is_optimized", "model_problems",
           "OptimizeOptions", "OptimizeReport", "LayerChoice", "DirectionChoice"]


def _unstorable(report: OptimizeReport, outcome: str) -> str:
    """Why a run's measured decisions cannot be stored ("" when they can)."""
    why = []
    if outcome == "unmeasured":
        why.append("the speedup was not measured")
    if report.untuned:
        why.append(f"{report.untuned} problem(s) without a tuned result")
    if report.failed_steps:
        why.append("failed: " + ", ".join(report.failed_steps))
    return "; ".join(why)


def _layout_storable(report: OptimizeReport) -> bool:
    """Whether a call whose decisions cannot all be stored may store its layout decision: the
    only blockers are problems left without a tuned result, and the layout step did not fail."""
    return bool(report.untuned) and not report.failed_steps


def restore(model: Any) -> Any:
    """Undo `optimize`: stock forwards, no hooks, parameters back in their original layout."""
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"restore expects a torch.nn.Module, not {type(model).__name__}")
    st = detach(model)
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
             tune_time_limit_s: float | None = None, graphs: bool | str = "auto",
             tuning: str = "quick", remeasure: bool = False) -> Any:
    """Route every convolution of `model` to its tuned winner; returns the same model object.

    db: a `convdoctor.db.TuningDB`, a path, None (the default database) or False (no database).
    channels_last: "auto" (measure, choose only when faster), True or False.
    verify: time routed vs unrouted end to end and keep routing only when it is faster; and time
        the optimized model against a copy of the model as given: the changes stay only when
        faster beyond noise, and `report_of(model).speedup` (as given / optimized) is that
        measurement, with its interval in `speedup_ci`.
    margin: how much faster (relative) a layout, routing or graph variant must measure to be
        chosen; None (default): from the measurement itself, three standard errors of the two
        medians compared, at least 1% (`measure.steps.win_margin`). A variant must also be
        faster round by round of the interleaved timing.
    progress: None (default): on a terminal, a progress bar of the tuning on stderr (problems
        done, problems left, time left); otherwise one `logging` INFO line per tuned problem on
        the "convdoctor" logger. True: the bar on stderr always. False: silent. An object with
        `update(n, note)`: it gets `update(0, problem)` and `update(1, problem)` around each
        tuned problem (the caller closes it). At the end one summary line (problems, how many
        from the database, tuning time, the measured speedup with its interval, what is on):
        on stderr on a terminal or with True, else through `logging` at INFO; none with False.
    tune_time_limit_s: stop tuning new problems after this many seconds; the rest run PyTorch's
        path and the next call tunes them. Problems are tuned most promising first
        (`runtime.tuning.importance`). None (default): with tuning="quick", until 40 s after `optimize` began (the
        layout decision included; at least 15 s of tuning: `runtime.options.QUICK_TUNE_LIMIT_S`),
        with "thorough" no limit; float("inf"): no limit.
    graphs: "auto" (capture CUDA graphs of the whole forward/backward, keep them only when measured
        faster), True (keep them when capture works) or False.
    tuning: "quick" (default: `convdoctor.settings.QUICK` over the settings left at their
        defaults, for results within the minute) or "thorough" (the settings as given). A result
        tuned thoroughly is used by a quick run too.
    remeasure: with `verify`, the layout, routing, graphs and speedup decisions are measured
        once per model, inputs, options and environment and kept in the database; a later call
        whose problems all come from the database applies them without timing
        (`report_of(model).decisions == "reused"`). True measures them again (and stores the
        new ones).
    """
    t_start = time.monotonic()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"optimize expects a torch.nn.Module, not {type(model).__name__}")
    opts = OptimizeOptions(
        train=bool(train), db=db, tune_missing=tune_missing, input_shape=input_shape,
        dtype=dtype, channels_last=channels_last, tune_on_first_sight=tune_on_first_sight,
        backend=backend, verify=verify, budget_s=budget_s, steps=steps, margin=margin,
        progress=progress, isolate=isolate, tune_time_limit_s=tune_time_limit_s, graphs=graphs,
        tuning=tuning, remeasure=bool(remeasure), **_tuning_settings(tuning))
    if is_optimized(model):
        restore(model)
    device = device_of(model)
    inputs = prepare_inputs(example_inputs, opts, device)
    report = OptimizeReport(device=str(device), train=opts.train)
    _run(model, inputs, opts, report, device.type)
    report.optimize_s = time.monotonic() - t_start
    announce(report, opts.progress)
    return model


def _tuning_settings(tuning: str) -> dict[str, Any]:
    """`settings` (for tuning) and `base_settings` (as the user gave them) of `tuning`."""
    from ..settings import TUNING_MODES, for_tuning

    base = current_settings()
    if tuning not in TUNING_MODES:
        raise UsageError(f"tuning must be one of {', '.join(TUNING_MODES)}, not {tuning!r}")
    return {"settings": for_tuning(base, tuning), "base_settings": base}


def prepare_inputs(example_inputs: Any, opts: OptimizeOptions, device: torch.device) -> Any:
    """The inputs to record and time on: `example_inputs` as given, or a random tensor of
    `opts.input_shape`; UsageError for anything else."""
    if example_inputs is None:
        if opts.input_shape is None:
            raise UsageError("optimize needs example_inputs (or input_shape=...) to find the "
                             "model's convolution shapes")
        try:
            shape = tuple(int(v) for v in opts.input_shape)
        except (TypeError, ValueError):
            raise UsageError(f"input_shape must be a sequence of whole numbers, not "
                             f"{opts.input_shape!r}") from None
        return torch.randn(*shape, device=device, dtype=opts.dtype or torch.float32)
    if isinstance(example_inputs, (torch.Tensor, tuple, list, dict)):
        return example_inputs
    raise UsageError(f"example_inputs must be a tensor, a tuple/list of inputs or a dict of keyword "
                     f"inputs, not {type(example_inputs).__name__}")


@contextmanager
def _phase(report: OptimizeReport, name: str) -> Iterator[None]:
    """Adds the seconds the block took to `report.phase_s[name]`."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        report.phase_s[name] = round(report.phase_s.get(name, 0.0) + time.monotonic() - t0, 3)


def _run(model: torch.nn.Module, inputs: Any, opts: OptimizeOptions, report: OptimizeReport,
         dev: str) -> None:
    """Steps 0-7 on `model`; on any exception the model is restored and the exception raised.
    Decisions measured before for this model and environment are applied instead of timed
    (`decisions`), and measured ones are stored."""
    with _phase(report, "setup"):
        given = copy_as_given(model, report) if opts.verify else None
        tuning = _tuning.Tuning.of(opts)
        store = DecisionStore.of(tuning, model, inputs, opts, dev) if given is not None else None
        stored = store.recall() if store is not None and not opts.remeasure else None
        if (stored is None or stored.partial) and store is not None and store.db is not None \
                and not opts.remeasure and opts.tune_missing and dev == "cuda":
            # probably tuning ahead: its worker and compile processes start during the layout
            # decision (with a stored decision, the problems are most likely in the database)
            prestart = getattr(tuning, "prestart", None)
            if callable(prestart):
                prestart()
    try:
        problems, replayed = _decide(model, inputs, opts, report, dev, stored, tuning)
        if replayed and stored is not None:
            _reuse_confirm(model, stored, report)
        elif given is not None:
            report.decisions = "measured"
            with _phase(report, "speedup"):
                outcome = _confirm(model, given, inputs, opts, report, dev)
            if store is not None and store.db is not None:
                why = _unstorable(report, outcome)
                if why and _layout_storable(report):
                    store.store(Decision.layout_of(report))
                    report.notes.append(f"decisions not stored ({why}): the next call measures "
                                        "them again, all but the layout")
                elif why:
                    report.notes.append(f"decisions not stored ({why}): the next call measures "
                                        "them again")
                else:
                    store.store(Decision.of(report, problems, undone=outcome == "undone"))
    except BaseException:
        restore(model)
        raise
    finally:
        del given
        tuning.close()
    if not opts.verify and not report.speedup_source:
        report.speedup_source = "not measured (verify=False)"


def _decide(model: torch.nn.Module, inputs: Any, opts: OptimizeOptions, report: OptimizeReport,
            dev: str, stored: Decision | None, tuning: Any) -> tuple[dict[str, str], bool]:
    """Steps 1-6: each change made, and kept only when it measures faster; or, with a `stored`
    decision that still fits (every problem from the database, the same problems), each change
    as it was decided then. Returns the problems' keys and whether `stored` was applied."""
    state = OptimizedState(report)
    with _phase(report, "layout"):
        use_cl = (reuse_layout(stored, report) if stored is not None
                  else decide_layout(model, inputs, opts, report, dev))
    sites: dict[str, _site.Site] = {}
    attach(model, state)  # from here on, `restore` undoes whatever was done
    if use_cl:
        apply_channels_last(model, state)
    for name, m in model.named_modules():
        if _site.routable(m):
            sites[name or type(m).__name__] = _site.install(m, name or type(m).__name__, dev)
            state.modules.append(m)
    if not sites:
        report.routing, report.routing_reason = False, "no convolution module to route"
    with _phase(report, "record"):
        records = record_calls(model, inputs, opts.train, sites)
        calls = distinct_calls(records, opts.train, report.notes)
    report.problems = len(calls.problems)
    with _phase(report, "tuning"):
        results = find_results(calls.problems, opts, report, tuning=tuning,
                               uses=calls.uses)
    # each problem's winner: a decision measured on other winners (a result re-tuned or
    # imported since) is measured anew
    keys = {pk: str(getattr(getattr(res, "winner", None), "key", "") or "")
            for pk, (res, _) in results.items()}
    fits = (stored is not None and report.tuned == 0 and report.untuned == 0
            and stored.fits(keys))
    if fits and stored is not None and (stored.undone or not (stored.routing
                                                               or stored.graphs_routed)):
        # the stored decision runs PyTorch's path: no route would be used
        report.notes.append("routes not built: the decisions measured before run PyTorch's "
                            "convolutions" + REUSED)
    else:
        with _phase(report, "routes"):
            build_routes(sites, calls, results, opts, report, dev)
    if opts.tune_on_first_sight:
        hook = FirstSight(opts, dev)
        for s in sites.values():
            s.on_new_shape = hook
    # Routes that lose eagerly stay installed, disabled, until the graphs decision has timed
    # them under graphs too: there the host cost of a route is gone.
    may_graph = opts.graphs_possible(dev) and opts.verify
    if fits and stored is not None and stored.undone:
        used = False                     # the model ends as PyTorch runs it (`_reuse_confirm`)
    elif fits and stored is not None:
        # eager routing as verify kept it; the graph routes' capture turns routing on again
        replay_routing(sites, report, bool(stored.routing_variant), stored.routing_variant)
        report.routing_reason = stored.routing_reason + REUSED
        report.verify_ms = dict(stored.verify_ms)
        with _phase(report, "capture"):  # the stored graphs decision, captured without timing
            used = stored.graphs and replay_graphs(model, inputs, opts, use_cl, report, dev,
                                                   sites, stored.graphs_routed)
        if report.graphs or not stored.graphs:
            report.graphs_reason = stored.graphs_reason + (REUSED if stored.graphs_reason else "")
            report.graphs_ms = dict(stored.graphs_ms)
        report.margins, report.extensions = dict(stored.margins), dict(stored.extensions)
    else:
        if opts.verify and sites:
            with _phase(report, "verify"):
                verify_routing(model, inputs, sites, report, opts, dev, keep_sites=may_graph)
        with _phase(report, "graphs"):
            used = decide_graphs(model, inputs, opts, use_cl, report, dev,
                                 sites=sites if opts.verify else None)
    if not used:
        for s in sites.values():
            s.graph_routes = {}  # not used: release their plans and workspaces
    if opts.verify and sites and not report.routing:
        for m in model.modules():  # no wrapper left: exactly PyTorch's path
            _site.uninstall(m)
    return keys, fits


def _confirm(model: torch.nn.Module, given: torch.nn.Module, inputs: Any,
             opts: OptimizeOptions, report: OptimizeReport, dev: str) -> str:
    """Step 7: the optimized model against the model as given; every change undone unless
    measured faster beyond noise (or asked for). Returns "unchanged", "unmeasured", "kept" or
    "undone"."""
    if not report.changed:
        report.speedup_source = "no layout, routing or graph variant was measured faster"
        return "unchanged"
    if not measure_speedup(given, model, inputs, opts, report, dev):
        return "unmeasured"
    if not confirmed(report) and not forced(opts, report):
        record_undone(report)
        restore(model)
        attach(model, OptimizedState(report))  # as PyTorch runs it; the report stays readable
        return "undone"
    return "kept"


def _reuse_confirm(model: torch.nn.Module, stored: Decision, report: OptimizeReport) -> None:
    """Step 7 as measured before: the stored speedup, or the model as PyTorch runs it when the
    changes were not faster then."""
    report.decisions = "reused"
    if stored.undone:
        restore(model)
        attach(model, OptimizedState(report))
        for name in ("channels_last", "routing", "graphs"):
            setattr(report, name, False)
        report.routing_reason = stored.routing_reason + REUSED
        report.graphs_reason = stored.graphs_reason + REUSED
        report.notes.append(f"the optimized model was not measured faster than the model as "
                            f"given end to end on {stored.when()}: every change undone{REUSED}")
    reuse_speedup(stored, report)
