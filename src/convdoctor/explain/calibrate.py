"""Calibrated confidence: from the evidence share of a cause to the probability that it is the cause.

The engine ranks causes by evidence score; the first cause's *share* is its score against its
strongest rival and the weight its messages leave open (`top_share`). `CalibrationMap` turns it into
a probability: isotonic (monotone, pool-adjacent-violators) fits of "the first cause was right"
against the share, one per kind of evidence (decisive fact, specific message, generic status), on
labelled real messages, stored in data/calibration.json with how they were fitted.
The other causes share what is left (`1 - p(top)`) in proportion to their scores, times the measured
chance that the right cause is among them when the top one is wrong.

`reliability()` and `ece()` measure a set of (confidence, correct) pairs.
"""

from __future__ import annotations

import bisect
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

PRIOR_MASS = 2.0   # added to every share's denominator: a lone weak vote is not a certainty


def raw_share(score: float, total: float, unknown: float = 0.0) -> float:
    return max(0.0, score) / (max(total, 0.0) + PRIOR_MASS + max(unknown, 0.0))


def top_share(scores: Sequence[float], unknown: float = 0.0) -> float:
    """The first cause's evidence against its strongest rival: s1 / (s1 + s2 + open weight + prior).

    A tie gives at most one half; a lone strong cause approaches 1; the weaker alternatives behind
    the runner-up do not dilute a clear winner (a generic status names many causes it rarely is).
    """
    if not scores:
        return 0.0
    s1 = max(0.0, scores[0])
    s2 = max(0.0, scores[1]) if len(scores) > 1 else 0.0
    return s1 / (s1 + s2 + PRIOR_MASS + max(unknown, 0.0))


@dataclass(frozen=True)
class Curve:
    """A monotone piecewise-linear map from evidence share to probability."""
    xs: tuple[float, ...] = ()       # knots (share), increasing
    ys: tuple[float, ...] = ()       # probability at each knot, non-decreasing

    def __call__(self, raw: float) -> float:
        if not self.xs:
            return raw
        if raw <= self.xs[0]:
            return self.ys[0]
        if raw >= self.xs[-1]:
            return self.ys[-1]
        j = bisect.bisect_right(self.xs, raw)
        x0, x1, y0, y1 = self.xs[j - 1], self.xs[j], self.ys[j - 1], self.ys[j]
        return y0 + (y1 - y0) * (raw - x0) / (x1 - x0) if x1 > x0 else y1

    def to_dict(self) -> dict[str, Any]:
        return {"xs": [round(x, 4) for x in self.xs], "ys": [round(y, 4) for y in self.ys]}


@dataclass(frozen=True)
class CalibrationMap:
    """One curve per kind of evidence the first cause rests on (`decisive`: a fact states it;
    `specific`: a message that names a cause; `generic`: only statuses that admit several causes),
    and a pooled curve for kinds with too few labelled messages."""
    pooled: Curve = field(default_factory=Curve)
    kinds: dict[str, Curve] = field(default_factory=dict, compare=False, hash=False)
    alt_coverage: float = 0.5        # P(right cause among the others | top wrong)
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def fitted(self) -> bool:
        return bool(self.pooled.xs)

    def __call__(self, raw: float, kind: str | None = None) -> float:
        return self.kinds.get(kind or "", self.pooled)(raw)

    def to_dict(self) -> dict[str, Any]:
        return {"pooled": self.pooled.to_dict(), "kinds": {k: c.to_dict() for k, c in self.kinds.items()},
                "alt_coverage": round(self.alt_coverage, 4), "meta": self.meta}


IDENTITY = CalibrationMap()


