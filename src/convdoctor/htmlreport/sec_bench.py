"""Bench: the distribution of convdoctor's speedups per configuration and direction.

Per bench file two strips on a log axis: the rows' speedups over `benchmark=True` and over
PyTorch's heuristic (the referee processes' medians: `speedup_vs_benchmark`,
`speedup_vs_heuristic`), with their quartiles, the geometric mean and the 1.0x line. Below: the
rows slower than the faster PyTorch path by more than 2% (`speedup_vs_best`), and the unstable
rows, where convdoctor's tuning runs chose paths more than 3% apart (`stability`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .model import BenchDoc, Inputs, Section
from .svg import (
    Scale,
    axis_x,
    dots_path,
    esc,
    fmt_ratio,
    fmt_time,
    jitter,
    num,
    positive,
    quantile,
    short,
    svg,
    text,
)

SLOW_LIMIT = 0.02
UNSTABLE_LIMIT = 0.03
MAX_LISTED = 40


@dataclass(frozen=True)
class Dist:
    label: str
    versus: str                      # "benchmark=True" or "heuristic"
    values: tuple[float, ...]
    geomean: float | None
    share_110: float | None          # share of rows at 1.10x or more
    slower: int                      # rows below 1/1.02


def geomean(xs: Sequence[float]) -> float | None:
    vals = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in vals) / len(vals)) if vals else None


def bench_label(b: BenchDoc) -> str:
    return f"{b.config} {b.direction} \u00b7 {b.device}"


def dist(b: BenchDoc, field: str, versus: str) -> Dist:
    vals = tuple(v for v in (positive(r.get(field)) for r in b.rows) if v is not None)
    return Dist(bench_label(b), versus, vals, geomean(vals),
                sum(1 for v in vals if v >= 1.10) / len(vals) if vals else None,
                sum(1 for v in vals if v < 1.0 / (1.0 + SLOW_LIMIT)))


def distributions(benches: Sequence[BenchDoc]) -> list[Dist]:
    out = []
    for b in sorted(benches, key=lambda b: (b.config, b.direction, b.device)):
        out.append(dist(b, "speedup_vs_benchmark", "benchmark=True"))
        out.append(dist(b, "speedup_vs_heuristic", "heuristic"))
    return out


def slow_rows(b: BenchDoc, limit: float = SLOW_LIMIT) -> list[dict[str, Any]]:
    """Rows slower than the faster PyTorch path by more than `limit`, slowest first."""
    rows = [r for r in b.rows if (positive(r.get("speedup_vs_best")) or math.inf)
            < 1.0 / (1.0 + limit)]
    return sorted(rows, key=lambda r: float(r["speedup_vs_best"]))


def unstable_rows(b: BenchDoc, limit: float = UNSTABLE_LIMIT) -> list[dict[str, Any]]:
    """Rows whose tuning runs chose paths more than `limit` apart (referee times), worst first."""
    rows = [r for r in b.rows if (positive(r.get("stability")) or 0.0) > limit]
    return sorted(rows, key=lambda r: -float(r["stability"]))


def plot(dists: list[Dist]) -> str:
    width, lab_w, x0, x1, rh, top = 1000.0, 330.0, 340.0, 780.0, 24.0, 10.0
    vals = [v for d in dists for v in d.values]
    sx = Scale.fit(vals, x0, x1, log=True, include=[0.9, 1.2], pad=0.04)
    bottom = top + rh * len(dists) + 4
    parts = [axis_x(sx, bottom, top - 4, lambda v: f"{v:g}x",
                    label="speedup (log scale): PyTorch's time / convdoctor's time")]
    parts.append(f'<path class="one" d="M{num(sx(1.0))} {num(top - 4)}V{num(bottom)}"/>')
    for i, d in enumerate(dists):
        y = top + rh * i + rh / 2
        head, _, dev = d.label.partition(" \u00b7 ")
        if i % 2 == 0:
            parts.append(text(4, y + 4, short(head, 24), cls="strong"))
        else:
            parts.append(text(4, y + 4, short(dev, 30), cls="dim", title=dev))
        parts.append(text(lab_w, y + 4, f"vs {d.versus} ({len(d.values)})", cls="dim",
                          anchor="end"))
        s = sorted(d.values)
        if s:
            q1, q3 = quantile(s, 0.25), quantile(s, 0.75)
            parts.append(f'<rect class="box" x="{num(sx(q1))}" y="{num(y - 7)}" '
                         f'width="{num(max(1.0, sx(q3) - sx(q1)))}" height="14"/>')
            cls = "bench" if d.versus == "benchmark=True" else "heur"
            pts = [(round(sx(v)), round(y + jitter(k, 5.0))) for k, v in enumerate(d.values)]
            parts.append(f'<path class="pt {cls}" d="{dots_path(pts)}"/>')
        if d.geomean:
            parts.append(f'<path class="med" d="M{num(sx(d.geomean))} {num(y - 9)}v18"/>')
            share = "-" if d.share_110 is None else f"{d.share_110:.0%}"
            parts.append(text(x1 + 14, y + 4, f"geomean {fmt_ratio(d.geomean, 3)}, {share} "
                              f">= 1.10x, {d.slower} < 0.98x", cls="dim"))
    return svg(width, bottom + 34, "".join(parts), label="distribution of speedups")


def _env_text(b: BenchDoc) -> str:
    e = b.env
    bits = [f"driver {e['driver']}" if e.get("driver") else "",
            f"CUDA {e['cuda_runtime']}" if e.get("cuda_runtime") else "",
            f"cuDNN {e['cudnn']}" if e.get("cudnn") else "",
            f"torch {e['torch']}" if e.get("torch") else ""]
    return ", ".join(b for b in bits if b)


def summary_table(benches: Sequence[BenchDoc]) -> str:
    rows = []
    for b in sorted(benches, key=lambda b: (b.config, b.direction, b.device)):
        vb, vh = dist(b, "speedup_vs_benchmark", ""), dist(b, "speedup_vs_heuristic", "")
        best = [v for v in (positive(r.get("speedup_vs_best")) for r in b.rows) if v]
        stab = [v for v in (r.get("stability") for r in b.rows) if isinstance(v, (int, float))]
        stable = sum(1 for v in stab if v <= UNSTABLE_LIMIT) / len(stab) if stab else None
        rows.append(
            f'<tr><td class="nw">{esc(b.config)}</td><td>{esc(b.direction)}</td>'
            f'<td class="nw">{esc(b.device)}</td>'
            f'<td class="num">{len(b.rows)}</td>'
            f'<td class="num">{fmt_ratio(vb.geomean, 3)}</td>'
            f'<td class="num">{fmt_ratio(vh.geomean, 3)}</td>'
            f'<td class="num">{"-" if vb.share_110 is None else f"{vb.share_110:.0%}"}</td>'
            f'<td class="num">{fmt_ratio(min(best) if best else None, 3)}</td>'
            f'<td class="num">{"-" if stable is None else f"{stable:.0%}"}</td>'
            f"<td>{esc(_env_text(b))}</td><td><code>{esc(b.name)}</code></td></tr>")
    return ('<table><tr><th>config</th><th>direction</th><th>device</th><th class="num">rows'
            '</th><th class="num">geomean vs benchmark=True</th><th class="num">geomean vs '
            'heuristic</th><th class="num">&gt;= 1.10x vs benchmark=True</th>'
            '<th class="num">worst vs faster PyTorch</th><th class="num">runs within 3%</th>'
            f"<th>versions</th><th>file</th></tr>{''.join(rows)}</table>")


def _listing(title: str, rows: list[tuple[BenchDoc, dict[str, Any]]]) -> str:
    if not rows:
        return f'<p class="caption">{esc(title)}: none.</p>'
    body = []
    for b, r in rows[:MAX_LISTED]:
        winners = r.get("winners") if isinstance(r.get("winners"), list) else []
        layer = " ".join(str(r[k]) for k in ("group", "name") if r.get(k))
        body.append(
            f"<tr><td>{esc(layer)}</td><td>{esc(r.get('problem') or '?')}</td>"
            f"<td>{esc(b.config)} {esc(b.direction)}</td>"
            f'<td class="num">{fmt_ratio(positive(r.get("speedup_vs_best")), 3)}</td>'
            f'<td class="num">{_pct(r.get("stability"))}</td>'
            f'<td class="num">{esc(fmt_time(positive(r.get("tuned_s"))))}</td>'
            f'<td class="num">{esc(fmt_time(positive(r.get("heuristic_s"))))}</td>'
            f'<td class="num">{esc(fmt_time(positive(r.get("benchmark_s"))))}</td>'
            f"<td><code>{esc(' / '.join(dict.fromkeys(str(w) for w in winners)))}</code></td>"
            "</tr>")
    more = (f'<p class="caption">... and {len(rows) - MAX_LISTED} more.</p>'
            if len(rows) > MAX_LISTED else "")
    return (f"<h3>{esc(title)} ({len(rows)})</h3><div class=\"scroll\"><table><tr><th>layer</th>"
            "<th>problem</th><th>pass</th><th class=\"num\">vs faster PyTorch</th>"
            "<th class=\"num\">runs apart</th><th class=\"num\">convdoctor</th>"
            "<th class=\"num\">heuristic</th><th class=\"num\">benchmark=True</th>"
            f"<th>chosen (per run)</th></tr>{''.join(body)}</table></div>{more}")


def _pct(v: object) -> str:
    return f"{v:.1%}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def render(inputs: Inputs) -> str | None:
    if not inputs.benches:
        return None
    slow = [(b, r) for b in inputs.benches for r in slow_rows(b)]
    unstable = [(b, r) for b in inputs.benches for r in unstable_rows(b)]
    intro = ("<p>Each dot is one row (a layer's convolution): PyTorch's time over convdoctor's, "
             "both timed by the referee processes; the box spans the middle half, the tick is "
             "the geometric mean, the dashed line 1.0x.</p>")
    return (intro + plot(distributions(inputs.benches)) + summary_table(inputs.benches)
            + _listing(f"Slower than the faster PyTorch path by more than {SLOW_LIMIT:.0%}",
                       slow)
            + _listing(f"Unstable: tuning runs chose paths more than {UNSTABLE_LIMIT:.0%} apart",
                       unstable))


SECTION = Section("bench", "Bench", render)
