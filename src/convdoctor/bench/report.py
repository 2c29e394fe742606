"""A bench result's output: the --out file, and the human report (table, summary, notes)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..errors import UsageError
from ..tune.render import fmt_time, table
from ..tune.result import BASELINE_KEYS
from .merge import provenance_lines


def emit(args: argparse.Namespace, payload: dict[str, Any]) -> int:
    """Write --out (when given), then print the JSON (--json) or the human report."""
    from ..cli import emit as print_out

    if getattr(args, "out", None):
        write_out(args.out, payload)
    print_out(args, payload, "" if getattr(args, "json", False) else human(payload))
    if getattr(args, "report", None):
        from ..htmlreport import report_for_bench

        report_for_bench(args.report, payload)
    return 0


def write_out(path: str, payload: dict[str, Any]) -> None:
    from ..report import dumps

    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(dumps(payload))
    except OSError as exc:
        raise UsageError(f"cannot write --out {path}: {exc}") from None


def labels(cpu: bool) -> tuple[str, str]:
    """The names of PyTorch's two paths: its default path, and benchmark=True's choice."""
    return ("PyTorch default", "one-sample pick") if cpu else ("heuristic", "benchmark=True")


def _f(x: Any, pat: str = "{:.3f}") -> str:
    return "-" if x is None else pat.format(x)


def fmt_ratio(x: float | None, digits: int = 2) -> str:
    """A speed ratio as "0.78x", with `digits` decimals and more where fewer would round a ratio
    other than 1 onto 1: 0.9964 reads 0.996x and 1.0004 reads 1.0004x, so a loss never reads as
    a tie (1.00x is a tie: the same path, or times equal to 6 decimals)."""
    if x is None or not math.isfinite(x):
        return "-"
    for d in range(digits, 7):
        text = f"{x:.{d}f}"
        if x == 1.0 or float(text) != 1.0:
            return text + "x"
    # within 5e-7 of 1: the last decimal rounded away from 1, to the side the ratio lies on
    return f"{(math.floor if x < 1.0 else math.ceil)(x * 1e6) / 1e6:.6f}x"


# a row more than 2% slower than the faster PyTorch path counts as slower (`summarize`)
SLOWER = 1.0 / 1.02


def human(payload: dict[str, Any]) -> str:
    """The human report of a bench result."""
    rows, s = payload["rows"], payload["summary"]
    hl, bl = labels(payload["backend"] == "cpu")
    lines = [_headline(payload), "", _table(rows, hl, bl), "", *_summary_lines(s, hl, bl)]
    lines += _run_notes(rows, s, bl)
    lines += split_lines(rows, payload["backend"] == "cpu")
    lines += slower_lines(rows)
    lines += disagreement_lines(rows)
    lines += provenance_lines(payload)
    lines += _referee_only_line(payload, bl)
    lines += _measurement_notes(rows, s)
    return "\n".join(lines)


def _headline(payload: dict[str, Any]) -> str:
    batch = payload.get("batch_override")
    where = f" (shard {payload['shard']})" if payload.get("shard") else (
        f" (merged from {len(payload['merged_from'])} runs)" if payload.get("merged_from") else "")
    return (f"suite {payload['suite']}{where}: {len(payload['rows'])} problems, "
            f"{payload['direction']} {payload['config']}, backend {payload['backend']}"
            + (f", batch {batch}" if batch else "") +
            f"; {payload['pytorch_runs']} PyTorch and {payload['tune_runs']} convdoctor fresh "
            "processes" + (f", {payload['referees']} referee processes (the median of their "
                           "ratios)" if payload.get("referees", 1) > 1 else ""))


def _table(rows: list[dict[str, Any]], hl: str, bl: str) -> str:
    trows = []
    split = {id(r) for r in rows if split_row(r) is not None}
    for r in rows:
        st = r["stability"]
        trows.append([r["problem"], fmt_time(r["heuristic_s"]), fmt_time(r["benchmark_s"]),
                      fmt_time(r["tuned_s"]),
                      fmt_ratio(r["speedup_vs_best"]) + ("*" if id(r) in split else ""),
                      "-" if st is None else f"{st * 100:.1f}%", (r["winners"][0] or "-")])
    return table(trows, ["problem", hl, bl, "convdoctor", "vs best PyTorch", "run-to-run",
                         "chosen"])


def _summary_lines(s: dict[str, Any], hl: str, bl: str) -> list[str]:
    f = _f
    return [
        # 4 decimals: a pass at 1.0799 reads 1.080x at 3, as if it met a 1.08 target
        f"geomean speedup: {fmt_ratio(s['geomean_speedup_vs_benchmark'], 4)} vs {bl}, "
        f"{fmt_ratio(s['geomean_speedup_vs_heuristic'], 3)} vs {hl}, "
        f"{fmt_ratio(s['geomean_speedup_vs_best_pytorch'], 3)} vs the faster of the two",
        f"problems >= 1.10x vs {bl}: {f(s['share_at_1_10x_vs_benchmark'], '{:.0%}')} "
        f"(vs the faster of the two: "
        f"{f(s.get('share_at_1_10x_vs_best_pytorch'), '{:.0%}')}); "
        f"slower than the best PyTorch path by > 2%: "
        f"{s['slower_than_best_pytorch_by_2pct']} (worst "
        f"{fmt_ratio(s['worst_vs_best_pytorch'], 3)})",
        f"stability: convdoctor runs within 3% on {f(s['stable_within_3pct'], '{:.0%}')}; "
        f"{bl} runs differ by > 5% on {f(s['benchmark_runs_disagree_over_5pct'], '{:.0%}')}; "
        f"{hl} timed > 5% apart between processes on "
        f"{f(s.get('heuristic_path_differs_over_5pct'), '{:.0%}')}",
        f"cost: convdoctor tuning {f(s['tuning_s_per_problem'], '{:.2f}')} s per problem "
        f"(median; mean {f(s.get('tuning_s_per_problem_mean'), '{:.2f}')} s); "
        f"{bl} {f(s['pytorch_benchmark_cost_s_per_problem'], '{:.4f}')} s; "
        f"wall {s['wall_s']:.1f} s", *_roofline_lines(s)]


def _roofline_lines(s: dict[str, Any]) -> list[str]:
    """The best time of each row against the roofline, and the classes no engine brings near it."""
    if s.get("roofline_median_percent") is None:
        return []
    far = s.get("roofline_far_classes") or []
    lines = [f"roofline: the best path reaches a median {s['roofline_median_percent']:.0f}% of it; "
             f"{s['roofline_rows_below_30pct']} rows stay below 30%"]
    if far:
        lines.append("classes where every row stays below 30% (the next kernels to write): "
                     + "; ".join(f"{c['class']} ({c['rows']} rows, at most "
                                 f"{c['max_percent']:.0f}%, {c['bound']}-bound)" for c in far[:12]))
    return lines


def _run_notes(rows: list[dict[str, Any]], s: dict[str, Any], bl: str) -> list[str]:
    lines = []
    if s["measured"] < s["problems"]:
        lines.append(f"note: {s['problems'] - s['measured']} of {s['problems']} problems have no "
                     "side-by-side figure (a path failed or was not measured; see --json rows)")
    nb = s.get("measured_vs_benchmark")
    if nb is not None and nb < s["measured"]:
        lines.append(f"note: the figures vs {bl} cover {nb} of {s['measured']} rows (the others "
                     f"have no {bl} time)")
    for r in rows:
        notes = r.get("tune_notes") or []
        aligned = len(notes) == len(r["winners"])
        for i, w in enumerate(r["winners"]):
            # a row whose notes do not line up with its winners (an edited file) has no reason
            why = notes[i] if aligned and isinstance(notes[i], list) else []
            if w is None:
                lines.append(f"no winner in tuning run {i + 1} for {r['problem']}: "
                             + ("; ".join(why[:3]) or "no reason recorded"))
    return lines


def _referee_only_line(payload: dict[str, Any], bl: str) -> list[str]:
    ro = payload.get("referee_only")
    if not isinstance(ro, dict):
        return []
    f = _f
    fs = ro.get("first_summary") or {}
    code = ro.get("code") or {}
    return [
        f"referee only: the choices of {ro.get('from')} re-timed by {ro.get('referees')} fresh "
        f"referee processes (code {code.get('commit') or '?'}, source "
        f"{code.get('source') or '?'}; {ro.get('wall_s', 0.0):.1f} s); its own referee had read "
        f"{fmt_ratio(fs.get('geomean_speedup_vs_benchmark'), 4)} vs {bl}, "
        f"{f(fs.get('share_at_1_10x_vs_benchmark'), '{:.0%}')} >= 1.10x, "
        f"{fs.get('slower_than_best_pytorch_by_2pct', '-')} rows > 2% slower"]


def _measurement_notes(rows: list[dict[str, Any]], s: dict[str, Any]) -> list[str]:
    lines = []
    if s["degraded_problems"]:
        lines.append(f"note: {s['degraded_problems']} problems were measured while the device "
                     "was slowed down (nothing chosen there)")
    if s.get("short_list_problems"):
        lines.append(f"note: {s['short_list_problems']} problems were tuned from the backend's "
                     "short list in at least one run (their full candidate listing failed; see "
                     "the rows' tune_notes)")
    for r in rows:
        for key, err in sorted((r.get("pytorch_outside_tolerance") or {}).items()):
            lines.append(f"note: PyTorch's {key} misses our tolerance on {r['problem']} (error "
                         f"{err:.3g}): timed for the comparison; the tuner takes no path that "
                         "fails its check")
    if s.get("left_out_problems"):
        lines.append(f"note: {s['left_out_problems']} problems were listed without an engine "
                     "whose step hung in a listing (see the rows' tune_notes)")
    return lines


def disagreement_lines(rows: list[dict[str, Any]], limit: float = 0.03) -> list[str]:
    """One line per row whose first and last tuning runs chose more than `limit` apart: the two
    choices, and whether the runs' knob walks started from the same seeds (`tune_listing`), which
    tells a search that covered different plans from a measurement that ranked the same plans
    differently."""
    out: list[str] = []
    for r in rows:
        st = r.get("stability")
        winners = r.get("winners") or []
        if st is None or st <= limit or len(winners) < 2:
            continue
        line = (f"runs disagree on {r['problem']}: {winners[0]} vs {winners[-1]} "
                f"({st:.1%} apart in the referee)")
        listing = r.get("tune_listing") or [{}]
        a, b = _seeds(listing[0]), _seeds(listing[-1])
        if a and b:
            line += ("; the knob walks started from the same seeds" if a == b else
                     f"; the knob walks started from different seeds ({len(a & b)} of "
                     f"{len(a | b)} shared)")
        out.append(line)
    return out


def split_row(r: dict[str, Any]) -> dict[str, Any] | None:
    """Where a row's ratio vs the faster PyTorch path reads no loss (`speedup_vs_best`, the median
    of the referee processes' own ratios) while a referee process, or the row's median times
    (per path, over the processes), read a loss of more than 2% that also lies more than 2% below
    the row's ratio: {"per": each process's own ratio, "times": the median times' ratio}; None
    when they agree."""
    vb = r.get("speedup_vs_best")
    if vb is None or vb < SLOWER:
        return None
    per = [min(x) for x in ([v for v in (q.get("vs_heuristic"), q.get("vs_benchmark")) if v]
                            for q in r.get("referee_ratios") or []) if x]
    pytorch = [x for x in (r.get("heuristic_s"), r.get("benchmark_s")) if x]
    t = r.get("tuned_s")
    times = min(pytorch) / t if pytorch and t else None
    below = min(SLOWER, vb / 1.02)
    if any(x < below for x in per) or (times is not None and times < below):
        return {"per": per, "times": times}
    return None


def split_lines(rows: list[dict[str, Any]], cpu: bool) -> list[str]:
    """One line per row marked * in the table (`split_row`): the loss a referee process or the
    median times read stays on the page beside the median the row shows."""
    hl, bl = labels(cpu)
    out: list[str] = []
    for r in rows:
        sp = split_row(r)
        if sp is None:
            continue
        faster = min(((r.get("heuristic_s"), hl), (r.get("benchmark_s"), bl)),
                     key=lambda tl: math.inf if not tl[0] else tl[0])
        line = (f"* {r['problem']}: {fmt_ratio(r['speedup_vs_best'])} vs the faster PyTorch path "
                f"is the median of {len(sp['per'])} referee processes' own ratios ("
                + ", ".join(fmt_ratio(x) for x in sp["per"]) + ")")
        if sp["times"] is not None and sp["times"] < SLOWER:
            line += (f"; the row's median times read {fmt_ratio(sp['times'])} ({faster[1]} "
                     f"{fmt_time(faster[0])}, convdoctor {fmt_time(r.get('tuned_s'))})")
        out.append(line)
    return out


def slower_lines(rows: list[dict[str, Any]], limit: float = 0.02) -> list[str]:
    """One line per row slower than the faster PyTorch path by more than `limit`: per tuning run,
    the winner's and PyTorch's faster path's medians inside that run (`tune_candidates`). Whether
    the run itself measured the winner faster (the referee's process disagrees: placement, process)
    or measured PyTorch's path faster and still chose the winner (a tie, or the placement ranking)
    tells two causes apart."""
    out: list[str] = []
    for r in rows:
        vb = r.get("speedup_vs_best")
        if vb is None or vb >= 1.0 / (1.0 + limit):
            continue
        runs: list[str] = []
        winners = r.get("winners") or []
        digests = r.get("tune_candidates") or []
        for i, w in enumerate(winners):
            med = {k: us for k, st, us, *_ in (digests[i] if i < len(digests) else [])
                   if st == "ok" and us}
            torch_us = [(us, k) for k, us in med.items() if k in BASELINE_KEYS]
            if w not in med or not torch_us:
                runs.append(f"run {i + 1} {w}")
                continue
            t_us, t_key = min(torch_us)
            gap = med[w] / t_us - 1.0
            seen = ("measured the winner faster" if gap <= 0 else
                    f"measured {t_key} {gap:.1%} faster")
            runs.append(f"run {i + 1} {w} {med[w]:.2f} us vs {t_key} {t_us:.2f} us ({seen})")
        line = f"slower than PyTorch on {r['problem']}: {fmt_ratio(vb, 3)}; " + "; ".join(runs)
        # H100, fp32 wgrad Mixed_5b.branch3x3dbl_3 (0.920x): both runs chose the
        # heuristic path at 113 us in their child processes; it ran 121 us in every other one
        hs = r.get("heuristic_process_spread")
        if "torch:heuristic" in winners and hs is not None and hs > 0.05:
            line += (f"; PyTorch's heuristic path was timed {hs:.1%} apart across processes (its "
                     "cuDNN engine is picked per process)")
        out.append(line)
    return out


def _seeds(listing: dict[str, Any]) -> set[str]:
    """The knob walk's seed keys in one run's listing record (empty when it has none)."""
    return {k for k, *_ in (listing.get("refinement") or {}).get("seeds") or []}
