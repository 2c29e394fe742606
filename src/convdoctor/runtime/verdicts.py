"""The rules that turn end-to-end samples into `optimize`'s decisions (pure functions of the
per-step samples, in ms): the model's layout, routing on or off, whole-model CUDA graphs.

A challenger is kept only when it is faster beyond noise, on two counts:
- its median is faster than the incumbent's by the margin: the caller's fixed `margin`, or by
  default the measurement's own (`measure.steps.win_margin`: three standard errors of the two
  medians compared, at least 1%);
- it is faster round by round: the samples come in interleaved rounds (`ROUNDS` per timing call,
  `per_round` samples of each variant in each), and the lower end of the distribution-free 95%
  interval of the median per-round ratio (`median_interval`) must lie above 1. Load that comes and
  goes (another process on the GPU or the host) slows whole rounds of one variant: the samples of
  a round agree with each other, so the spread of all samples does not show it, and two of three
  rounds of the incumbent under load read as a steady win for a challenger that is slower.
Each `*_undecided` says whether more samples could decide a challenger that measures faster but is
not yet kept (`measure.steps.extend_while_undecided`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..measure.steps import MIN_MARGIN, gain_undecided, median, win_margin

Samples = dict[str, list[float]]

# Rounds per call of `measure.steps.time_interleaved` (its default, which
# `extend_while_undecided` uses too): a variant's samples are ROUNDS runs of `per_round(steps)`.
ROUNDS = 3
# Coverage of the interval a per-round comparison must clear.
CONFIDENCE = 0.95


def per_round(steps: int, rounds: int = ROUNDS) -> int:
    """Samples of each variant in one round of `time_interleaved(..., steps=steps)`."""
    return max(1, steps // max(1, rounds))


def split_rounds(xs: Sequence[float], n: int) -> list[list[float]]:
    """`xs` cut into its rounds of `n` samples (the last one may be short)."""
    n = max(1, n)
    return [list(xs[i:i + n]) for i in range(0, len(xs), n)]


def round_ratios(fast: Sequence[float], slow: Sequence[float], n: int) -> list[float]:
    """Per round, the median of `slow`'s samples over the median of `fast`'s (above 1: `fast`
    was faster in that round); rounds of `n` samples, paired in time order."""
    out = []
    for f, s in zip(split_rounds(fast, n), split_rounds(slow, n), strict=False):
        mf = median(f)
        if mf > 0:
            out.append(median(s) / mf)
    return out


def median_interval(xs: Sequence[float], level: float = CONFIDENCE
                    ) -> tuple[float, float, float]:
    """A distribution-free interval for the median of the population `xs` were drawn from:
    (the j-th smallest, the j-th largest, its coverage), with j the largest rank whose coverage,
    1 - 2 P(Binomial(n, 1/2) < j), is at least `level`. With fewer than 6 values no rank reaches
    95%: the smallest and the largest, with their lower coverage. (nan, nan, 0) for no values."""
    v = sorted(xs)
    n = len(v)
    if n == 0:
        return float("nan"), float("nan"), 0.0
    j, cov = 1, 1.0 - 2.0 * 0.5 ** n
    below = 0.0  # P(Binomial(n, 1/2) < k), for k = 1, 2, ...
    for k in range(1, n // 2 + 1):
        below += math.comb(n, k - 1) * 0.5 ** n
        c = 1.0 - 2.0 * below
        if c < level:
            break
        j, cov = k, c
    return v[j - 1], v[n - j], cov


def margin_for(margin: float | None, a: list[float], b: list[float]) -> float:
    """The relative gain that counts as a win between the samples `a` and `b`: the caller's
    fixed `margin`, or by default the measurement's own (`measure.steps.win_margin`)."""
    return float(margin) if margin is not None else win_margin(a, b)


def rounds_agree(fast: list[float], slow: list[float], n: int | None) -> bool:
    """Is `fast` faster round by round: the lower end of the interval of its median per-round
    ratio over `slow` above 1? `n`: samples per round (None: the samples are not in rounds, and
    only the medians are compared)."""
    if n is None:
        return True
    lo, _, _ = median_interval(round_ratios(fast, slow, n))
    return lo > 1.0


def faster_beyond_noise(fast: list[float], slow: list[float], m: float, n: int | None) -> bool:
    """`fast` wins over `slow`: its median faster by the margin `m`, and faster round by round."""
    if not fast or not slow:
        return False
    return median(fast) < median(slow) * (1.0 - m) and rounds_agree(fast, slow, n)


def undecided(fast: list[float], slow: list[float], m: float, fixed: bool, n: int | None) -> bool:
    """Could more samples decide `fast` against `slow`? It is not kept yet, and either its gain
    is below a margin that more samples can lower (`measure.steps.gain_undecided`; not for a
    `fixed` margin), or its gain is above the margin but not yet round by round (more rounds
    narrow the interval). A gain under the 1% floor is a tie, never measured again."""
    if not fast or not slow or faster_beyond_noise(fast, slow, m, n):
        return False
    gain = 1.0 - median(fast) / median(slow)
    if gain <= MIN_MARGIN:
        return False
    if gain < m:
        return not fixed and gain_undecided(fast, slow, m)
    return n is not None


