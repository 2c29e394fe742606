"""Roofline: each tuned problem as a point on its GPU's roofline.

x: arithmetic intensity (the problem's FLOPs over the fewest bytes it must move: one read or write
of x, w and y); y: achieved FLOP/s at the chosen candidate's time. The roof is min(peak FLOP/s,
intensity x peak bandwidth) of the problem's math mode (`measure.roofline.percent_of_roofline`):
one plot per device and math mode, points coloured by direction. The vertical distance from a
point up to the roof is its headroom; the table lists the problems with the most.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..measure.roofline import math_key, percent_of_roofline
from .model import DevicePeaks, Inputs, Section, TunedProblem
from .svg import Scale, axis_x, axis_y, esc, fmt_si, fmt_time, num, svg, text

DIRECTIONS = ("fprop", "dgrad", "wgrad")
MATH_LABELS = {"float32/tf32": "fp32, TF32 allowed", "float32/strict": "fp32 strict",
               "float16": "fp16", "bfloat16": "bf16"}
HEADROOM_ROWS = 10


@dataclass(frozen=True)
class RoofPoint:
    label: str
    direction: str
    seconds: float
    flops: float
    intensity: float             # FLOP per byte
    achieved: float              # FLOP/s
    percent: float | None        # of the roof at this intensity (None without peaks)
    bound: str | None            # "compute" | "memory"


@dataclass(frozen=True)
class RoofPlot:
    device: str
    math: str                    # a `math_key`
    peaks: DevicePeaks | None
    points: tuple[RoofPoint, ...]


def peaks_for(device: str, peaks: tuple[DevicePeaks, ...]) -> DevicePeaks | None:
    want = " ".join(device.lower().split())
    return next((p for p in peaks if " ".join(p.device.lower().split()) == want), None)


def point_of(tp: TunedProblem, pk: DevicePeaks | None) -> RoofPoint | None:
    if not tp.chosen_s or not tp.flops or not tp.min_bytes:
        return None
    key = math_key(tp.dtype, tp.math)
    pf = pk.flops.get(key, 0.0) if pk else 0.0
    bw = pk.bandwidth if pk else 0.0
    rf = percent_of_roofline(tp.flops, tp.min_bytes, tp.chosen_s, pf, bw)
    return RoofPoint(tp.label, tp.direction, tp.chosen_s, tp.flops, tp.flops / tp.min_bytes,
                     tp.flops / tp.chosen_s, rf["percent"], rf["bound"])


def plots(inputs: Inputs) -> list[RoofPlot]:
    """One plot per (device, math mode), problems deduplicated by key (first source wins)."""
    seen: set[tuple[str, str]] = set()
    groups: dict[tuple[str, str], list[RoofPoint]] = {}
    for tp in inputs.tuned:
        if (tp.device, tp.key) in seen:
            continue
        seen.add((tp.device, tp.key))
        pk = peaks_for(tp.device, inputs.peaks)
        pt = point_of(tp, pk)
        if pt is not None:
            groups.setdefault((tp.device, math_key(tp.dtype, tp.math)), []).append(pt)
    return [RoofPlot(dev, m, peaks_for(dev, inputs.peaks), tuple(pts))
            for (dev, m), pts in sorted(groups.items())]


def _ceiling(sx: Scale, sy: Scale, pf: float, bw: float) -> tuple[str, tuple[float, float]]:
    """The roof as one path (the bandwidth slope up to the ridge point, then the flat peak),
    inside the plot; and where on the slope its label goes."""
    xs0 = max(sx.lo, sy.lo / bw)
    xr = min(max(pf / bw, xs0), sx.hi)
    pts = [(sx(x), sy(min(pf, x * bw))) for x in (xs0, xr, sx.hi)]
    xl = xs0 * (xr / xs0) ** 0.4
    return "M" + "L".join(f"{num(x)} {num(y)}" for x, y in pts), (sx(xl), sy(min(pf, xl * bw)))


def plot_svg(p: RoofPlot) -> str:
    width, x0, x1, y0, y1 = 760.0, 70.0, 600.0, 330.0, 16.0
    ints = [pt.intensity for pt in p.points]
    ach = [pt.achieved for pt in p.points]
    pf = p.peaks.flops.get(p.math) if p.peaks else None
    bw = p.peaks.bandwidth if p.peaks else None
    extra_x = [pf / bw] if pf and bw else []
    sx = Scale.fit(ints, x0, x1, log=True, include=extra_x, pad=0.1)
    sy = Scale.fit(ach, y0, y1, log=True, include=[pf] if pf else [], pad=0.08)
    parts = [axis_x(sx, y0, y1, lambda v: f"{v:g}", label="arithmetic intensity (FLOP/byte)"),
             axis_y(sy, x0, x1, lambda v: fmt_si(v), label="achieved FLOP/s")]
    if pf and bw:
        cls = "ceil" + ("" if p.peaks and p.peaks.measured else " datasheet")
        path, (lx, ly) = _ceiling(sx, sy, pf, bw)
        parts.append(f'<path class="{cls}" d="{path}"/>')
        parts.append(text(x1 + 6, sy(pf) + 4, f"{fmt_si(pf, 'FLOP/s')}", cls="dim"))
        parts.append(text(lx - 6, ly - 4, fmt_si(bw, "B/s"), cls="dim", anchor="end"))
    for d in DIRECTIONS:
        for pt in p.points:
            if pt.direction != d:
                continue
            pct = "" if pt.percent is None else f", {pt.percent:.0f}% of the roof ({pt.bound})"
            tip = (f"{pt.label}: {fmt_time(pt.seconds)}, {fmt_si(pt.achieved, 'FLOP/s')} at "
                   f"{pt.intensity:.3g} FLOP/B{pct}")
            parts.append(f'<circle class="dot {d}" cx="{num(sx(pt.intensity))}" '
                         f'cy="{num(sy(pt.achieved))}" r="3.5"><title>{esc(tip)}</title></circle>')
    return svg(width, y0 + 36, "".join(parts),
               label=f"roofline of {p.device}, {MATH_LABELS.get(p.math, p.math)}")


def headroom(p: RoofPlot, n: int = HEADROOM_ROWS) -> list[RoofPoint]:
    """The points farthest below the roof (lowest % of it)."""
    return sorted((pt for pt in p.points if pt.percent is not None),
                  key=lambda pt: pt.percent or 0.0)[:n]


def direction_medians(p: RoofPlot) -> dict[str, float]:
    out = {}
    for d in DIRECTIONS:
        vals = [pt.percent for pt in p.points if pt.direction == d and pt.percent is not None]
        if vals:
            out[d] = statistics.median(vals)
    return out


def _caption(p: RoofPlot) -> str:
    n = len(p.points)
    if p.peaks is None:
        return (f"{n} problem(s). No peaks for {p.device}: points only; pass --peaks with the "
                "roofline measured on that device (convdoctor's roofline.json, or "
                "`convdoctor tune --json` output) to draw its roof.")
    kind = "measured" if p.peaks.measured else "datasheet (dashed: not measured here)"
    med = direction_medians(p)
    meds = ", ".join(f"{d} {v:.0f}%" for d, v in med.items())
    above = sum(1 for pt in p.points if pt.percent is not None and pt.percent > 100)
    s = (f"{n} problem(s); roof: {kind} peaks, {p.peaks.source}. Median share of the roof: "
         f"{meds}.")
    if above:
        s += (f" {above} point(s) above the roof: their operands were served from cache (the "
              "roof counts one trip to memory), or the peak is too low.")
    return s


def _table(p: RoofPlot) -> str:
    rows = headroom(p)
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{esc(pt.label)}</td><td>{esc(pt.direction)}</td>"
        f'<td class="num">{esc(fmt_time(pt.seconds))}</td>'
        f'<td class="num">{esc(fmt_si(pt.achieved, "FLOP/s"))}</td>'
        f'<td class="num">{pt.intensity:.3g}</td><td class="num">{pt.percent:.1f}%</td>'
        f"<td>{esc(pt.bound or '-')}</td>"
        f'<td class="num">{100.0 / pt.percent if pt.percent else math.inf:.1f}x</td></tr>'
        for pt in rows)
    return ('<table><tr><th>most headroom</th><th>dir</th><th class="num">time</th>'
            '<th class="num">achieved</th><th class="num">FLOP/B</th>'
            '<th class="num">of roof</th><th>bound</th><th class="num">headroom</th></tr>'
            f"{body}</table>")


def render(inputs: Inputs) -> str | None:
    ps = plots(inputs)
    if not ps:
        return None
    legend = ('<p class="legend"><span class="sw fprop"></span>fprop<span class="sw dgrad">'
              '</span>dgrad<span class="sw wgrad"></span>wgrad; hover a point for its problem'
              "</p>")
    out = [legend]
    for p in ps:
        out.append(f"<h3>{esc(p.device)} \u00b7 {esc(MATH_LABELS.get(p.math, p.math))}</h3>")
        out.append(plot_svg(p))
        out.append(f'<p class="caption">{esc(_caption(p))}</p>')
        out.append(_table(p))
    return "".join(out)


SECTION = Section("roofline", "Roofline", render)
