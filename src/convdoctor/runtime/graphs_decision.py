"""Whether to keep whole-model CUDA graphs (`runtime.graphs`), decided by measurement.

With `graphs="auto"` (or True) on CUDA, the forward (and the backward when training) is captured for
the example input signature and timed end to end against the eager model. Where the routes ranked
without host cost per plan call (the graph routes) would run something the plain capture does not,
a second graph is captured with them and timed too; it is taken only when its replay beats the plain
one (`verdicts.graphs_choice`). The graphs are kept only when faster than eager beyond noise (or
asked for with `graphs=True`); calls with any other signature, mode or context run eagerly.
"""

from __future__ import annotations

from typing import Any

import torch

from ..measure.steps import extend_while_undecided, make_step, median, time_interleaved
from . import graphs as _graphs
from . import site as _site
from .layout import graph_args
from .options import OptimizeOptions
from .quiet import own_steps
from .report import OptimizeReport
from .state import state_kept
from .verdicts import (
    ROUNDS,
    GraphsChoice,
    Samples,
    graphs_choice,
    graphs_undecided,
    per_round,
    replayed_only,
)

Sites = dict[str, _site.Site]

# What the plain capture runs for a direction when routing is off: PyTorch's own path.
PYTORCH_PATH_KEYS = ("torch:default", "torch:heuristic")


def _why(exc: BaseException, limit: int = 200) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:limit]}"


def graph_route_differs(report: OptimizeReport) -> bool:
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


def _passing(exc: BaseException) -> bool:
    """A capture failure that may not happen again (out of memory), unlike a model whose step
    cannot be captured (a synchronising or capture-invalidating operation), which is a verdict."""
    return "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"


def decide_graphs(model: torch.nn.Module, inputs: Any, opts: OptimizeOptions, use_cl: bool,
                  report: OptimizeReport, dev: str, sites: Sites | None = None) -> bool:
    """Decide (and install) whole-model CUDA graphs; True when the graph routes were kept.
    `sites`: the routed sites when routing was verified (their graph routes may be captured)."""
    if opts.graphs is False:
        report.graphs_reason = "not asked for"
        return False
    if dev != "cuda":
        report.graphs_reason = "CUDA graphs need a CUDA device"
        return False
    args = graph_args(inputs, use_cl)
    if args is None:
        report.graphs_reason = "graphs need positional tensor inputs"
        return False
    g = None
    for attempt in (1, 2):
        try:
            g = _graphs.install(model, args, opts.train)
            break
        except Exception as exc:  # noqa: BLE001 - not capturable: stay eager
            if _passing(exc) or attempt == 2:
                # a verdict (stored for reuse) only when the capture failed twice the same way
                # and not for out of memory, which may pass
                if _passing(exc):
                    report.failed_steps.append("graphs")
                report.graphs_reason = f"not capturable ({_why(exc)})"
                report.notes.append(f"CUDA graphs: {report.graphs_reason}")
                return False
    assert g is not None
    g_routed = None
    if sites and report.verify_ms and graph_route_differs(report):
        g_routed = _capture_routed(model, args, opts.train, sites, report)
        _graphs.attach(model, g)
    try:
        with state_kept(model):  # the caller's statistics and gradients, as they were
            samples, host, ok = _time_graphs(model, inputs, opts, report, dev, g, g_routed)
    finally:
        _graphs.attach(model, g)
    if not ok:
        report.failed_steps.append("graphs")
        _graphs.uninstall(model)
        report.graphs_reason = report.graphs_reason or "graphs did not replay; eager kept"
        return False
    eager_host = median(host.get("eager", []))
    c = graphs_choice(samples, eager_host, opts.margin, forced=opts.graphs is True,
                      rounds=per_round(opts.steps))
    ms = {k: median(v) for k, v in samples.items()}
    _report_graphs(report, ms, c, eager_host)
    return _apply(model, report, c, ms, g, g_routed, sites)


def replay_graphs(model: torch.nn.Module, inputs: Any, opts: OptimizeOptions, use_cl: bool,
                  report: OptimizeReport, dev: str, sites: Sites | None, routed: bool) -> bool:
    """Capture and keep the graphs a stored decision kept (`runtime.decisions`), without timing;
    True when it is the graph routes' capture. A capture that fails leaves the model eager."""
    args = graph_args(inputs, use_cl)
    if opts.graphs is False or dev != "cuda" or args is None:
        report.graphs = False
        return False
    try:
        if routed and sites:
            g_routed = _capture_routed(model, args, opts.train, sites, report)
            if g_routed is not None:
                _graphs.attach(model, g_routed)
                g_routed.enabled = True
                # the sites stay as `replay_routing` left them: calls outside the graph (other
                # shapes, torch.compile) route only where routing won eagerly
                report.graphs = report.routing = report.graphs_routed = True
                return True
        g = _graphs.install(model, args, opts.train)
        g.enabled = True
        report.graphs = True
    except Exception as exc:  # noqa: BLE001 - not capturable now: stay eager
        _graphs.uninstall(model)
        report.graphs = False
        report.graphs_reason = f"not capturable ({_why(exc)})"
        report.notes.append(f"CUDA graphs: {report.graphs_reason}")
    return False


