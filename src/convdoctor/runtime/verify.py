"""End-to-end verification of the routes: the routed model is timed against the same model with
routing off (exactly PyTorch's path), and, where there are graph routes, against the routes ranked
without host cost per plan call (a GPU-bound step hides that host cost, so they can win eagerly).
Routing stays on only when its fastest variant is faster beyond noise (`verdicts.routing_choice`),
so `optimize` never makes a model slower than PyTorch's path by its own measurement.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..measure.steps import extend_while_undecided, make_step, median, time_interleaved
from . import site as _site
from .options import OptimizeOptions
from .quiet import own_steps
from .report import OptimizeReport
from .verdicts import ROUNDS, per_round, routing_choice, routing_undecided

Sites = dict[str, _site.Site]


def verify_routing(model: torch.nn.Module, inputs: Any, sites: Sites, report: OptimizeReport,
                   opts: OptimizeOptions, dev: str, keep_sites: bool = False) -> None:
    """Time the routed model against routing off, and (when there are graph routes) against the
    routes ranked without host cost per plan call; keep the fastest routing only when it is
    faster beyond noise. Graph routes that win eagerly become the eager routes. When routing
    loses, the sites are uninstalled unless `keep_sites` (the graphs decision times them under
    graphs)."""
    try:
        twin = copy.deepcopy(model)  # sites are shared with the copy; BN statistics are not
    except Exception as exc:  # noqa: BLE001
        report.failed_steps.append("routing")
        report.notes.append(f"not verified end to end (model cannot be copied: {exc})")
        return
    step = make_step(twin, inputs, opts.train)
    eager_routes = {id(s): s.routes for s in sites.values()}
    free_routes = {id(s): {**s.routes, **s.graph_routes} for s in sites.values()}

    def use(routes: dict[int, Any] | None) -> None:
        for s in sites.values():
            s.enabled = routes is not None
            s.routes = (routes or eager_routes)[id(s)]

    def variant(routes: dict[int, Any] | None) -> Any:
        def run() -> None:
            use(routes)
            step()
        return run

    variants = {"routed": variant(eager_routes), "unrouted": variant(None)}
    if any(s.graph_routes for s in sites.values()):
        variants["routed_nohost"] = variant(free_routes)
    n = per_round(opts.steps)
    try:
        with own_steps():
            samples = time_interleaved(variants, dev, warmup=2, steps=opts.steps, rounds=ROUNDS)
            report.extensions["routing"] = extend_while_undecided(
                samples, variants, dev, lambda s: routing_undecided(s, opts.margin, rounds=n),
                steps=opts.steps)
    except Exception as exc:  # noqa: BLE001
        report.failed_steps.append("routing")
        use(None)
        report.routing = False
        report.routing_reason = f"routed model failed end to end ({type(exc).__name__}: {exc}); " \
                                "PyTorch's path kept"
        return
    finally:
        del twin
    best, m, keep = routing_choice(samples, opts.margin, rounds=n)
    use(eager_routes)
    for s in sites.values():
        s.enabled = keep
    if keep and best == "routed_nohost":
        adopt_graph_routes(sites, report)
    if not keep and not keep_sites:  # no wrapper left at all: exactly PyTorch's path
        for mod in model.modules():
            _site.uninstall(mod)
    _report_routing(report, samples, best, m, keep)


def _report_routing(report: OptimizeReport, samples: dict[str, list[float]], best: str, m: float,
                    keep: bool) -> None:
    ms = {k: median(v) for k, v in samples.items()}
    report.routing = keep
    report.routing_variant = best if keep else ""
    report.verify_ms = dict(ms, chosen=ms[best] if keep else ms["unrouted"])
    report.margins["routing"] = m
    extra = (f", routed without host cost per plan call {ms['routed_nohost']:.3f} ms"
             if "routed_nohost" in ms else "")
    verdict = ("routed without host cost per plan call" if best == "routed_nohost"
               else "routed") if keep else "PyTorch path (routing was not faster)"
    report.routing_reason = (f"measured end to end: routed {ms['routed']:.3f} ms{extra}, "
                             f"PyTorch's path {ms['unrouted']:.3f} ms (a win needs {m:.1%}) -> "
                             f"{verdict}")


def replay_routing(sites: Sites, report: OptimizeReport, keep: bool, variant: str) -> None:
    """Routing as a stored decision had it (`runtime.decisions`), without timing."""
    if keep and variant == "routed_nohost":
        adopt_graph_routes(sites, report)
    for s in sites.values():
        s.enabled = keep
    report.routing = keep
    report.routing_variant = variant if keep else ""


def adopt_graph_routes(sites: Sites, report: OptimizeReport) -> None:
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
