"""Inline SVG from the standard library: escaping, number formats, scales and axes.

Every piece of text that reaches the page goes through `esc`: control characters are shown as
visible escapes (`textsafe.clean`, as on the terminal), lone surrogates and XML's non-characters
likewise, and the result is HTML-escaped, so the page is well-formed XML as well as HTML and no
input can open a tag, an attribute or a script. Colours are CSS classes (the page's style sheet
holds the palette for light, dark and print), so a plot carries no colour of its own.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..textsafe import one_line

# lone surrogates (JSON may hold "\ud800"), U+FFFE/U+FFFF: not encodable or not allowed in XML
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def esc(value: object, limit: int = 2000) -> str:
    """Text for an HTML body or attribute: one line, control characters visible, escaped."""
    s = one_line(value)
    if len(s) > limit:
        s = s[: limit - 1] + "\u2026"
    s = _NOT_XML.sub(lambda m: f"\\u{ord(m.group(0)):04x}", s)
    return html.escape(s, quote=True)


def esc_block(value: object, limit: int = 20000) -> str:
    """Like `esc`, keeping newlines (for a `pre` block: a fix, a log excerpt)."""
    lines = str(value).splitlines() or [""]
    out, total = [], 0
    for ln in lines:
        out.append(esc(ln, limit))
        total += len(ln)
        if total > limit:
            out.append("\u2026")
            break
    return "\n".join(out)


def short(value: object, n: int) -> str:
    """`value` cut to `n` characters (an ellipsis marks the cut); not escaped."""
    s = str(value)
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def num(v: float) -> str:
    """A coordinate: one decimal, none when it is zero (keeps the SVG small)."""
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def fmt_time(s: float | None) -> str:
    """Seconds as a person reads them: 12.3 us, 4.56 ms, 1.234 s."""
    if s is None or not math.isfinite(s):
        return "-"
    if s >= 1.0:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms" if s < 0.1 else f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.3g} us" if s < 1e-4 else f"{s * 1e6:.1f} us"


def fmt_tick(s: float) -> str:
    """A time axis tick: as few digits as the tick needs (2 us, 50 us, 1.5 ms, 2 s)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if s >= scale:
            return f"{s / scale:g} {unit}"
    return f"{s * 1e9:g} ns"


def fmt_ratio(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}f}x"


def fmt_si(x: float | None, unit: str = "") -> str:
    """1.23e12 -> '1.23 T' + unit."""
    if x is None or not math.isfinite(x):
        return "-"
    for scale, p in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {p}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def finite_list(items: object, limit: int) -> tuple[float, ...]:
    """The finite positive numbers of a JSON list (at most `limit`), in order."""
    if not isinstance(items, list):
        return ()
    isf = math.isfinite
    return tuple(float(v) for v in items[:limit]
                 if (type(v) is float or type(v) is int) and v > 0 and isf(v))


