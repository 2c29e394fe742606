"""`convdoctor bench SUITE`: PyTorch's arms, convdoctor's tuning arms, then the referees.

Every arm runs in fresh worker processes and every time is measured by the same harness (warm-up,
round-robin, median with CI), so the ratios compare choices, not timing methods:
- PyTorch: `--pytorch-runs` fresh processes (`arms.pytorch_arm`);
- convdoctor: `--tune-runs` fresh processes, each tuning every problem from scratch
  (`arms.tune_arm`), for speed, stability (do two runs choose within 3%?) and tuning cost;
- referee: `--referees` fresh processes time every path chosen above side by side
  (`referee.referee_arm`); the row's ratios come from them.
With `--out FILE` the run's state is saved after every problem (`resume`).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..problem import ConvProblem
from ..settings import Settings
from ..tune.provenance import code_identity
from . import arms, referee
from .report import emit
from .resume import (
    ArmResume,
    load_partial,
    partial_path,
    remove_partial,
    resumed_wall,
    run_arms,
    save_partial,
)
from .roofline import add_roofline
from .suites import CONFIGS, Suite, SuiteEntry, load_suite, matching, parse_shard, shard_of
from .summary import bench_row, summarize


@dataclass
class Plan:
    """What one bench run measures, on which backend, with which defaults applied."""

    suite: Suite
    entries: list[SuiteEntry]
    problems: list[ConvProblem]
    env: dict[str, str]
    batch: int | None
    spec: arms.ArmSpec   # the backend the first worker named, the budget, the settings

    @property
    def backend(self) -> str:
        return self.spec.backend

    @property
    def budget(self) -> float:
        return self.spec.budget_s

    @property
    def cpu(self) -> bool:
        return self.backend == "cpu"


@dataclass
class Runs:
    """The finished arms (and the one in progress, `current`), restored by --resume."""

    torch: list[dict[str, Any]] = field(default_factory=list)
    tune: list[dict[str, Any]] = field(default_factory=list)
    referee: list[dict[str, Any]] = field(default_factory=list)
    arm_s: dict[str, list[float]] = field(
        default_factory=lambda: {"pytorch": [], "tune": [], "referee": []})
    current: dict[str, Any] | None = None
    # wall seconds of the stopped runs this one continues: the result's wall_s counts them (a
    # merged pass of resumed shards would read 1,252 s of wall where its arms took 1,794 s)
    wall_before: float = 0.0


def bench(args: argparse.Namespace, settings: Settings) -> int:
    """A suite run (see the module docstring); `settings`: what the worker processes run under."""
    suite = load_suite(args.suite)
    shard = parse_shard(args.shard)
    if args.pytorch_runs < 1 or args.tune_runs < 1 or args.referees < 1:
        raise UsageError("--pytorch-runs, --tune-runs and --referees must be >= 1")
    partial = partial_path(args.out, args.resume)
    # The first worker tells us the backend; it then serves (still fresh) as the first PyTorch arm.
    first = arms.start_worker(args.backend, args.timeout, arms.measure_only(settings))
    try:
        plan = _plan(args, suite, shard, first.name, first.environment(), settings)
        # the code that measures, taken before anything runs; its source hash is part of the
        # run's signature, so a stopped run is never resumed by other code
        code = code_identity()
        sig = {"suite": suite.name, "config": args.config, "direction": args.direction,
               "backend": plan.backend, "env": plan.env, "budget_s": plan.budget,
               "problems": [p.key() for p in plan.problems], "source": code["source"]}
        t0 = time.monotonic()
        runs = _restore(args, partial, sig)
        left_arms = (args.pytorch_runs - len(runs.torch)) + (args.tune_runs - len(runs.tune))

        def checkpoint(arm: dict[str, Any] | None = None) -> None:
            if partial is not None:
                save_partial(partial, {"signature": sig, "torch_runs": runs.torch,
                                       "tune_runs": runs.tune, "referee_runs": runs.referee,
                                       "arm_wall_s": runs.arm_s,
                                       "current": arm,
                                       "wall_s_before": runs.wall_before + time.monotonic() - t0})

        resume = ArmResume(runs.current, checkpoint)
        _run_arms(args, plan, runs, resume, first, left_arms)
        # the device's peaks, after every arm (measured once per device and cached); a worker
        # that cannot give them costs the roofline figures, never the result
        try:
            peaks = first.peaks()
        except Exception:  # noqa: BLE001
            peaks = None
    finally:
        first.shutdown()
    wall_s = time.monotonic() - t0
    rows = [bench_row(e, p, runs.torch, runs.tune, runs.referee, referee.heuristic_key(plan.cpu),
                      plan.cpu) for e, p in zip(plan.entries, plan.problems, strict=True)]
    add_roofline(rows, peaks)
    summary = summarize(rows)
    # the whole bench's wall: this process's and that of the stopped runs it resumed
    summary["wall_s"] = runs.wall_before + wall_s
    summary["wall_s_this_process"] = wall_s
    summary["resumed_arms"] = (args.pytorch_runs + args.tune_runs) - left_arms
    # problems of an arm the run had stopped in, not run again
    summary["resumed_problems"] = resume.resumed_problems
    summary["tuning_s_total_per_run"] = [r.get("_process_s") for r in runs.tune]
    summary["arm_wall_s"] = runs.arm_s
    payload = {"kind": "bench", "suite": suite.name, "config": args.config,
               "direction": args.direction, "backend": plan.backend, "env": plan.env,
               "code": code,
               "batch_override": plan.batch, "budget_s": plan.budget,
               "pytorch_runs": args.pytorch_runs,
               "tune_runs": args.tune_runs, "referees": args.referees, "shard": args.shard,
               "match": args.match, "peaks": peaks, "summary": summary,
               "rows": rows}
    rc = emit(args, payload)
    remove_partial(partial)
    return rc


def _plan(args: argparse.Namespace, suite: Suite, shard: tuple[int, int] | None,
          backend: str, env: dict[str, str], settings: Settings) -> Plan:
    """The problems to run (--limit spread, --match, --shard) and the backend's defaults."""
    dtype, layout, math_mode = CONFIGS[args.config]
    cpu = backend == "cpu"
    limit = args.limit if args.limit is not None else (4 if cpu else None)
    batch = args.batch if args.batch is not None else (1 if cpu else None)
    budget = args.budget if args.budget is not None else (1.0 if cpu else 5.0)
    if limit is not None and limit < 1:
        raise UsageError("--limit must be >= 1")
    entries = suite.spread(limit)
    if args.match:
        entries = matching(entries, args.match, args.direction, dtype, layout, math_mode)
    entries = shard_of(entries, shard)
    if not entries:
        raise UsageError(f"shard {args.shard} of {suite.name} has no problems")
    problems = [e.problem(direction=args.direction, dtype=dtype, layout=layout, math=math_mode,
                          batch=batch) for e in entries]
    return Plan(suite, entries, problems, env, batch,
                arms.ArmSpec(backend, budget, args.timeout, settings))


