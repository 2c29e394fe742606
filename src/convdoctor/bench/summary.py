"""A bench result's rows and summary: one row per problem from the arms' and referees' records,
and the figures over the rows (one run, or several shards merged)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..problem import ConvProblem
from .referee import (
    OUTSIDE_KEY,
    REFEREE_ROW_FIELDS,
    picks_times,
    referee_fields,
    spread,
    worst_errors,
)
from .roofline import roofline_summary
from .suites import SuiteEntry


def bench_row(entry: SuiteEntry, problem: ConvProblem, torch_runs: list[dict[str, Any]],
              tune_runs: list[dict[str, Any]], referee_runs: list[dict[str, Any]],
              heur_key: str, cpu: bool) -> dict[str, Any]:
    """One problem's row: the referees' times and ratios, and what each arm recorded."""
    k = problem.key()
    heur = [r[k]["heuristic_s"] for r in torch_runs if r[k]["heuristic_s"]]
    bench = [r[k]["benchmark_s"] for r in torch_runs if r[k]["benchmark_s"]]
    winners = [r[k]["winner"] for r in tune_runs]
    picks = [r[k]["benchmark_pick"] for r in torch_runs]
    rf = referee_fields([ref.get(k, {}) for ref in referee_runs], heur_key, winners, picks)
    # Do fresh benchmark=True processes choose alike? CPU: the picks timed side by side by
    # the referee; GPU (the pick is inside cuDNN): each process's own timing of its pick.
    bench_spread = spread(picks_times(rf["referee_s"], picks) if cpu else bench)
    # PyTorch's default path in every process that timed it (PyTorch arms, tuning runs, the
    # referee): on the GPU its cuDNN engine is picked per process; on an H100 it ran a 19-20%
    # slower kernel in one process than in the others
    heur_spread = spread(heur + [r[k]["measured"][heur_key] for r in tune_runs
                                 if r[k].get("measured", {}).get(heur_key)]
                         + [x[heur_key] for x in rf["referee_runs_s"] if x.get(heur_key)])
    return {
        "group": entry.group, "name": entry.name, "problem": problem.short(), "problem_key": k,
        **{f: rf[f] for f in ("heuristic_s", "benchmark_s", "tuned_s", "referee_s")},
        "benchmark_picks": picks, "winners": winners,
        "arm_heuristic_s": heur, "arm_benchmark_s": bench,
        "arm_tuned_s": [r[k]["tuned_s"] for r in tune_runs],
        **{f: rf[f] for f in REFEREE_ROW_FIELDS[4:]},
        "benchmark_spread": bench_spread,
        "heuristic_process_spread": heur_spread,
        "tuning_s": [r[k]["tuning_s"] for r in tune_runs],
        # PyTorch's paths timed above although they miss our tolerance: {key: worst error}
        "pytorch_outside_tolerance": worst_errors(
            [r[k].get("outside_tolerance") or {} for r in torch_runs]
            + [(ref.get(OUTSIDE_KEY) or {}).get(k) or {} for ref in referee_runs]),
        "benchmark_cost_s": [r[k]["benchmark_cost_s"] for r in torch_runs],
        "degraded": any(r[k]["degraded"] for r in tune_runs),
        # tuning runs that had only the backend's short list (their full listing failed)
        "short_list_runs": sum(1 for r in tune_runs if r[k].get("short_list")),
        # tuning runs whose listing left out a unit (a cuDNN engine) that hung in a listing
        "left_out_runs": sum(1 for r in tune_runs
                             if (r[k].get("listing") or {}).get("left_out_notes")),
        "tune_notes": [r[k].get("notes", []) + r[k].get("failures", []) for r in tune_runs],
        # each run's listing record (CUDA: the refinement's seeds and what it kept), so a
        # row whose runs disagree shows whether they walked from different seeds
        "tune_listing": [r[k].get("listing", {}) for r in tune_runs],
        "tune_costliest": [r[k].get("costliest", []) for r in tune_runs],
        "tune_candidates": [r[k].get("candidates", []) for r in tune_runs],
    }


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's figures over bench rows (one run, or several shards merged)."""
    vs_best = [r["speedup_vs_best"] for r in rows if r["speedup_vs_best"]]
    vs_bench = [r["speedup_vs_benchmark"] for r in rows if r["speedup_vs_benchmark"]]
    stabs = [r["stability"] for r in rows if r["stability"] is not None]
    spreads = [r["benchmark_spread"] for r in rows if r["benchmark_spread"] is not None]
    hspreads = [r["heuristic_process_spread"] for r in rows
                if r.get("heuristic_process_spread") is not None]
    tuning = [x for r in rows for x in r["tuning_s"] if x]
    bcost = [x for r in rows for x in r["benchmark_cost_s"] if x]
    return {
        "problems": len(rows),
        "measured": len(vs_best),
        # rows with a benchmark=True time: the base of the two "vs_benchmark" figures
        "measured_vs_benchmark": len(vs_bench),
        "geomean_speedup_vs_benchmark": geomean(vs_bench),
        "geomean_speedup_vs_heuristic": geomean([r["speedup_vs_heuristic"] for r in rows
                                                  if r["speedup_vs_heuristic"]]),
        "geomean_speedup_vs_best_pytorch": geomean(vs_best),
        "share_at_1_10x_vs_benchmark": (sum(1 for x in vs_bench if x >= 1.10) / len(vs_bench)
                                        if vs_bench else None),
        # the same against the faster PyTorch path: benchmark=True's own slow picks cannot move it
        "share_at_1_10x_vs_best_pytorch": (sum(1 for x in vs_best if x >= 1.10) / len(vs_best)
                                           if vs_best else None),
        "worst_vs_best_pytorch": min(vs_best) if vs_best else None,
        "slower_than_best_pytorch_by_2pct": sum(1 for x in vs_best if x < 1 / 1.02),
        "stable_within_3pct": (sum(1 for s in stabs if s <= 0.03) / len(stabs)) if stabs else None,
        "benchmark_runs_disagree_over_5pct": (sum(1 for s in spreads if s > 0.05) / len(spreads)
                                              if spreads else None),
        "heuristic_path_differs_over_5pct": (sum(1 for s in hspreads if s > 0.05) / len(hspreads)
                                             if hspreads else None),
        "tuning_s_per_problem": statistics.median(tuning) if tuning else None,
        "tuning_s_per_problem_mean": statistics.fmean(tuning) if tuning else None,
        "pytorch_benchmark_cost_s_per_problem": statistics.median(bcost) if bcost else None,
        "degraded_problems": sum(1 for r in rows if r["degraded"]),
        "short_list_problems": sum(1 for r in rows if r.get("short_list_runs")),
        "left_out_problems": sum(1 for r in rows if r.get("left_out_runs")),
        "pytorch_outside_tolerance_problems": sum(1 for r in rows
                                                  if r.get("pytorch_outside_tolerance")),
        # each row's best time against the roofline (rows carry it when the device's peaks
        # were measured: `roofline.add_roofline`)
        **roofline_summary(rows),
    }