def _capture_routed(model: torch.nn.Module, args: tuple[torch.Tensor, ...], train: bool,
                    sites: Sites, report: OptimizeReport) -> _graphs.GraphedForward | None:
    """A second capture with the graph routes swapped in (detached from the model: the caller
    attaches the graph it times); None, with a note, when it cannot be captured. The sites get
    their eager routes back; their graph routes keep the captured plans alive."""
    _graphs.uninstall(model)
    was = {id(s): (s.enabled, s.routes) for s in sites.values()}
    for s in sites.values():
        s.enabled = True
        s.routes = {**s.routes, **s.graph_routes}
    try:
        return _graphs.install(model, args, train)
    except Exception as exc:  # noqa: BLE001 - the unrouted graph is still there
        report.failed_steps.append("graphs with the routes")
        report.notes.append(f"CUDA graphs with the routes: not capturable ({_why(exc)})")
        return None
    finally:
        _graphs.uninstall(model)
        for s in sites.values():
            s.enabled, s.routes = was[id(s)]


def _time_graphs(model: torch.nn.Module, inputs: Any, opts: OptimizeOptions,
                 report: OptimizeReport, dev: str, g: _graphs.GraphedForward,
                 g_routed: _graphs.GraphedForward | None) -> tuple[Samples, Samples, bool]:
    """Interleaved samples of "eager", "graphed" and (when captured) "graphed_routed", without a
    replay that never happened, the host CPU time per step, and whether the plain graph replayed
    at all (False also when timing failed, with a note)."""
    step = make_step(model, inputs, opts.train)

    def variant(gx: _graphs.GraphedForward, on: bool) -> Any:
        def run() -> None:
            _graphs.attach(model, gx)
            gx.enabled = on
            step()
        return run

    variants: dict[str, Any] = {"graphed": variant(g, True), "eager": variant(g, False)}
    # a routed graph that never replayed timed the eager path: its samples decide nothing
    by_variant: dict[str, Any] = {}
    if g_routed is not None:
        variants["graphed_routed"] = variant(g_routed, True)
        by_variant["graphed_routed"] = g_routed
    host: Samples = {}
    forced = opts.graphs is True
    n = per_round(opts.steps)
    try:
        with own_steps():
            samples = time_interleaved(variants, dev, warmup=2, steps=opts.steps, rounds=ROUNDS,
                                       host=host)
            report.extensions["graphs"] = extend_while_undecided(
                samples, variants, dev,
                lambda s: graphs_undecided(replayed_only(s, by_variant), host, opts.margin,
                                           forced=forced, rounds=n), steps=opts.steps, host=host)
    except Exception as exc:  # noqa: BLE001
        report.notes.append(f"CUDA graphs failed end to end ({type(exc).__name__}: {exc})")
        return {}, host, False
    return replayed_only(samples, by_variant), host, g.replays > 0


def _report_graphs(report: OptimizeReport, ms: dict[str, float], c: GraphsChoice,
                   eager_host: float) -> None:
    if c.routes_margin is not None:
        report.margins["graph_routes"] = c.routes_margin
    report.margins["graphs"] = c.margin
    report.graphs = c.keep
    report.graphs_ms = dict(ms, chosen=ms[c.best] if c.keep else ms["eager"],
                            eager_host_cpu=eager_host)
    chosen = ("graphed with the routes" if c.routed else "graphed") if c.keep else "eager"
    report.graphs_reason = (f"measured end to end: eager {ms['eager']:.3f} ms "
                            f"({eager_host:.3f} ms of host CPU to issue it), graphed "
                            f"{ms['graphed']:.3f} ms"
                            + (f", graphed with the routes {ms['graphed_routed']:.3f} ms"
                               if "graphed_routed" in ms else "")
                            + f" (a win needs {c.margin:.1%}) -> {chosen}"
                            + (f" ({c.why})" if c.why else ""))


def _apply(model: torch.nn.Module, report: OptimizeReport, c: GraphsChoice, ms: dict[str, float],
           g: _graphs.GraphedForward, g_routed: _graphs.GraphedForward | None,
           sites: Sites | None) -> bool:
    """Install what `c` chose; True when it is the graph routes' capture."""
    if c.keep and c.routed and g_routed is not None and sites:
        _graphs.attach(model, g_routed)
        g_routed.enabled = True
        # Calls outside the graph (other shapes and contexts, torch.compile) route only where
        # routing won eagerly: routes that won under graphs alone won without their host cost,
        # which every call outside a replay pays (under torch.compile too: a custom op each).
        eager = report.routing  # the eager verdict (`verify_routing`) until set below
        for s in sites.values():
            s.enabled = eager
        other = "the eager routes" if eager else "PyTorch's path"
        report.routing = True
        report.graphs_routed = True
        report.routing_reason += (f"; under CUDA graphs, the graph routes (no host cost per "
                                  f"plan call) {ms['graphed_routed']:.3f} ms vs {other} "
                                  f"{ms['graphed']:.3f} ms -> graph routes; outside the "
                                  f"graph, {other}")
        return True
    if c.keep:
        g.enabled = True
    else:
        _graphs.uninstall(model)
    return False