def replayed_only(samples: Samples, graphs: dict[str, Any]) -> Samples:
    """`samples` without the variants whose graph (`graphs`: variant name -> its
    GraphedForward) never replayed: they timed the eager path. Variants without a graph stay."""
    return {k: v for k, v in samples.items() if not (k in graphs and graphs[k].replays == 0)}


# ---------------------------------------------------------------------- layout
def layout_verdict(samples: Samples, margin: float | None, *, rounds: int | None = None
                   ) -> tuple[bool, float, str, str]:
    """channels_last or not, from the per-step samples of each layout eagerly ("as_given",
    "channels_last") and, where CUDA graphs were captured, replayed ("<layout>_graphed").
    Each layout is judged by its faster mode: on a host-bound step the eager comparison measures
    the host (an NCHW TF32 step issues transposes around every convolution), not the kernels a
    graph replays. On an H100, 3D U-Net inference in channels_last won eagerly (2.902 vs 3.156 ms)
    while its graph replayed slower than the NCHW one. `rounds`: samples per round (None: no
    round-by-round check). Returns (channels_last wins, the margin it needed, the as-given
    variant and the channels_last variant compared)."""
    ms = {k: median(v) for k, v in samples.items() if v}

    def best(layout: str) -> str:
        keys = [k for k in (layout, f"{layout}_graphed") if k in ms]
        return min(keys, key=lambda k: ms[k])

    a, c = best("as_given"), best("channels_last")
    m = margin_for(margin, samples[c], samples[a])
    return faster_beyond_noise(samples[c], samples[a], m, rounds), m, a, c


def layout_undecided(samples: Samples, margin: float | None, *, rounds: int | None = None
                     ) -> bool:
    """Would more samples decide the layout? channels_last's faster mode measures faster than
    the as-given layout's but is not kept yet (see `undecided`)."""
    _, need, a, c = layout_verdict(samples, margin, rounds=rounds)
    return undecided(samples[c], samples[a], need, margin is not None, rounds)


# ---------------------------------------------------------------------- routing
def routing_choice(samples: Samples, margin: float | None, *, rounds: int | None = None
                   ) -> tuple[str, float, bool]:
    """The fastest routed variant, the margin it needs over "unrouted", and whether it wins:
    routes must be faster beyond noise (a tie such as 3.818 vs 3.821 ms is noise, not a
    reason)."""
    ms = {k: median(v) for k, v in samples.items()}
    best = min((k for k in ms if k != "unrouted"), key=lambda k: ms[k])
    m = margin_for(margin, samples[best], samples["unrouted"])
    return best, m, faster_beyond_noise(samples[best], samples["unrouted"], m, rounds)


def routing_undecided(samples: Samples, margin: float | None, *, rounds: int | None = None
                      ) -> bool:
    """Would more samples decide routing? The fastest routed variant measures faster than
    PyTorch's path but is not kept yet (see `undecided`)."""
    best, m, _ = routing_choice(samples, margin, rounds=rounds)
    return undecided(samples[best], samples["unrouted"], m, margin is not None, rounds)


# ---------------------------------------------------------------------- graphs
def graphs_verdict(graphed_ms: float, eager_ms: float, eager_host_ms: float, margin: float,
                   *, forced: bool = False) -> tuple[bool, str]:
    """Keep the graphs (by the medians)? When asked for, or when the replay is faster than the
    eager step by more than `margin`. A tie is not a reason, whatever the eager step's host CPU
    time (`eager_host_ms`, reported with the decision)."""
    if forced:
        return True, "asked for"
    return graphed_ms < eager_ms * (1.0 - margin), ""


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
                  *, forced: bool = False, rounds: int | None = None) -> GraphsChoice:
    """The graphs decision from the samples of "eager", "graphed" and (when captured and
    replayed) "graphed_routed": the graph routes only when their replay beats the plain
    capture's beyond noise, then the chosen replay against eager, kept only when faster beyond
    noise (or asked for: `forced`)."""
    ms = {k: median(v) for k, v in samples.items()}
    routed, mr = False, None
    if samples.get("graphed_routed"):
        mr = margin_for(margin, samples["graphed_routed"], samples["graphed"])
        routed = routed_graphs_verdict(ms["graphed"], ms["graphed_routed"], mr) and \
            rounds_agree(samples["graphed_routed"], samples["graphed"], rounds)
    best = "graphed_routed" if routed else "graphed"
    m = margin_for(margin, samples[best], samples["eager"])
    keep, why = graphs_verdict(ms[best], ms["eager"], eager_host_ms, m, forced=forced)
    if keep and not forced:
        keep = rounds_agree(samples[best], samples["eager"], rounds)
    return GraphsChoice(keep, routed, best, m, mr, why)


def graphs_undecided(samples: Samples, host: Samples, margin: float | None, *,
                     forced: bool = False, rounds: int | None = None) -> bool:
    """Would more samples decide the graphs? The replay `graphs_choice` compares measures faster
    than the eager step but is not kept yet (see `undecided`). Graphs asked for (`forced`): no."""
    if forced or not samples.get("eager") or not samples.get("graphed"):
        return False
    c = graphs_choice(samples, median(host.get("eager", [])), margin, rounds=rounds)
    return undecided(samples[c.best], samples["eager"], c.margin, margin is not None, rounds)
