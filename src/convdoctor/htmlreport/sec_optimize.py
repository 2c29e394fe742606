"""optimize: the end-to-end figure, the decisions and where the step's convolution time goes.

- End to end: each variant's step times (a dot per step, a tick at the median, a bar over the 95%
  confidence interval of the median, diamonds at each process's median), and the speedups; where
  both sides have samples, the speedup's interval is the ratio of the two intervals' far ends.
- Decisions (layout, routing, CUDA graphs): every option's measured step time; the shaded band is
  the margin a challenger had to beat the baseline by (a win needs a step below baseline x (1 -
  margin)).
- Where the step goes (from `convdoctor optimize --json`): per layer and direction the tuner's
  time of PyTorch's path and of the chosen one, stacked per direction, and a waterfall from
  PyTorch's total to the chosen total through the layers that change it most. These are the
  convolutions' own times, measured one problem at a time: the step holds other work too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tune.result import median_ci
from .model import Decision, Inputs, LayerDir, OptimizeRun, Section
from .optdata import OPTION_LABELS, VARIANT_LABELS
from .svg import (
    Scale,
    axis_x,
    dots_path,
    esc,
    fmt_ratio,
    jitter,
    num,
    short,
    svg,
    text,
)

DIRECTIONS = ("fprop", "dgrad", "wgrad")
WATERFALL_STEPS = 14
MAX_TABLE = 600


@dataclass(frozen=True)
class E2ERow:
    label: str
    ms: float
    interval: tuple[float, float] | None   # process medians' range, or the median's 95% CI
    interval_kind: str                      # "processes" | "95% CI" | ""
    samples: tuple[float, ...]
    runs: tuple[float, ...]


def end_to_end(run: OptimizeRun) -> list[E2ERow]:
    """Per variant: its figure, and how far it can be trusted. Timed in several processes: the
    range of the processes' medians (a process's draw of memory placement and cuDNN choices
    moves a step more than its samples vary); in one process: the 95% CI of the median."""
    out = []
    for k, t in run.variants.items():
        if t.ms is None:
            continue
        iv: tuple[float, float] | None = None
        kind = ""
        if len(t.runs) >= 2:
            iv, kind = (min(t.runs), max(t.runs)), "processes"
        elif len(t.samples) >= 3:
            _, lo, hi = median_ci(list(t.samples))
            iv, kind = (lo, hi), "95% CI"
        out.append(E2ERow(VARIANT_LABELS.get(k, k), t.ms, iv, kind, t.samples, t.runs))
    return out


def speedup_interval(run: OptimizeRun, base: str = "pytorch", new: str = "convdoctor"
                     ) -> tuple[float, float] | None:
    """(low, high) of base/new from the CIs of the two medians (None without samples)."""
    b, n = run.variants.get(base), run.variants.get(new)
    if b is None or n is None or len(b.samples) < 3 or len(n.samples) < 3:
        return None
    _, blo, bhi = median_ci(list(b.samples))
    _, nlo, nhi = median_ci(list(n.samples))
    return (blo / nhi, bhi / nlo)


@dataclass(frozen=True)
class Breakdown:
    pytorch: dict[str, float]          # direction -> ms summed over layers
    chosen: dict[str, float]
    items: tuple[LayerDir, ...]        # layer-directions with both times
    untimed: int                       # layer-directions without both times


def breakdown(run: OptimizeRun) -> Breakdown:
    items = tuple(x for x in run.layers if x.chosen_ms is not None and x.pytorch_ms is not None)
    py = {d: sum(x.pytorch_ms or 0.0 for x in items if x.direction == d) for d in DIRECTIONS}
    ch = {d: sum(x.chosen_ms or 0.0 for x in items if x.direction == d) for d in DIRECTIONS}
    return Breakdown({d: v for d, v in py.items() if v}, {d: v for d, v in ch.items() if v},
                     items, len(run.layers) - len(items))


def waterfall_steps(b: Breakdown, n: int = WATERFALL_STEPS) -> list[tuple[str, float]]:
    """(label, chosen - PyTorch ms) of the `n` layer-directions that change the total most, and
    one step for all the others."""
    deltas = sorted(((f"{x.layer} {x.direction}", (x.chosen_ms or 0.0) - (x.pytorch_ms or 0.0))
                     for x in b.items), key=lambda kv: -abs(kv[1]))
    top, rest = deltas[:n], deltas[n:]
    if rest:
        top.append((f"{len(rest)} others", sum(v for _, v in rest)))
    return top


# ------------------------------------------------------------------------------ plots
def e2e_plot(rows: list[E2ERow]) -> str:
    width, x0, x1, rh, top = 860.0, 200.0, 640.0, 24.0, 8.0
    vals = [v for r in rows for v in (*r.samples, *r.runs, r.ms)]
    sx = Scale.fit(vals, x0, x1, pad=0.05)
    bottom = top + rh * len(rows) + 4
    parts = [axis_x(sx, bottom, top - 4, lambda v: f"{v:g}", label="ms per step")]
    for i, r in enumerate(rows):
        y = top + rh * i + rh / 2
        cls = "chosen" if r.label == "convdoctor" else "heur"
        parts.append(text(4, y + 4, short(r.label, 30), cls="strong" if cls == "chosen" else ""))
        pts = [(round(sx(v)), round(y + jitter(k, 5.0))) for k, v in enumerate(r.samples)]
        if pts:
            parts.append(f'<path class="pt {cls}" d="{dots_path(pts)}"/>')
        if r.runs:
            d = "".join(f"M{num(sx(v))} {num(y - 4)}l4 4-4 4-4-4z" for v in r.runs)
            parts.append(f'<path class="ref" d="{d}"/>')
        if r.interval:
            parts.append(f'<path class="ci" d="M{num(sx(r.interval[0]))} {num(y + 9)}'
                         f'H{num(sx(r.interval[1]))}"/>')
        parts.append(f'<path class="med" d="M{num(sx(r.ms))} {num(y - 9)}v18"/>')
        iv = (f" ({r.interval_kind} {r.interval[0]:.3f}-{r.interval[1]:.3f})" if r.interval
              else "")
        parts.append(text(x1 + 10, y + 4, f"{r.ms:.3f} ms{iv}", cls="dim"))
    return svg(width, bottom + 34, "".join(parts), label="end-to-end step times")


def decisions_plot(decisions: list[Decision]) -> str:
    ds = [d for d in decisions if d.options]
    if not ds:
        return ""
    width, x0, x1, rh, top = 860.0, 200.0, 640.0, 44.0, 8.0
    vals = [v for d in ds for _, v in d.options]
    sx = Scale.fit(vals, x0, x1, pad=0.08)
    bottom = top + rh * len(ds) + 4
    parts = [axis_x(sx, bottom, top - 4, lambda v: f"{v:g}", label="ms per step")]
    for i, d in enumerate(ds):
        y = top + rh * i + rh / 2
        ms = dict(d.options)
        base = ms.get(d.baseline)
        if base is not None and d.margin is not None:
            lo = max(sx(base * (1.0 - d.margin)), x0)   # a wide margin: the band to the axis
            parts.append(f'<rect class="band" x="{num(lo)}" y="{num(y - 10)}" '
                         f'width="{num(max(1.0, sx(base) - lo))}" height="20">'
                         f"<title>{esc(f'a win needed {d.margin:.1%}')}</title></rect>")
        parts.append(text(4, y + 4, f"{d.name}: {OPTION_LABELS.get(d.chosen, d.chosen)}",
                          cls="strong"))
        lanes = [(y - 9, -1e9), (y + 17, -1e9), (y - 20, -1e9)]   # (baseline, right edge)
        for k, v in sorted(d.options, key=lambda kv: (kv[0] in (d.chosen, d.baseline), kv[1])):
            cls = "opt pick" if k == d.chosen else ("opt base" if k == d.baseline else "opt")
            name = short(OPTION_LABELS.get(k, k), 24)
            parts.append(f'<circle class="{cls}" cx="{num(sx(v))}" cy="{num(y)}" r="5">'
                         f"<title>{esc(f'{name}: {v:.3f} ms')}</title></circle>")
            half = 2.9 * len(name)          # about half the label's width at 10px
            i_lane = next((i for i, (_, right) in enumerate(lanes)
                           if sx(v) - half > right + 4), None)
            if i_lane is not None:
                ly, _ = lanes[i_lane]
                lanes[i_lane] = (ly, sx(v) + half)
                parts.append(text(sx(v), ly, name, cls="dim", anchor="middle"))
        m = "" if d.margin is None else f"a win needed {d.margin:.1%}"
        parts.append(text(x1 + 10, y + 4, m, cls="dim"))
    return svg(width, bottom + 34, "".join(parts), label="optimize decisions")


def stacked_plot(b: Breakdown) -> str:
    width, x0, x1, top, bh = 860.0, 150.0, 760.0, 8.0, 26.0
    total = max(sum(b.pytorch.values()), sum(b.chosen.values()), 1e-9)
    sx = Scale.fit([0.0, total], x0, x1, pad=0.02)
    parts = [axis_x(sx, top + 2 * (bh + 10) + 2, top - 4, lambda v: f"{v:g}",
                    label="ms per step in convolutions (sum over layers)")]
    for i, (label, pick) in enumerate((("PyTorch's path", "pytorch_ms"),
                                       ("chosen", "chosen_ms"))):
        y = top + i * (bh + 10)
        parts.append(text(4, y + bh / 2 + 4, label, cls="strong"))
        acc = 0.0
        for d in DIRECTIONS:
            for x in b.items:
                if x.direction != d:
                    continue
                v = getattr(x, pick) or 0.0
                tip = f"{x.layer} {d}: {v:.4f} ms ({x.key if pick == 'chosen_ms' else 'PyTorch'})"
                parts.append(f'<rect class="bar {d}" x="{num(sx(acc))}" y="{num(y)}" '
                             f'width="{num(max(0.3, sx(acc + v) - sx(acc)))}" height="{num(bh)}">'
                             f"<title>{esc(tip)}</title></rect>")
                acc += v
        parts.append(text(sx(acc) + 6, y + bh / 2 + 4, f"{acc:.3f} ms", cls="dim"))
    return svg(width, top + 2 * (bh + 10) + 36, "".join(parts),
               label="convolution time per step by direction")


def waterfall_plot(b: Breakdown) -> str:
    steps = waterfall_steps(b)
    start, end = sum(b.pytorch.values()), sum(b.chosen.values())
    width, x0, x1, rh, top = 860.0, 300.0, 760.0, 18.0, 8.0
    levels, acc = [start], start
    for _, v in steps:
        acc += v
        levels.append(acc)
    sx = Scale.fit([0.0, *levels], x0, x1, pad=0.03)
    n = len(steps) + 2
    bottom = top + rh * n + 4
    parts = [axis_x(sx, bottom, top - 4, lambda v: f"{v:g}", label="ms per step in convolutions")]

    def bar(i: int, a: float, c: float, cls: str, label: str, tip: str) -> None:
        y = top + rh * i + 2
        lo, hi = min(a, c), max(a, c)
        parts.append(text(4, y + rh / 2 + 2, short(label, 46), cls="mono"))
        parts.append(f'<rect class="bar {cls}" x="{num(sx(lo))}" y="{num(y)}" '
                     f'width="{num(max(0.6, sx(hi) - sx(lo)))}" height="{num(rh - 4)}">'
                     f"<title>{esc(tip)}</title></rect>")

    bar(0, 0.0, start, "total", "PyTorch's path", f"{start:.3f} ms")
    acc = start
    for i, (label, v) in enumerate(steps, start=1):
        bar(i, acc, acc + v, "gain" if v < 0 else "loss", label, f"{label}: {v:+.4f} ms")
        acc += v
    bar(n - 1, 0.0, end, "total", "chosen", f"{end:.3f} ms")
    return svg(width, bottom + 34, "".join(parts), label="waterfall of per-layer changes")


# ------------------------------------------------------------------------------ text
def _speedups(run: OptimizeRun) -> str:
    items = []
    iv = speedup_interval(run)
    for label, v, runs in run.speedups:
        extra = ""
        if runs:
            extra = " (per process: " + ", ".join(f"{r:.3f}" for r in runs) + ")"
        elif iv is not None and label == "convdoctor vs PyTorch":
            extra = f" (95% interval from the medians' CIs: {iv[0]:.3f}-{iv[1]:.3f}x)"
        items.append(f"<li><b>{fmt_ratio(v, 3)}</b> {esc(label)}{esc(extra)}</li>")
    if not items:
        return ""
    if iv is None and not any(runs for _, _, runs in run.speedups):
        items.append('<li class="note">No step samples in this file: the figure\'s uncertainty '
                     "is not known.</li>")
    return f"<ul>{''.join(items)}</ul>"


def _decision_text(decisions: list[Decision]) -> str:
    return "<ul class=\"caption\">" + "".join(
        f"<li><b>{esc(d.name)}</b>: {esc(d.reason, 600)}</li>" for d in decisions) + "</ul>"


def _layer_table(b: Breakdown) -> str:
    rows = "".join(
        f"<tr><td>{esc(x.layer)}</td><td>{esc(x.direction)}</td><td><code>{esc(x.key)}</code></td>"
        f'<td>{esc(x.source)}</td><td class="num">{x.pytorch_ms or 0:.4f}</td>'
        f'<td class="num">{x.chosen_ms or 0:.4f}</td>'
        f'<td class="num">{fmt_ratio((x.pytorch_ms or 0) / x.chosen_ms if x.chosen_ms else None)}'
        "</td></tr>" for x in b.items[:MAX_TABLE])
    return ('<details class="block"><summary>every layer and direction with both times '
            f"({len(b.items)})</summary><div class=\"scroll\"><table><tr><th>layer</th><th>dir"
            "</th><th>chosen</th><th>source</th><th class=\"num\">PyTorch ms</th><th class=\"num\">"
            f"chosen ms</th><th class=\"num\">speedup</th></tr>{rows}</table></div></details>")


def run_block(run: OptimizeRun) -> str:
    out = [f"<h3>{esc(run.name)} \u00b7 {esc(run.device)}</h3>"]
    rows = end_to_end(run)
    if rows:
        out.append(e2e_plot(rows))
    out.append(_speedups(run))
    if run.decisions:
        out.append(decisions_plot(list(run.decisions)))
        out.append(_decision_text(list(run.decisions)))
    b = breakdown(run)
    if b.items and any(d.name == "routing" and d.chosen == "unrouted" for d in run.decisions):
        out.append('<p class="caption"><b>Routing is off</b>: measured end to end, the routes '
                   "were not faster, so the model runs PyTorch's path; the chosen bars show "
                   "what the tuned routes take per convolution.</p>")
    if b.items:
        out.append(stacked_plot(b))
        out.append(waterfall_plot(b))
        out.append(_layer_table(b))
        if b.untimed:
            out.append(f'<p class="caption">{b.untimed} layer-direction(s) without a tuned time '
                       "of both paths (not tuned: PyTorch's path) are not in the bars.</p>")
    elif not run.layers:
        out.append('<p class="caption">Per-layer times are not in this file (the output of '
                   "<code>convdoctor optimize --json</code> has them).</p>")
    if run.notes:
        out.append('<ul class="caption">' + "".join(f"<li>{esc(n, 400)}</li>"
                                                     for n in run.notes[:12]) + "</ul>")
    out.append(f'<p class="caption">from {esc(run.source)}</p>')
    return "".join(out)


LEGEND = ('<p class="legend"><span class="sw chosen"></span>convdoctor, and the option taken'
          '<span class="sw heur"></span>PyTorch, and the option to beat; dot: one step; tick: '
          "median; bar: the range of the processes' medians, or the 95% CI of the median; "
          'diamond: one process\'s median<span class="sw band"></span>margin a win needed'
          '<span class="sw fprop"></span>fprop<span class="sw dgrad"></span>dgrad'
          '<span class="sw wgrad"></span>wgrad</p>')


def render(inputs: Inputs) -> str | None:
    if not inputs.runs:
        return None
    return LEGEND + "".join(run_block(r) for r in inputs.runs)


SECTION = Section("optimize", "optimize", render)
