"""The end-to-end speedup `optimize` reports, and the last check on its changes.

The model as `optimize` leaves it is timed against a copy of the model as given (a deep copy made
before any change) in one session: `measure.steps.time_interleaved`, `SPEEDUP_ROUNDS` rounds, each
running a few steps of one and then of the other, so that drift and load hit both alike. The
speedup is the median of the per-round ratios (as given / optimized) and its uncertainty the
distribution-free interval of that median (`verdicts.median_interval`: at least 95% coverage from
nine rounds). The changes are kept only when the lower end of that interval lies above 1; otherwise
every change is undone (unless one was asked for: `channels_last=True`, `graphs=True`), so the
figure reported is always the one measured for the model the caller gets.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..measure.steps import make_step, median, time_interleaved
from .options import OptimizeOptions
from .quiet import own_steps
from .report import OptimizeReport
from .state import state_kept
from .verdicts import median_interval, round_ratios

# Nine rounds: the smallest number whose median interval leaves out the extreme round on each
# side at 95% coverage (the 2nd smallest to the 2nd largest ratio: 96.1%).
SPEEDUP_ROUNDS = 9


def steps_per_round(steps: int) -> int:
    """Steps of each variant per round: about 2 x `steps` samples of each in all."""
    return max(1, steps // 5)


def copy_as_given(model: torch.nn.Module, report: OptimizeReport) -> torch.nn.Module | None:
    """A deep copy of the model before any change (None, with a note, when it cannot be
    copied: then no end-to-end speedup is measured)."""
    try:
        return copy.deepcopy(model)
    except Exception as exc:  # noqa: BLE001 - the speedup is then not measured
        report.speedup_source = f"not measured: the model cannot be copied ({exc})"
        return None


def measure_speedup(given: torch.nn.Module, model: torch.nn.Module, inputs: Any,
                    opts: OptimizeOptions, report: OptimizeReport, dev: str) -> bool:
    """Time `model` against `given` (see the module's docstring) into the report's `speedup*`
    fields; True when measured (False, with the reason in `speedup_source`, when a step failed).
    The model's buffers and gradients are as they were afterwards."""
    n = steps_per_round(opts.steps)
    variants = {"as_given": make_step(given, inputs, opts.train),
                "optimized": make_step(model, inputs, opts.train)}
    try:
        with own_steps(), state_kept(model):
            samples = time_interleaved(variants, dev, warmup=2, steps=n * SPEEDUP_ROUNDS,
                                       rounds=SPEEDUP_ROUNDS)
    except Exception as exc:  # noqa: BLE001 - the decisions stand; the figure is missing
        report.speedup_source = f"not measured: a step failed ({type(exc).__name__}: {exc})"
        return False
    ratios = round_ratios(samples["optimized"], samples["as_given"], n)
    lo, hi, level = median_interval(ratios)
    report.speedup_samples = ratios
    report.speedup = median(ratios)
    report.speedup_ci = [lo, hi]
    report.speedup_level = level
    report.speedup_ms = {k: median(v) for k, v in samples.items()}
    report.speedup_step_ms = {"pytorch": list(samples["as_given"]),
                              "convdoctor": list(samples["optimized"])}
    report.speedup_source = (f"measured: the model as given and as optimized, "
                             f"{len(ratios)} interleaved rounds of {n} "
                             f"step{'s' if n > 1 else ''} each")
    return True


def confirmed(report: OptimizeReport) -> bool:
    """Was the optimized model measured faster than the model as given beyond noise (the lower
    end of the speedup's interval above 1)?"""
    return bool(report.speedup_ci) and report.speedup_ci[0] > 1.0


def forced(opts: OptimizeOptions, report: OptimizeReport) -> bool:
    """Is a change in place that was asked for (kept whatever it measures)?"""
    return (opts.channels_last is True and report.channels_last) or \
        (opts.graphs is True and report.graphs)


def record_undone(report: OptimizeReport) -> None:
    """The changes were not measured faster end to end and are undone: the report says so, with
    what was measured, and carries no speedup for a model the caller does not get."""
    ms, (lo, hi) = report.speedup_ms, report.speedup_ci
    what = [w for w, on in (("channels_last", report.channels_last),
                            ("routing", report.routing), ("CUDA graphs", report.graphs)) if on]
    report.notes.append(
        f"the optimized model ({', '.join(what)}) was not measured faster than the model as "
        f"given end to end (as given {ms['as_given']:.3f} ms, optimized "
        f"{ms['optimized']:.3f} ms per step; per-round ratio {report.speedup:.3f}, interval "
        f"{lo:.3f}-{hi:.3f}): every change undone")
    undone = "; undone: the whole was not measured faster end to end"
    if report.channels_last:
        report.channels_last, report.channels_last_reason = False, \
            report.channels_last_reason + undone
    if report.routing:
        report.routing, report.routing_reason = False, report.routing_reason + undone
    if report.graphs:
        report.graphs, report.graphs_reason = False, report.graphs_reason + undone
    report.speedup, report.speedup_ci, report.speedup_level = None, [], 0.0
    report.speedup_samples, report.speedup_ms, report.speedup_step_ms = [], {}, {}
    report.speedup_source = "the changes together were not measured faster end to end"
