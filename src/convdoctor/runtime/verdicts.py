"""The rules that turn end-to-end samples into `optimize`'s decisions (pure functions of the
per-step samples, in ms): the model's layout, routing on or off, whole-model CUDA graphs.

A challenger wins only when faster by the margin: the caller's fixed `margin`, or by default the
measurement's own (`measure.steps.win_margin`: three standard errors of the two medians compared,
at least 1%). Each `*_undecided` says whether more samples could decide a challenger that measures
faster but not yet by the margin its noise demands (`measure.steps.extend_while_undecided`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..measure.steps import gain_undecided, median, win_margin

Samples = dict[str, list[float]]

# A graphed step within this much of the eager one counts as a tie.
GRAPHS_TIE = 0.01
# An eager step whose host CPU time to issue it is at least this share of its wall time is
# host-bound: its speed is the host's. The same stock step measured 3.42-4.04 ms (speech front end,
# training) and 2.31-3.06 ms (3D U-Net, inference) in fresh processes on an H100 host, SM clock
# steady at 1980 MHz (docs/results.md, "The same eager step in fresh processes"). A graph replay
# issues one launch.
GRAPHS_HOST_BOUND = 0.6


def margin_for(margin: float | None, a: list[float], b: list[float]) -> float:
    """The relative gain that counts as a win between the samples `a` and `b`: the caller's
    fixed `margin`, or by default the measurement's own (`measure.steps.win_margin`)."""
    return float(margin) if margin is not None else win_margin(a, b)


def replayed_only(samples: Samples, graphs: dict[str, Any]) -> Samples:
    """`samples` without the variants whose graph (`graphs`: variant name -> its
    GraphedForward) never replayed: they timed the eager path. Variants without a graph stay."""
    return {k: v for k, v in samples.items() if not (k in graphs and graphs[k].replays == 0)}


# ---------------------------------------------------------------------- layout
def layout_verdict(samples: Samples, margin: float | None) -> tuple[bool, float, str, str]:
    """channels_last or not, from the per-step samples of each layout eagerly ("as_given",
    "channels_last") and, where CUDA graphs were captured, replayed ("<layout>_graphed").
    Each layout is judged by its faster mode: on a host-bound step the eager comparison measures
    the host (an NCHW TF32 step issues transposes around every convolution), not the kernels a
    graph replays. On an H100, 3D U-Net inference in channels_last won eagerly (2.902 vs 3.156 ms)
    while its graph replayed slower than the NCHW one. Returns (channels_last wins, the margin it
    needed, the as-given variant and the channels_last variant compared)."""
    ms = {k: median(v) for k, v in samples.items() if v}

    def best(layout: str) -> str:
        keys = [k for k in (layout, f"{layout}_graphed") if k in ms]
        return min(keys, key=lambda k: ms[k])

    a, c = best("as_given"), best("channels_last")
    m = margin_for(margin, samples[c], samples[a])
    return ms[c] < ms[a] * (1.0 - m), m, a, c


def layout_undecided(samples: Samples, margin: float | None) -> bool:
    """Would more samples decide the layout? channels_last's faster mode measures faster than
    the as-given layout's but not by the margin its noise demands (a fixed `margin`: no)."""
    if margin is not None:
        return False
    win, need, a, c = layout_verdict(samples, None)
    return not win and gain_undecided(samples[c], samples[a], need)


# ---------------------------------------------------------------------- routing
def routing_choice(samples: Samples, margin: float | None) -> tuple[str, float, bool]:
    """The fastest routed variant, the margin it needs over "unrouted", and whether it wins:
    routes must win by the margin (a tie such as 3.818 vs 3.821 ms is noise, not a reason)."""
    ms = {k: median(v) for k, v in samples.items()}
    best = min((k for k in ms if k != "unrouted"), key=lambda k: ms[k])
    m = margin_for(margin, samples[best], samples["unrouted"])
    return best, m, ms[best] < ms["unrouted"] * (1.0 - m)


def routing_undecided(samples: Samples, margin: float | None) -> bool:
    """Would more samples decide routing? The fastest routed variant measures faster than
    PyTorch's path but not by the margin its noise demands (a fixed `margin`: no)."""
    if margin is not None:
        return False
    best, m, keep = routing_choice(samples, None)
    return not keep and gain_undecided(samples[best], samples["unrouted"], m)


# ---------------------------------------------------------------------- graphs
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


def routed_graphs_verdict(graphed_ms: float, graphed_routed_ms: float, margin: float) -> bool:
    """Under CUDA graphs, take the graph routes when their replay is faster than the plain
    capture's by more than `margin` (their host cost per plan call is gone there). Two captures
    of the very same kernels measured 2.1% apart (speech front end, H100): a capture keeps its
    addresses for its life, so the faster one stays faster in this process."""
    return graphed_routed_ms < graphed_ms * (1.0 - margin)


@dataclass(frozen=True)
class GraphsChoice:
    keep: bool
    routed: bool          # the graph routes' capture (it beat the plain one by `routes_margin`)
    best: str             # the replay compared with eager: "graphed" or "graphed_routed"
    margin: float         # what `best` needed over eager
    routes_margin: float | None
    why: str


def graphs_choice(samples: Samples, eager_host_ms: float, margin: float | None,
                  *, forced: bool = False) -> GraphsChoice:
    """The graphs decision from the samples of "eager", "graphed" and (when captured and
    replayed) "graphed_routed": the graph routes only when their replay beats the plain
    capture's (`routed_graphs_verdict`), then the chosen replay against eager (`graphs_verdict`)."""
    ms = {k: median(v) for k, v in samples.items()}
    routed, mr = False, None
    if samples.get("graphed_routed"):
        mr = margin_for(margin, samples["graphed_routed"], samples["graphed"])
        routed = routed_graphs_verdict(ms["graphed"], ms["graphed_routed"], mr)
    best = "graphed_routed" if routed else "graphed"
    m = margin_for(margin, samples[best], samples["eager"])
    keep, why = graphs_verdict(ms[best], ms["eager"], eager_host_ms, m, forced=forced)
    return GraphsChoice(keep, routed, best, m, mr, why)


def graphs_undecided(samples: Samples, host: Samples, margin: float | None, *,
                     forced: bool = False) -> bool:
    """Would more samples decide the graphs? The replay `graphs_choice` compares measures faster
    than the eager step but is not kept by the margin its noise demands. Graphs asked for
    (`forced`) or a fixed margin: no."""
    if forced or margin is not None or not samples.get("eager") or not samples.get("graphed"):
        return False
    c = graphs_choice(samples, median(host.get("eager", [])), None)
    return not c.keep and gain_undecided(samples[c.best], samples["eager"], c.margin)