def finite(v: object) -> float | None:
    """A finite float from a JSON value, or None (strings, booleans, NaN, infinities)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def positive(v: object) -> float | None:
    f = finite(v)
    return f if f is not None and f > 0 else None


@dataclass(frozen=True)
class Scale:
    """Maps a value range onto pixels, linearly or logarithmically (base 10)."""

    lo: float
    hi: float
    px0: float
    px1: float
    log: bool = False

    def __post_init__(self) -> None:
        a, b = (math.log10(self.lo), math.log10(self.hi)) if self.log else (self.lo, self.hi)
        object.__setattr__(self, "_a", a)
        object.__setattr__(self, "_k", (self.px1 - self.px0) / ((b - a) or 1.0))

    @classmethod
    def fit(cls, values: Iterable[float], px0: float, px1: float, *, log: bool = False,
            pad: float = 0.06, include: Sequence[float] = ()) -> Scale:
        # values a plot can hold (a log axis from 1e-250 to 1e250): anything beyond is no
        # measurement, and would overflow the axis
        vals = [v for v in (*values, *include)
                if math.isfinite(v) and abs(v) < 1e250 and (v > 1e-250 or not log)]
        if not vals:
            vals = [1.0, 10.0] if log else [0.0, 1.0]
        lo, hi = min(vals), max(vals)
        if log:
            a, b = math.log10(lo), math.log10(hi)
            span = max(b - a, 0.05)
            mid = (a + b) / 2
            a, b = mid - span / 2 - span * pad, mid + span / 2 + span * pad
            return cls(10 ** a, 10 ** b, px0, px1, True)
        span = hi - lo or (abs(hi) or 1.0)
        return cls(lo - span * pad, hi + span * pad, px0, px1, False)

    def __call__(self, v: float) -> float:
        a: float = self._a  # type: ignore[attr-defined]
        k: float = self._k  # type: ignore[attr-defined]
        if self.log:
            x = self.px0 + (math.log10(v if v > 1e-300 else 1e-300) - a) * k
        else:
            x = self.px0 + (v - a) * k
        # a value far off the axis (one the fit left out) stays just outside it, finite
        return min(max(x, self.px0 - 1e4), self.px0 + 1e4) if math.isfinite(x) else self.px0

    def ticks(self, max_ticks: int = 8) -> list[float]:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            return []
        if self.log:
            return _log_ticks(self.lo, self.hi, max_ticks)
        return _lin_ticks(self.lo, self.hi, max_ticks)


def _log_ticks(lo: float, hi: float, max_ticks: int) -> list[float]:
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for mults in ((1, 2, 5), (1, 3), (1,)):
        t = [m * 10.0 ** e for e in range(first, last + 1) for m in mults]
        t = [v for v in t if lo <= v <= hi]
        if len(t) <= max_ticks:
            if len(t) >= 2:
                return t
            break
    decades = [10.0 ** e for e in range(first, last + 1)]
    step = max(1, math.ceil(len(decades) / max_ticks))
    t = [v for v in decades[::step] if lo <= v <= hi]
    if len(t) >= 2:
        return t
    # a narrow range inside one decade: linear ticks read fine on a log axis
    return _lin_ticks(lo, hi, min(max_ticks, 5))


def _lin_ticks(lo: float, hi: float, max_ticks: int) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / max(1, max_ticks - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out, v = [], start
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


_ANCHOR = {"end": "r", "middle": "c"}   # text-anchor as a class of the style sheet


def _plain(v: float) -> str:
    return f"{v:g}"


def text(x: float, y: float, label: str, *, cls: str = "", anchor: str = "start",
         title: str = "") -> str:
    """A text element; `label` and `title` are escaped here."""
    cls = " ".join(c for c in (cls, _ANCHOR.get(anchor, "")) if c)
    c = f' class="{cls}"' if cls else ""
    body = esc(label) + (f"<title>{esc(title)}</title>" if title else "")
    return f'<text x="{num(x)}" y="{num(y)}"{c}>{body}</text>'


def axis_x(scale: Scale, y: float, top: float, fmt: Callable[[float], str] | None = None,
           *, label: str = "", max_ticks: int = 8) -> str:
    """Vertical grid lines at the ticks from `top` to `y`, tick labels below `y`."""
    parts = []
    f = fmt or _plain
    for t in scale.ticks(max_ticks):
        x = scale(t)
        parts.append(f'<path class="grid" d="M{num(x)} {num(top)}V{num(y)}"/>')
        parts.append(text(x, y + 13, f(t), cls="tick", anchor="middle"))
    parts.append(f'<path class="axis" d="M{num(scale.px0)} {num(y)}H{num(scale.px1)}"/>')
    if label:
        parts.append(text((scale.px0 + scale.px1) / 2, y + 28, label, cls="axlabel",
                          anchor="middle"))
    return "".join(parts)


def axis_y(scale: Scale, x: float, right: float, fmt: Callable[[float], str] | None = None,
           *, label: str = "", max_ticks: int = 7) -> str:
    """Horizontal grid lines at the ticks from `x` to `right`, tick labels left of `x`."""
    parts = []
    f = fmt or _plain
    for t in scale.ticks(max_ticks):
        y = scale(t)
        parts.append(f'<path class="grid" d="M{num(x)} {num(y)}H{num(right)}"/>')
        parts.append(text(x - 5, y + 4, f(t), cls="tick", anchor="end"))
    parts.append(f'<path class="axis" d="M{num(x)} {num(scale.px0)}V{num(scale.px1)}"/>')
    if label:
        mid = (scale.px0 + scale.px1) / 2
        parts.append(f'<text class="axlabel" text-anchor="middle" transform="translate('
                     f'{num(x - 48)} {num(mid)}) rotate(-90)">{esc(label)}</text>')
    return "".join(parts)


def svg(width: float, height: float, body: str, *, label: str) -> str:
    """An inline SVG element with an accessible name; `body` is trusted markup."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{num(width)}" '
            f'height="{num(height)}" viewBox="0 0 {num(width)} {num(height)}" role="img" '
            f'aria-label="{esc(label)}">{body}</svg>')


def dots_path(points: Iterable[tuple[int, int]]) -> str:
    """Many round dots as one path: zero-length segments with round caps, each a relative move
    from the one before (whole pixels: a few bytes a dot)."""
    out = []
    px = py = None
    for x, y in points:
        if px is None or py is None:
            out.append(f"M{x} {y}h0")
        else:
            out.append(f"m{x - px} {y - py}h0")
        px, py = x, y
    return "".join(out)


def jitter(i: int, spread: float) -> float:
    """A deterministic offset in [-spread, spread] for the i-th point of a strip (golden ratio)."""
    return ((i * 0.6180339887) % 1.0 - 0.5) * 2 * spread


def quantile(sorted_vals: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted, non-empty sequence."""
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    pos = q * (len(sorted_vals) - 1)
    i = int(math.floor(pos))
    j = min(i + 1, len(sorted_vals) - 1)
    return sorted_vals[i] + (sorted_vals[j] - sorted_vals[i]) * (pos - i)


def thin(sorted_vals: Sequence[float], n: int) -> list[float]:
    """At most `n` values spread evenly over the sorted sample (its quantiles): a strip of a
    large sample keeps its shape at a bounded size."""
    if len(sorted_vals) <= n:
        return list(sorted_vals)
    return [sorted_vals[round(i * (len(sorted_vals) - 1) / (n - 1))] for i in range(n)]
