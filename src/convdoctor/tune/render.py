"""Tables for tuning results: one row per problem, and a candidate table per problem (--detail)."""

from __future__ import annotations

import math
from typing import Any

from ..textsafe import one_line
from .result import BASELINE_LABELS, TuneResult


def fmt_time(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    if s >= 1.0:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def roofline(result: TuneResult, peaks: dict[str, Any] | None) -> dict[str, Any] | None:
    t = result.winner_time_s
    if not peaks or not t:
        return None
    from ..measure.roofline import math_key, percent_of_roofline

    pf = float(peaks.get("flops", {}).get(math_key(result.problem.dtype, result.problem.math), 0.0))
    bw = float(peaks.get("bandwidth", 0.0))
    if pf <= 0 or bw <= 0:
        return None
    return percent_of_roofline(float(result.problem.flops()), float(result.problem.min_bytes()), t,
                               pf, bw)


def best_baseline(result: TuneResult) -> tuple[str, float] | None:
    """The faster PyTorch path measured for this problem (heuristic, benchmark, CPU default)."""
    b = result.baselines
    if not b:
        return None
    key = min(b, key=lambda k: b[k])
    return key, b[key]


def summary_row(result: TuneResult, peaks: dict[str, Any] | None) -> dict[str, Any]:
    b = result.baselines
    best = best_baseline(result)
    w = result.winner_time_s
    rf = roofline(result, peaks)
    return {
        "problem": result.problem.short(), "problem_key": result.problem.key(),
        "torch_heuristic_s": b.get("torch:heuristic"), "torch_benchmark_s": b.get("torch:benchmark"),
        "torch_default_s": b.get("cpu:mkldnn-on"), "tuned_s": w,
        "speedup": (best[1] / w) if best and w else None,
        "speedup_over": best[0] if best else None,
        "engine": result.winner.key if result.winner else None,
        "roofline_percent": None if rf is None else rf.get("percent"),
        "roofline_bound": None if rf is None else rf.get("bound"),
        "failed": sum(1 for s in result.candidates if s.status == "failed"),
        "disqualified": sum(1 for s in result.candidates if s.status == "disqualified"),
        "candidates": len(result.candidates), "tuning_s": result.tuning_s,
        "from_db": any("tuning database" in n for n in result.notes),
        "degraded": result.degraded,
    }


def table(rows: list[list[str]], header: list[str]) -> str:
    rows = [[one_line(c) for c in r] for r in rows]   # cells may hold imported or model text
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
           "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(out)


def summary_table(results: list[TuneResult], peaks: dict[str, Any] | None) -> str:
    rows = [summary_row(r, peaks) for r in results]
    cpu = all(r.backend == "cpu" for r in results)
    if cpu:
        header = ["problem", "PyTorch default", "tuned", "speedup", "chosen", "roofline"]
    else:
        header = ["problem", "PyTorch heuristic", "PyTorch benchmark", "tuned", "speedup",
                  "chosen engine", "roofline"]
    lines = []
    for row in rows:
        pct = row["roofline_percent"]
        rf = "-" if pct is None else (f"{pct:.0f}% ({row['roofline_bound']})" if pct <= 105 else
                                      "above the measured peak (peak too low?)")
        sp = "-" if row["speedup"] is None else f"{row['speedup']:.2f}x"
        eng = (row["engine"] or ("none (slowed down)" if row["degraded"] else "none ran correctly")
               ) + (" (db)" if row["from_db"] else "")
        if cpu:
            lines.append([row["problem"], fmt_time(row["torch_default_s"]), fmt_time(row["tuned_s"]),
                          sp, eng, rf])
        else:
            lines.append([row["problem"], fmt_time(row["torch_heuristic_s"]),
                          fmt_time(row["torch_benchmark_s"]), fmt_time(row["tuned_s"]), sp, eng, rf])
    return table(lines, header)


def candidate_table(result: TuneResult) -> str:
    rows = []
    order = {"ok": 0, "screened-out": 1, "disqualified": 2, "failed": 3, "unsupported": 4,
             "not-measured": 5}
    for s in sorted(result.candidates, key=lambda s: (order.get(s.status, 9),
                                                      s.median_s or math.inf)):
        ci = s.ci_s
        ci_txt = "-" if ci is None else f"{fmt_time(ci[0])}..{fmt_time(ci[1])}"
        mark = "*" if result.winner is not None and s.candidate.key == result.winner.key else " "
        label = BASELINE_LABELS.get(s.candidate.key, "")
        rows.append([mark + s.candidate.key + (f" [{label}]" if label else ""), s.status,
                     fmt_time(s.median_s), ci_txt, str(s.n), str(s.warmup_runs),
                     str(s.discarded), _trim(s.reason, 60)])
    return table(rows, ["candidate", "status", "median", "95% CI", "n", "warm-up", "discarded",
                        "reason"])


def _trim(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
