"""`bench --out FILE --resume`: the run's state in FILE.partial, written after every problem.

The state holds the finished arms (PyTorch, tuning and referee processes), the finished problems of
the arm that was running (`current`: {kind, done, wall_s}), the walls so far and the run's
signature (problems, settings, machine, code); a state of another run is refused, never mixed in.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

from ..errors import UsageError

# An arm's results so far, after each problem (the bench writes them to FILE.partial, so a run
# stopped mid-arm resumes from the next problem, not from the arm's start).
ArmCheckpoint = Callable[[dict[str, Any]], None]


class ArmResume:
    """Where a stopped run left off inside an arm: the state's `current` record ({kind, done,
    wall_s}) is handed to the first arm of its kind started (`start`), once; `checkpoint(arm)`
    saves the run's state with the arm in progress (None between arms)."""

    def __init__(self, current: dict[str, Any] | None,
                 checkpoint: Callable[[dict[str, Any] | None], None]) -> None:
        self.current = current
        self.checkpoint = checkpoint
        self.resumed_problems = 0   # problems of a stopped arm not run again

    def start(self, kind: str) -> tuple[dict[str, Any], Callable[[], float], ArmCheckpoint]:
        """The next `kind` arm's restored results (when the run stopped in it), its wall seconds
        so far (the stopped run's included), and the callback that saves its progress after each
        problem."""
        prior: dict[str, Any] = {}
        wall0 = 0.0
        cur = self.current
        if cur is not None and cur.get("kind") == kind:
            prior = dict(cur.get("done") or {})
            wall0 = float(cur.get("wall_s") or 0.0)
            self.resumed_problems += sum(1 for k in prior if not k.startswith("_"))
        self.current = None
        ta = time.monotonic()

        def wall() -> float:
            return wall0 + time.monotonic() - ta

        def save(results: dict[str, Any]) -> None:
            self.checkpoint({"kind": kind, "done": results, "wall_s": wall()})
        return prior, wall, save


def partial_path(out: str | None, resume: bool) -> str | None:
    """FILE.partial for `--out FILE` (None without --out); UsageError for --resume without it."""
    if resume and not out:
        raise UsageError("--resume needs --out FILE (the run's state is FILE.partial)")
    return (out + ".partial") if out else None


def remove_partial(path: str | None) -> None:
    """The result is written: nothing left to resume."""
    if path is not None and os.path.exists(path):
        os.remove(path)


def save_partial(path: str, state: dict[str, Any]) -> None:
    """Write the run's state atomically (a stop mid-write leaves the previous state)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(state, fh)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write the bench's state file {path}: {exc}") from None


def load_partial(path: str, signature: dict[str, Any]) -> dict[str, Any]:
    """The finished arms of an interrupted run (empty when there is no state file); a file of
    another run, or an unreadable one, is a clear error, never silently used."""
    import glob

    for tmp in glob.glob(glob.escape(path) + ".tmp*"):  # left by a process killed mid-write
        try:
            os.remove(tmp)
        except OSError:
            pass
    if not os.path.exists(path):
        return {"torch_runs": [], "tune_runs": [], "referee_runs": []}
    from ..jsonfile import read_json

    try:
        state = read_json(path, what="bench state file")
        torch_runs, tune_runs = list(state["torch_runs"]), list(state["tune_runs"])
        # a state file written before `--referees` has none: its finished arms still count
        referee_runs = list(state.get("referee_runs") or [])
    except (UsageError, OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path} is not a readable bench state file ({exc}); remove it, or run "
                         "without --resume") from None
    if state.get("signature") != signature:
        _refuse(path, signature, state.get("signature") or {})
    cur = state.get("current")
    return {"torch_runs": torch_runs, "tune_runs": tune_runs, "referee_runs": referee_runs,
            "arm_wall_s": state.get("arm_wall_s", {}),
            "wall_s_before": state.get("wall_s_before"),
            "current": cur if isinstance(cur, dict) and isinstance(cur.get("done"), dict) else None}


def _refuse(path: str, signature: dict[str, Any], theirs: dict[str, Any]) -> None:
    diff = sorted(k for k in set(signature) | set(theirs) if signature.get(k) != theirs.get(k))
    if diff == ["source"]:
        raise UsageError(
            f"{path} was written by other convdoctor code (source "
            f"{theirs.get('source') or 'not recorded'}, now {signature.get('source')}): "
            "resuming would mix two versions' figures in one result; remove it to run the "
            "part again, or resume with the code that wrote it")
    raise UsageError(f"{path} belongs to another run (differs in: {', '.join(diff)}); remove "
                     "it, or run without --resume")


def resumed_wall(done: dict[str, Any]) -> float:
    """The wall seconds of the stopped runs a resumed bench continues: the state's
    `wall_s_before`, and never less than its finished arms' walls plus the stopped arm's (a state
    file written before `wall_s_before` existed, or a damaged value, still counts those)."""
    arms = sum(float(x) for v in (done.get("arm_wall_s") or {}).values()
               if isinstance(v, list) for x in v if isinstance(x, (int, float)))
    cur = done.get("current") or {}
    cur_wall = cur.get("wall_s") if isinstance(cur, dict) else None
    if isinstance(cur_wall, (int, float)) and math.isfinite(cur_wall):
        arms += max(0.0, float(cur_wall))
    saved = done.get("wall_s_before")
    if isinstance(saved, bool) or not isinstance(saved, (int, float)) or not math.isfinite(saved):
        saved = 0.0
    return max(float(saved), arms)


def run_arms(kind: str, runs: list[dict[str, Any]], count: int, resume: ArmResume,
             walls: list[float],
             one: Callable[[int, dict[str, Any], ArmCheckpoint], dict[str, Any]]) -> None:
    """Run `kind` arms until `runs` holds `count`: `one(i, prior, save)` runs the i-th from its
    restored results `prior`, calling `save` after each problem; the run's state is saved after
    each arm, and each arm's wall (a stopped run's included) appended to `walls`."""
    for i in range(len(runs), count):
        prior, wall, save = resume.start(kind)
        runs.append(one(i, prior, save))
        walls.append(wall())
        resume.checkpoint(None)