def fit_curve(raw: Sequence[float], correct: Sequence[bool], *, min_block: int = 10) -> Curve:
    """Pool-adjacent-violators on (raw, correct), then blocks merged until each holds >= min_block
    points; knots at each block's mean raw value (linear in between). Probabilities are shrunk toward
    one half by add-one-half smoothing so that no knot says 0 or 1 from a handful of points."""
    pts = sorted(zip(raw, (1.0 if c else 0.0 for c in correct), strict=True))
    if not pts:
        return Curve()
    blocks: list[list[float]] = []   # [sum_x, sum_y, n]
    for x, y in pts:
        blocks.append([x, y, 1.0])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            b = blocks.pop()
            for k in range(3):
                blocks[-1][k] += b[k]
    merged: list[list[float]] = []
    for b in blocks:
        if merged and merged[-1][2] < min_block:
            for k in range(3):
                merged[-1][k] += b[k]
        else:
            merged.append(list(b))
    if len(merged) > 1 and merged[-1][2] < min_block:
        last = merged.pop()
        for k in range(3):
            merged[-1][k] += last[k]
    xs = [b[0] / b[2] for b in merged]
    ys = [(b[1] + 0.5) / (b[2] + 1.0) for b in merged]
    for i in range(1, len(ys)):   # smoothing can break monotonicity by a hair
        ys[i] = max(ys[i], ys[i - 1])
    return Curve(tuple(xs), tuple(ys))


def fit_isotonic(raw: Sequence[float], correct: Sequence[bool], kinds: Sequence[str] | None = None, *,
                 min_block: int = 10, alt_hits: int = 0, alt_total: int = 0,
                 meta: dict[str, Any] | None = None) -> CalibrationMap:
    """The pooled curve, and one curve per kind that has at least 2 * min_block messages."""
    pooled = fit_curve(raw, correct, min_block=min_block)
    per_kind: dict[str, Curve] = {}
    for k in sorted(set(kinds or ())):
        idx = [i for i, kk in enumerate(kinds or ()) if kk == k]
        if len(idx) >= 2 * min_block:
            per_kind[k] = fit_curve([raw[i] for i in idx], [correct[i] for i in idx], min_block=min_block)
    cov = (alt_hits + 1) / (alt_total + 2) if alt_total else 0.5
    return CalibrationMap(pooled, per_kind, cov, dict(meta or {}))


def reliability(conf: Sequence[float], correct: Sequence[bool], bins: int = 10) -> list[dict[str, Any]]:
    """Equal-width bins over [0, 1]: count, mean confidence, accuracy per bin."""
    rows = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, c in enumerate(conf) if (lo <= c < hi) or (b == bins - 1 and c == 1.0)]
        if not idx:
            rows.append({"bin": f"{lo:.1f}-{hi:.1f}", "n": 0, "confidence": None, "accuracy": None})
            continue
        rows.append({"bin": f"{lo:.1f}-{hi:.1f}", "n": len(idx),
                     "confidence": sum(conf[i] for i in idx) / len(idx),
                     "accuracy": sum(1.0 for i in idx if correct[i]) / len(idx)})
    return rows


def ece(conf: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """Expected calibration error: the count-weighted mean |accuracy - confidence| over the bins."""
    n = len(conf)
    if not n:
        return 0.0
    return sum(r["n"] / n * abs(r["accuracy"] - r["confidence"]) for r in reliability(conf, correct, bins)
               if r["n"])


@functools.lru_cache(maxsize=1)
def shipped() -> CalibrationMap:
    """The map in data/calibration.json (identity while none is shipped)."""
    try:
        text = resources.files("convdoctor.explain").joinpath("data", "calibration.json").read_text(encoding="utf-8")
    except FileNotFoundError:
        return IDENTITY
    d = json.loads(text)

    def curve(c: dict[str, Any]) -> Curve:
        return Curve(tuple(c["xs"]), tuple(c["ys"]))

    return CalibrationMap(curve(d["pooled"]), {k: curve(c) for k, c in d.get("kinds", {}).items()},
                          float(d.get("alt_coverage", 0.5)), d.get("meta", {}))


def confidences(shares: Sequence[float], scores: Sequence[float], cmap: CalibrationMap,
                kind: str | None = None) -> list[float]:
    """Calibrated confidences for a ranked list (shares and scores in rank order; shares[0] is the
    top cause's `top_share`, `kind` the kind of evidence it rests on)."""
    if not shares:
        return []
    if not cmap.fitted:
        return list(shares)
    top = cmap(shares[0], kind)
    rest = [max(0.0, s) for s in scores[1:]]
    total = sum(rest)
    left = (1.0 - top) * cmap.alt_coverage
    return [top] + [left * s / total if total else 0.0 for s in rest]
