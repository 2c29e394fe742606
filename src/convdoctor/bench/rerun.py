"""`bench --referee-only FILE`: a finished result's choices timed again by fresh referees.

The choices recorded in FILE (benchmark=True's picks, the tuning runs' winners) are timed again by
`--referees` fresh referee processes, on the same GPU and software stack as FILE's; every other
field of FILE is kept, the old referee figures under each row's `first_referee`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..errors import UsageError
from ..problem import ConvProblem
from ..settings import Settings
from ..tune.provenance import code_identity
from . import arms, referee
from .merge import read_result
from .report import emit
from .resume import ArmResume, load_partial, partial_path, remove_partial, run_arms, save_partial
from .roofline import add_roofline
from .summary import summarize

# summary fields of FILE that describe its arms (kept: the arms are not run again)
KEPT_SUMMARY_FIELDS = ("wall_s", "wall_s_this_process", "resumed_arms", "resumed_problems",
                       "tuning_s_total_per_run", "arm_wall_s")


def referee_only(args: argparse.Namespace, settings: Settings) -> int:
    """`bench --referee-only FILE` (see the module docstring); `settings`: what the referee
    processes run under."""
    path = args.referee_only
    doc = read_result(path)
    if args.referees < 1:
        raise UsageError("--referees must be >= 1")
    rows = doc["rows"]
    backend = doc.get("backend")
    if backend not in ("cpu", "cuda"):
        raise UsageError(f"{path}: unknown backend {backend!r}")
    cpu = backend == "cpu"
    heur_key = referee.heuristic_key(cpu)
    problems, keys_for, pytorch_for = _choices(path, rows, heur_key, cpu)
    budget = args.budget if args.budget is not None else doc.get("budget_s")
    if not isinstance(budget, (int, float)) or budget <= 0:
        raise UsageError(f"{path} records no sampling budget: pass --budget S")
    spec = arms.ArmSpec(backend, float(budget), args.timeout, settings)
    env = _same_stack(path, doc, spec)
    code = code_identity()
    # --resume: FILE.partial holds the finished referee processes and the finished problems of
    # the one that stopped (a referee process of a 303-problem pass takes tens of minutes)
    partial = partial_path(args.out, args.resume)
    sig = {"referee_only": [[r["problem_key"], r["benchmark_picks"], r["winners"]] for r in rows],
           "env": env, "budget_s": budget, "source": code["source"]}
    done = (load_partial(partial, sig) if args.resume and partial is not None
            else {"referee_runs": [], "current": None})
    refs: list[dict[str, Any]] = list(done["referee_runs"])[: args.referees]
    walls: list[float] = [float(x) for x in (done.get("arm_wall_s") or {}).get("referee", [])
                          if isinstance(x, (int, float))][: len(refs)]
    t0 = time.monotonic()

    def checkpoint(cur: dict[str, Any] | None = None) -> None:
        if partial is not None:
            save_partial(partial, {"signature": sig, "torch_runs": [], "tune_runs": [],
                                   "referee_runs": refs, "arm_wall_s": {"referee": walls},
                                   "current": cur})

    resume = ArmResume(done.get("current"), checkpoint)
    log_lines = bool(args.json and args.out)
    from ..progress import Progress

    with Progress(len(problems) * (args.referees - len(refs)), "referee",
                  enabled=True if log_lines else (None if not args.json else False),
                  lines=log_lines) as bar:
        run_arms("referee", refs, args.referees, resume, walls,
                 lambda i, prior, save: referee.referee_arm(
                     problems, keys_for, spec, bar, done=prior, on_problem=save,
                     pytorch_for=pytorch_for))
    new_rows = [_row(r, p, refs, heur_key, cpu) for r, p in zip(rows, problems, strict=True)]
    add_roofline(new_rows, doc.get("peaks"))
    first = doc.get("summary") or {}
    summary = summarize(new_rows)
    for f in KEPT_SUMMARY_FIELDS:
        if f in first:
            summary[f] = first[f]
    payload = {**doc, "rows": new_rows, "summary": summary, "referees": args.referees,
               "referee_only": {"from": path, "code": code, "referees": args.referees,
                                "budget_s": budget, "wall_s": time.monotonic() - t0,
                                "arm_wall_s": walls, "first_summary": first}}
    rc = emit(args, payload)
    remove_partial(partial)
    return rc


def _choices(path: str, rows: list[Any], heur_key: str, cpu: bool
             ) -> tuple[list[ConvProblem], dict[str, list[str]], dict[str, set[str]]]:
    """FILE's problems, what a referee times for each, and which of those are PyTorch's paths."""
    problems: list[ConvProblem] = []
    keys_for: dict[str, list[str]] = {}
    pytorch_for: dict[str, set[str]] = {}
    for r in rows:
        try:
            p = ConvProblem.parse(r["problem_key"])
            picks, winners = list(r["benchmark_picks"]), list(r["winners"])
        except (KeyError, TypeError) as exc:
            raise UsageError(f"{path}: a row lacks {exc} (not a bench row)") from None
        problems.append(p)
        keys_for[p.key()], pytorch_for[p.key()] = referee.referee_keys(heur_key, picks, winners,
                                                                       cpu)
    return problems, keys_for, pytorch_for


def _same_stack(path: str, doc: dict[str, Any], spec: arms.ArmSpec) -> dict[str, str]:
    """This machine's environment record; UsageError when it differs from FILE's."""
    be = spec.measure_worker()
    try:
        env = be.environment()
    finally:
        be.shutdown()
    theirs = doc.get("env") or {}
    # parts FILE's record does not hold (it predates them) cannot be compared: said, not refused
    unrecorded = sorted(k for k in env if k not in theirs)
    if unrecorded:
        print(f"note: {path} does not record {', '.join(unrecorded)}; re-timed with this "
              f"machine's ({', '.join(f'{k}={env[k]}' for k in unrecorded)})", file=sys.stderr)
    diff = sorted(k for k in set(env) | set(theirs)
                  if k not in unrecorded and env.get(k) != theirs.get(k))
    if diff:
        raise UsageError(f"{path} was measured on another machine or software stack (differs "
                         f"in: {', '.join(f'{k} {theirs.get(k)!r} here {env.get(k)!r}' for k in diff)}): "
                         "its choices can only be re-timed where they were made")
    return env


def _row(r: dict[str, Any], p: ConvProblem, refs: list[dict[str, Any]], heur_key: str,
         cpu: bool) -> dict[str, Any]:
    """FILE's row with the new referees' figures (the old ones under `first_referee`)."""
    k = p.key()
    rf = referee.referee_fields([ref.get(k, {}) for ref in refs], heur_key, r["winners"],
                                r["benchmark_picks"])
    nr = {**r, **rf,
          "first_referee": r.get("first_referee") or {f: r.get(f) for f in
                                                       referee.REFEREE_ROW_FIELDS if f in r}}
    if cpu:
        nr["benchmark_spread"] = referee.spread(referee.picks_times(rf["referee_s"],
                                                                    r["benchmark_picks"]))
    nr["pytorch_outside_tolerance"] = referee.worst_errors(
        [r.get("pytorch_outside_tolerance") or {}]
        + [(ref.get(referee.OUTSIDE_KEY) or {}).get(k) or {} for ref in refs])
    return nr
