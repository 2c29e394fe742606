"""Tuning one problem end to end: `tune_problem` (and `tune_many`).

It opens the backend (by default in a worker subprocess, `convdoctor.tune.worker`, so a crash or
a hang costs one candidate), serves a valid stored result from the tuning database, runs the
sampler (`convdoctor.tune.sampler.Harness`: first runs, check, warm-up, screen, adaptive
round-robin sampling under the stopping criteria of `convdoctor.measure.stopping`) and its choice
(`convdoctor.tune.select`), stores a trustworthy result, and keeps in the database the cuDNN
engines that hung a listing. The sampler's knobs are `HarnessConfig` (`convdoctor.tune.config`).
This module is the tuner's public face: `Harness`, `HarnessConfig` and `one_sample_select` are
importable from here too.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..problem import ConvProblem
from ..settings import Settings, current
from .backend import Backend
from .config import HarnessConfig
from .onesample import one_sample_select
from .result import TuneResult
from .sampler import Harness

__all__ = ["Harness", "HarnessConfig", "environment_of", "file_trace", "one_sample_select",
           "tune_many", "tune_problem"]


def file_trace(path: str) -> Callable[[dict[str, Any]], None]:
    """A trace sink appending one JSON line per event to `path` (opened per event, so several
    processes may share a file and a crash loses nothing written)."""
    import json

    def write(event: dict[str, Any]) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event, default=str) + "\n")

    return write


def tune_problem(problem: ConvProblem, *, backend: str | Backend = "auto", db: Any = None,
                 budget_s: float = 20.0, progress: Any = None, isolate: bool = True,
                 config: HarnessConfig | None = None, reuse: bool = True,
                 timeout_s: float = 60.0, settings: Settings | None = None) -> TuneResult:
    """Tune one problem and return every candidate's statistics and the winner.

    backend: "auto" | "cpu" | "cuda" or a Backend object. With a name and `isolate` (default), the
    candidates run in a worker subprocess (`convdoctor.tune.worker`), so a crash or a hang (over
    `timeout_s` per call) costs only that candidate. db: a `convdoctor.db.TuningDB`; a valid stored
    result is returned when `reuse`, and a new result is stored. progress: a `Progress`; notes go to it.
    settings: convdoctor's settings (default: this process's environment's); a backend named here
    gets them, and `tune_trace` names a trace file when `config` has no trace sink.
    """
    from .worker import WorkerBackend

    settings = settings if settings is not None else current()
    cfg = replace(config) if config is not None else HarnessConfig()
    cfg.budget_s = budget_s
    if cfg.trace is None and settings.tune_trace.strip():
        cfg.trace = file_trace(settings.tune_trace.strip())
    cfg.warmup_cap_s = min(cfg.warmup_cap_s, max(0.2, budget_s / 2.0))
    if config is None or not config.prescreen:
        cfg.prescreen = settings.tune_prescreen

    def note(text: str) -> None:
        if progress is not None:
            progress.update(0, text)

    owned = None
    if isinstance(backend, str):
        if isolate:
            owned = WorkerBackend(backend, timeout_s=timeout_s, settings=settings)
            be: Backend = owned
        else:
            from .backend import get_backend

            be = get_backend(backend, settings)
    else:
        be = backend
    try:
        env = environment_of(be)
        if db is not None and reuse:
            hit = db.get(problem, env)
            if hit is not None:
                hit.notes.append("loaded from the tuning database")
                return hit
        # units (cuDNN engines) that hung a listing of this problem's kind on this device and
        # these versions in another process are left out from the start, and new ones are
        # remembered (`TuningDB.left_out`)
        hung = getattr(be, "hung", None) if db is not None else None
        if isinstance(hung, dict):
            _recall_left_out(db, env, hung, note)
        result = Harness(be, cfg, note).run(problem, env)
        if isinstance(hung, dict) and any(hung.values()):
            _remember_left_out(db, env, hung, result)
        if (db is not None and result.winner is not None and not result.degraded
                and not result.short_list):
            db.put(result)
        return result
    finally:
        if owned is not None:
            owned.shutdown()


REMEMBERED = " (remembered by the tuning database)"


def _recall_left_out(db: Any, env: dict[str, str], hung: dict[str, dict[str, str]],
                     note: Callable[[str], None]) -> None:
    from ..errors import UsageError

    try:
        known = db.left_out(env)
    except (UsageError, sqlite3.Error) as exc:   # a locked database costs the memory, not the run
        note(f"could not read the engines left out before: {exc}")
        return
    for kind, units in known.items():
        for unit, why in units.items():
            hung.setdefault(kind, {}).setdefault(unit, why + REMEMBERED)


def _remember_left_out(db: Any, env: dict[str, str], hung: dict[str, dict[str, str]],
                       result: TuneResult) -> None:
    from ..errors import UsageError

    fresh = {k: {u: w for u, w in us.items() if not w.endswith(REMEMBERED)}
             for k, us in hung.items()}
    try:
        db.remember_left_out(env, fresh)
    except (UsageError, sqlite3.Error) as exc:
        result.notes.append(f"could not remember the engines left out in the tuning database: "
                            f"{exc}")


def environment_of(backend: Backend) -> dict[str, str]:
    env = {str(k): str(v) for k, v in backend.environment().items()}
    env.setdefault("backend", backend.name)
    return env


def tune_many(problems: Sequence[ConvProblem], **kwargs: Any) -> list[TuneResult]:
    """`tune_problem` for each problem, with the same keyword arguments."""
    return [tune_problem(p, **kwargs) for p in problems]
