"""Tuning: per problem, every candidate's samples on a log time axis.

One row per measured candidate (the fastest `MAX_ROWS`, plus the chosen one and PyTorch's paths
wherever they rank): a dot per sample, a tick at the median, a bar over the 95% confidence interval
of the median where the source has one, and a box (quartiles, whiskers to the extremes) when there
are more samples than `STRIP_POINTS` (the strip then shows that many quantiles of them). The
slower measured candidates share one row, the screened-out ones another (a tick each, at the
median of its screen samples). Candidates that were disqualified, failed or were not offered have
no time: they are listed below the plot with the reason. At the right: each row's sample count,
the samples discarded because the clock showed a slowdown, and the SM clock it was measured at.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .model import BENCHMARK_KEY, HEURISTIC_KEY, Cand, Inputs, Section, TunedProblem
from .svg import (
    Scale,
    axis_x,
    dots_path,
    esc,
    fmt_ratio,
    fmt_tick,
    fmt_time,
    jitter,
    num,
    quantile,
    short,
    svg,
    text,
    thin,
)

MAX_ROWS = 12          # measured candidates drawn on rows of their own
STRIP_POINTS = 16      # samples drawn per row (quantiles of larger samples)
OPEN_BLOCKS = 12       # problems shown open; the rest are one line each until opened
TIMED = ("ok", "not-measured")
ROLE_CLASS = {"chosen": "chosen", "heuristic": "heur", "benchmark": "bench"}


@dataclass(frozen=True)
class StripRow:
    label: str
    key: str                        # the candidate key ("" for a shared row)
    roles: tuple[str, ...]          # chosen, heuristic, benchmark, benchmark's pick
    status: str
    points: tuple[float, ...]       # seconds
    referee: tuple[float, ...] = ()
    median_s: float | None = None
    ci: tuple[float, float] | None = None
    n: int = 0
    discarded: int = 0
    clock_mhz: float | None = None
    reason: str = ""


def label_of(key: str, tp: TunedProblem) -> str:
    """How the page names a PyTorch path."""
    if key == HEURISTIC_KEY:
        return "PyTorch heuristic"
    if key == BENCHMARK_KEY:
        return "benchmark=True"
    h = tp.heuristic
    if h is not None and key == h[0]:
        return "PyTorch default"
    return key


def roles_of(tp: TunedProblem, key: str) -> tuple[str, ...]:
    roles = []
    if key in tp.chosen:
        roles.append("chosen")
    h = tp.heuristic
    if h is not None and key == h[0]:
        roles.append("heuristic")
    if key == BENCHMARK_KEY:
        roles.append("benchmark")
    if key in tp.benchmark_picks:
        roles.append("benchmark's pick")
    return tuple(roles)


def _row(tp: TunedProblem, c: Cand) -> StripRow:
    lab = label_of(c.key, tp)
    if lab != c.key:
        lab = f"{lab} ({c.key})" if c.key not in (HEURISTIC_KEY, BENCHMARK_KEY) else lab
    return StripRow(lab, c.key, roles_of(tp, c.key), c.status, c.samples, c.referee, c.median_s,
                    c.ci, len(c.samples), c.discarded, c.clock_mhz, c.reason)


def _med(c: Cand) -> float:
    if c.median_s:
        return c.median_s
    pool = c.samples or c.referee
    return statistics.median(pool) if pool else math.inf


def strip_rows(tp: TunedProblem) -> tuple[list[StripRow], list[Cand]]:
    """The rows of a problem's plot, and the candidates without a time (listed with reasons)."""
    timed = sorted((c for c in tp.candidates if c.status in TIMED
                    and (c.samples or c.median_s or c.referee)), key=_med)
    screened = sorted((c for c in tp.candidates if c.status == "screened-out"
                       and (c.samples or c.median_s)), key=_med)
    shown = {id(c) for c in timed[:MAX_ROWS]} | {id(c) for c in timed if roles_of(tp, c.key)}
    rows = [_row(tp, c) for c in timed if id(c) in shown]
    rest = [c for c in timed if id(c) not in shown]
    if rest:
        rows.append(StripRow(f"{len(rest)} more measured (median each)", "", (), "ok",
                             tuple(_med(c) for c in rest), n=len(rest),
                             discarded=sum(c.discarded for c in rest)))
    if screened:
        rows.append(StripRow(f"screened out ({len(screened)}, median each)", "", (),
                             "screened-out", tuple(_med(c) for c in screened), n=len(screened),
                             discarded=sum(c.discarded for c in screened)))
    listed = {id(c) for c in timed} | {id(c) for c in screened}
    untimed = [c for c in tp.candidates if id(c) not in listed]
    return rows, untimed