def _restore(args: argparse.Namespace, partial: str | None, sig: dict[str, Any]) -> Runs:
    """The finished arms of a stopped run (--resume), never more than this run asks for."""
    runs = Runs()
    if not args.resume:
        return runs
    assert partial is not None
    done = load_partial(partial, sig)
    runs.torch = done["torch_runs"][: args.pytorch_runs]
    runs.tune = done["tune_runs"][: args.tune_runs]
    runs.referee = done["referee_runs"][: args.referees]
    for k in runs.arm_s:
        runs.arm_s[k] = list(done.get("arm_wall_s", {}).get(k, []))
    # the arm that was running when the run stopped: its kind, finished problems, wall so far
    runs.current = done.get("current")
    runs.wall_before = resumed_wall(done)
    return runs


def _run_arms(args: argparse.Namespace, plan: Plan, runs: Runs, resume: ArmResume, first: Any,
              left_arms: int) -> None:
    """The PyTorch arms (the first in `first`), the tuning arms, then the referees."""
    from ..progress import Progress

    problems, spec = plan.problems, plan.spec
    total = len(problems) * (left_arms + args.referees - len(runs.referee))
    # --json --out (batch jobs): a plain line per step on stderr, so a log shows how far a
    # run that was stopped got; --json alone keeps stderr quiet
    log_lines = bool(args.json and args.out)
    with Progress(total, "bench", enabled=True if log_lines else (None if not args.json
                                                                   else False),
                  lines=log_lines) as bar:
        run_arms("pytorch", runs.torch, args.pytorch_runs, resume, runs.arm_s["pytorch"],
                 lambda i, prior, save: arms.pytorch_arm(
                     problems, spec, bar, fresh=first if i == 0 else None, done=prior,
                     on_problem=save))
        run_arms("tune", runs.tune, args.tune_runs, resume, runs.arm_s["tune"],
                 lambda i, prior, save: arms.tune_arm(
                     problems, spec, bar, done=prior, on_problem=save))
        heur_key = referee.heuristic_key(plan.cpu)
        keys_for: dict[str, list[str]] = {}
        pytorch_for: dict[str, set[str]] = {}
        for p in problems:
            k = p.key()
            keys_for[k], pytorch_for[k] = referee.referee_keys(
                heur_key, [r[k]["benchmark_pick"] for r in runs.torch],
                [r[k]["winner"] for r in runs.tune], plan.cpu)
        run_arms("referee", runs.referee, args.referees, resume, runs.arm_s["referee"],
                 lambda i, prior, save: referee.referee_arm(
                     problems, keys_for, spec, bar, done=prior, on_problem=save,
                     pytorch_for=pytorch_for))
