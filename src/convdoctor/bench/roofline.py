"""Each bench row's best time against the device's roofline, and the layer classes far from it.

A row's best time is the fastest of PyTorch's heuristic path, `benchmark=True`'s pick and
convdoctor's choice (the referee's times). Its share of the roofline is the achieved FLOP/s over
the attainable FLOP/s at the problem's arithmetic intensity (`measure.roofline.percent_of_roofline`:
compute- or memory-bound, whichever limits), with the device's measured peaks. A layer class
(direction, kind of convolution, kernel, stride) whose every row stays below `FAR` of the roofline
is where no engine, cuDNN's or convdoctor's, comes near the hardware: the next kernels to write.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..measure.roofline import math_key, percent_of_roofline
from ..problem import ConvProblem

FAR = 30.0          # percent of the roofline
TIME_FIELDS = ("heuristic_s", "benchmark_s", "tuned_s")


def layer_class(p: ConvProblem) -> str:
    """e.g. "wgrad depthwise 7x7", "fprop 1x1 s2", "dgrad grouped 3x3", "fprop 3D 3x3x3"."""
    kind = "depthwise" if p.depthwise else "grouped" if p.groups > 1 else ""
    kernel = "x".join(str(v) for v in p.kernel)
    stride = "" if all(s == 1 for s in p.stride) else "s" + "x".join(
        str(v) for v in sorted(set(p.stride)))
    dims = {1: "1D", 3: "3D"}.get(p.ndim, "")
    return " ".join(x for x in (p.direction, dims, kind, kernel, stride) if x)


def row_roofline(row: dict[str, Any], peaks: dict[str, Any] | None) -> dict[str, Any] | None:
    """{"best_s", "percent", "bound", "class"} of one bench row, or None without peaks or a time."""
    if not peaks:
        return None
    times = [float(row[f]) for f in TIME_FIELDS if row.get(f)]
    if not times:
        return None
    p = ConvProblem.parse(row["problem_key"])
    pf = float((peaks.get("flops") or {}).get(math_key(p.dtype, p.math), 0.0))
    bw = float(peaks.get("bandwidth") or 0.0)
    best = min(times)
    r = percent_of_roofline(float(p.flops()), float(p.min_bytes()), best, pf, bw)
    if r["percent"] is None:
        return None
    return {"best_s": best, "percent": r["percent"], "bound": r["bound"],
            "class": layer_class(p)}


def add_roofline(rows: list[dict[str, Any]], peaks: dict[str, Any] | None) -> None:
    """Set each row's "roofline" (None where it cannot be had)."""
    for r in rows:
        r["roofline"] = row_roofline(r, peaks)


def far_classes(rows: list[dict[str, Any]], limit: float = FAR) -> list[dict[str, Any]]:
    """The layer classes whose every row with a roofline figure is below `limit` percent, the
    most rows first: {"class", "rows", "max_percent", "median_percent", "bound"}."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        rf = r.get("roofline")
        if rf and rf.get("percent") is not None:
            by.setdefault(rf["class"], []).append(rf)
    out = []
    for cls, rfs in by.items():
        pcts = [rf["percent"] for rf in rfs]
        if max(pcts) < limit:
            bounds = sorted({rf["bound"] for rf in rfs})
            out.append({"class": cls, "rows": len(rfs), "max_percent": max(pcts),
                        "median_percent": statistics.median(pcts), "bound": "/".join(bounds)})
    return sorted(out, key=lambda d: (-d["rows"], d["class"]))


def roofline_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's roofline figures (empty when no row has one)."""
    pcts = [r["roofline"]["percent"] for r in rows if r.get("roofline")]
    if not pcts:
        return {}
    return {"roofline_median_percent": statistics.median(pcts),
            "roofline_rows_below_30pct": sum(1 for x in pcts if x < FAR),
            "roofline_far_classes": far_classes(rows)}