def _row_class(r: StripRow) -> str:
    if r.status == "screened-out":
        return "screen"
    for role in r.roles:
        if role in ROLE_CLASS:
            return ROLE_CLASS[role]
    return "ok"


@dataclass
class _Marks:
    """A plot's marks by kind, each kind drawn as one path (a few bytes per mark)."""

    box: list[str]
    ref: list[str]
    ci: list[str]
    med: list[str]
    dots: list[str]

    def svg(self) -> str:
        out = "".join(self.dots)
        for cls, ds in (("box", self.box), ("ref", self.ref), ("ci", self.ci),
                        ("med", self.med)):
            if ds:
                out += f'<path class="{cls}" d="{"".join(ds)}"/>'
        return out


def _strip(r: StripRow, sx: Scale, y: float, m: _Marks) -> None:
    """One row's marks: box (large samples), dots, referee diamonds, CI bar and median tick."""
    vals = sorted(v for v in r.points if v > 0)
    yi = round(y)
    if len(vals) > STRIP_POINTS and r.key:
        a, b = round(sx(quantile(vals, 0.25))), round(sx(quantile(vals, 0.75)))
        m.box.append(f"M{round(sx(vals[0]))} {yi}H{a}M{b} {yi}H{round(sx(vals[-1]))}"
                     f"M{a} {yi - 5}h{max(1, b - a)}v10H{a}z")
        vals = thin(vals, STRIP_POINTS)
    spread = 4.0 if r.key else 2.5
    pts = [(round(sx(v)), round(y + jitter(i, spread))) for i, v in enumerate(vals)]
    if pts:
        m.dots.append(f'<path class="pt {_row_class(r)}" d="{dots_path(pts)}"/>')
    m.ref.extend(f"M{num(sx(v))} {yi - 4}l4 4-4 4-4-4z" for v in r.referee)
    if r.ci is not None and r.key:
        m.ci.append(f"M{num(sx(r.ci[0]))} {yi + 7}H{num(sx(r.ci[1]))}")
    if r.median_s and r.key:
        m.med.append(f"M{num(sx(r.median_s))} {yi - 7}v14")


def _title(r: StripRow, shown: str) -> str:
    """A row label's tooltip: only what the label does not already say."""
    marks = ", ".join(r.roles)
    if shown == r.label == r.key and not marks and not r.reason:
        return ""
    return r.key + (f" [{marks}]" if marks else "") + (f": {r.reason}" if r.reason else "")


def plot(tp: TunedProblem, rows: list[StripRow]) -> str:
    """The problem's strip plot as inline SVG."""
    width, x0, x1, rh, top = 860.0, 280.0, 690.0, 18.0, 22.0
    vals = [v for r in rows for v in (*r.points, *r.referee) if v > 0]
    vals += [v for r in rows if r.ci for v in r.ci]
    sx = Scale.fit(vals, x0, x1, log=True)
    bottom = top + rh * len(rows) + 4
    clocks = {round(r.clock_mhz) for r in rows if r.clock_mhz}
    parts = [axis_x(sx, bottom, top - 6, fmt_tick, label="time per call (log scale)",
                    max_ticks=7)]
    timed = tp.sample_kind == "samples"     # bench rows: run medians, nothing discarded
    cols = [("n", 712)] + ([("discarded", 776)] if timed else []) \
        + ([("clock MHz", 850)] if len(clocks) > 1 else [])
    for hdr, x in cols:
        parts.append(text(x, 12, hdr, cls="dim", anchor="end"))
    marks = _Marks([], [], [], [], [])
    for i, r in enumerate(rows):
        y = top + rh * i + rh / 2
        chosen = "chosen" in r.roles
        if chosen:
            parts.append(f'<rect class="rowhl" x="0" y="{num(y - rh / 2)}" width="{num(width)}" '
                         f'height="{num(rh)}"/>')
        name = short(r.label, 44)
        parts.append(text(4, y + 4, name, cls="mono strong" if chosen else "mono",
                          title=_title(r, name)))
        _strip(r, sx, y, marks)
        parts.append(text(712, y + 4, str(r.n), cls="dim", anchor="end"))
        if r.discarded:
            parts.append(text(776, y + 4, str(r.discarded), cls="dim", anchor="end"))
        if r.clock_mhz and len(clocks) > 1:
            parts.append(text(850, y + 4, f"{r.clock_mhz:.0f}", cls="dim", anchor="end"))
    parts.append(marks.svg())
    return svg(width, bottom + 34, "".join(parts), label="candidate times")


def _facts(tp: TunedProblem) -> str:
    clocks = sorted({round(c.clock_mhz) for c in tp.candidates if c.clock_mhz})
    disc = sum(c.discarded for c in tp.candidates)
    bits = [f"{tp.device}", tp.source]
    if tp.sample_kind != "samples":
        bits.append("points: each tuning run's median of a candidate; diamonds: the referee "
                    "processes' times")
    if tp.tuning_s:
        bits.append(f"tuned in {tp.tuning_s:.1f} s")
    if tp.noise_band:
        bits.append(f"ties within {tp.noise_band:.1%}")
    if clocks:
        bits.append("SM clock " + (f"{clocks[0]} MHz" if len(clocks) == 1 else
                                   f"{clocks[0]}-{clocks[-1]} MHz"))
    if tp.candidates and tp.sample_kind == "samples":
        bits.append(f"{disc} samples discarded (clock slowdown)")
    if tp.degraded:
        bits.append("measured while the device was slowed down: nothing chosen")
    if tp.imported:
        bits.append("imported from another machine, not measured here")
    return '<p class="caption">' + esc(" \u00b7 ".join(bits)) + "</p>"


def _untimed(tp: TunedProblem, cands: list[Cand]) -> str:
    if not cands:
        return ""
    items = "".join(f"<li><code>{esc(c.key)}</code> <b>{esc(c.status)}</b>"
                    + (f": {esc(c.reason, 400)}" if c.reason else "") + "</li>"
                    for c in cands[:60])
    more = f"<li>... {len(cands) - 60} more</li>" if len(cands) > 60 else ""
    return (f'<p class="caption">{len(cands)} candidate(s) without a time:</p>'
            f'<ul class="caption">{items}{more}</ul>')


def summary_line(tp: TunedProblem) -> str:
    """The one-line headline of a problem: its choice and the speedups over PyTorch's paths."""
    parts = [tp.label]
    if tp.chosen:
        parts.append("chosen " + " / ".join(label_of(k, tp) for k in tp.chosen)
                     + (f" {fmt_time(tp.chosen_s)}" if tp.chosen_s else ""))
    else:
        parts.append("nothing chosen")
    h = tp.heuristic
    if h is not None and tp.chosen_s:
        parts.append(f"{fmt_ratio(tp.speedup_over(h[1]))} vs {label_of(h[0], tp)}")
    if tp.benchmark_s and tp.chosen_s:
        parts.append(f"{fmt_ratio(tp.speedup_over(tp.benchmark_s))} vs benchmark=True")
    return " \u00b7 ".join(parts)


def block(tp: TunedProblem, *, open_: bool) -> str:
    rows, untimed = strip_rows(tp)
    body = plot(tp, rows) if rows else '<p class="note">No candidate has a time.</p>'
    attr = ' open=""' if open_ else ""
    return (f'<details class="block"{attr}><summary>{esc(summary_line(tp))}'
            f"</summary>{body}{_facts(tp)}{_untimed(tp, untimed)}</details>")


LEGEND = ('<p class="legend"><span class="sw chosen"></span>chosen'
          '<span class="sw heur"></span>PyTorch heuristic (default)'
          '<span class="sw bench"></span>benchmark=True<span class="sw ok"></span>other measured'
          '<span class="sw screen"></span>screened out; tick: median; bar: 95% CI of the '
          "median; box: quartiles and extremes</p>")


def render(inputs: Inputs) -> str | None:
    if not inputs.tuned:
        return None
    devices = sorted({t.device for t in inputs.tuned})
    chosen = [t for t in inputs.tuned if t.chosen_s]
    intro = (f"<p>{len(inputs.tuned)} tuned problem(s) on {esc(', '.join(devices))}; "
             f"{len(chosen)} with a choice. Each row is a candidate on a log time axis; the "
             "chosen one is highlighted. The first "
             f"{min(OPEN_BLOCKS, len(inputs.tuned))} are open; open any other by its line.</p>")
    blocks = "".join(block(t, open_=i < OPEN_BLOCKS) for i, t in enumerate(inputs.tuned))
    return intro + LEGEND + blocks


SECTION = Section("tuning", "Tuning", render)
