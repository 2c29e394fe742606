"""Choices for the model's problems: database lookups, then tuning of what is missing.

One `Tuning` holds the database and one backend; with `isolate` the candidates run in a worker
process, started only when a problem must be tuned. A backend that cannot start leaves every
convolution on PyTorch's path (with a note), never an error.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from importlib import resources
from typing import Any

from ..problem import ConvProblem
from ..settings import Settings
from ..tune.precompile import PRECOMPILE_WAIT_S
from .feedback import Clock, tuning_feedback
from .options import OptimizeOptions
from .quiet import own_steps
from .report import OptimizeReport

# problem key -> (tuning result, "db" | "tuned")
Results = dict[str, tuple[Any, str]]


# Quick tuning on a GPU leaves a problem this small on PyTorch's path instead of tuning it: at most
# TINY_FLOPS of arithmetic and TINY_BYTES of memory traffic, under half a microsecond of an
# H100's compute and bandwidth, so any kernel's time is its launch. Measured on EfficientNet-B0
# fp32 training (H200, batch 64): its 42 squeeze-excitation convolutions (at most 7.1 MFLOP and
# 0.53 MB each; the next smallest problem is 54 MFLOP and 60 MB) took 22.6 s of 102.6 s of
# tuning, ran 2.1-6.9 us on PyTorch's path, 2.8% of the model's convolution time, and their
# tuned winners were 0-3.4 us faster each.
TINY_FLOPS = 16_000_000
TINY_BYTES = 1 << 20


# Flops per byte at which a convolution turns from memory- to compute-bound, for ranking only:
# between an H100's TF32 (about 120) and bf16 (about 300) dense rates over its bandwidth.
BALANCE_FLOP_PER_BYTE = 200


def importance_class(problem: ConvProblem) -> str:
    """"dw-<direction>" for one group per input channel (more than one; any channel multiplier,
    unlike `ConvProblem.depthwise`: the weights were fitted so), else "dense-<direction>"."""
    dw = problem.groups > 1 and problem.groups == problem.c
    return f"{'dw' if dw else 'dense'}-{problem.direction}"


@functools.lru_cache(maxsize=1)
def _class_weights() -> dict[str, float]:
    """`data/importance.json`'s weights (written by lab/fit_importance.py); {} if unreadable."""
    try:
        raw = resources.files("convdoctor.runtime").joinpath("data/importance.json").read_text(
            encoding="utf-8")
        return {str(k): float(v) for k, v in json.loads(raw)["weights"].items()}
    except Exception:  # noqa: BLE001 - without weights every class counts the same
        return {}


def roofline_units(problem: ConvProblem) -> float:
    """The problem's roofline time in byte units: its memory traffic, or its flops over
    `BALANCE_FLOP_PER_BYTE` where compute limits."""
    return max(problem.flops() / BALANCE_FLOP_PER_BYTE, problem.min_bytes())


def importance(problem: ConvProblem, uses: int = 1) -> float:
    """A problem's expected saving from tuning, for tuning the most promising first: its
    roofline time (`roofline_units`), times its class's weight (`importance_class`; how far PyTorch's own path
    runs from that estimate and how much of it tuning saved, per class, over the 101-layer
    suite's bench results: `data/importance.json`), times the distinct calls that run it."""
    return roofline_units(problem) * _class_weights().get(importance_class(problem), 1.0) * max(1, uses)


# Quick tuning on a GPU leaves the least promising problems on PyTorch's path: those past the first
# MINOR_SHARE of the model's whole estimated saving (`importance`, most promising first). Chosen on
# the 101-layer suite's bench results (28 networks and configurations): at 0.98 the saving left
# was at most 1.05% of a network's PyTorch convolution time (median 0.01%), at 0.95 up to 11%.
MINOR_SHARE = 0.98
# ... in models of more problems than this only: fewer are tuned within the time limit anyway
# (ResNet-50, ConvNeXt-tiny and EfficientNet-B0 training pose 23-137)
MINOR_MIN_PROBLEMS = 16


def minor_keys(problems: dict[str, ConvProblem], uses: dict[str, int] | None = None) -> set[str]:
    """The keys of `problems` past the first `MINOR_SHARE` of their summed `importance`; none
    when there are at most `MINOR_MIN_PROBLEMS`."""
    if len(problems) <= MINOR_MIN_PROBLEMS:
        return set()
    est = {pk: importance(p, (uses or {}).get(pk, 1)) for pk, p in problems.items()}
    total = sum(est.values())
    out: set[str] = set()
    acc = 0.0
    for pk in sorted(est, key=lambda k: -est[k]):   # stable: equal estimates keep call order
        if total > 0 and acc >= MINOR_SHARE * total:
            out.add(pk)
        acc += est[pk]
    return out


def tiny(problem: ConvProblem) -> bool:
    """A problem whose every kernel's time is its launch (`TINY_FLOPS`, `TINY_BYTES`)."""
    return problem.flops() <= TINY_FLOPS and problem.min_bytes() <= TINY_BYTES


def open_db(db: Any) -> Any:
    """`optimize`'s `db` argument as a database: False -> None (no database), None -> the default
    database, a database object as is, anything else -> the TuningDB at that path."""
    if db is False:
        return None
    try:
        from ..db.store import TuningDB
    except Exception:  # noqa: BLE001
        return db if db not in (None, False) and hasattr(db, "get") else None
    if db is None:
        return TuningDB()
    if isinstance(db, TuningDB) or hasattr(db, "get"):
        return db
    return TuningDB(db)


class Tuning:
    """Database lookups and tuning with one backend (a worker process started only if needed)."""

    def __init__(self, db: Any, backend: str, budget_s: float, isolate: bool,
                 settings: Settings, base_settings: Settings | None = None) -> None:
        self.settings = settings
        self.base_settings = base_settings if base_settings is not None else settings
        self.db = open_db(db)
        self.backend_name = backend
        self.budget_s = budget_s
        self.isolate = isolate
        self._be: Any = None
        self._worker: Any = None
        self._starting: Any = None       # the thread starting the worker ahead (`prestart`)
        self._discard = False            # closed while that thread was starting it
        self._lock = threading.Lock()
        self._pre: Any = None            # a precompiler started ahead, waiting for its tasks
        self._hopeless: Any = None       # candidates found hopeless, per problem class (`tune.hopeless`)
        self.env: dict[str, str] | None = None
        self.available = True
        self.why = ""
        try:
            from ..tune.backend import get_backend
            from ..tune.harness import environment_of

            self._be = get_backend(backend, self.settings)
            self.env = environment_of(self._be)
        except Exception as exc:  # noqa: BLE001 - no tuner: PyTorch's path everywhere
            self.available = False
            self.why = f"tuning backend unavailable ({type(exc).__name__}: {exc})"

    @classmethod
    def of(cls, opts: OptimizeOptions) -> Tuning:
        return cls(opts.db, opts.backend, opts.budget_s, opts.isolate, opts.settings,
                   opts.base_settings)

    def lookup(self, problem: ConvProblem) -> Any:
        if not self.available or self.db is None or self.env is None:
            return None
        try:
            for env in self._lookup_envs():
                res = self.db.get(problem, env)
                if res is not None:
                    return res
            return None
        except Exception:  # noqa: BLE001 - the database is a cache
            return None

    def _lookup_envs(self) -> list[dict[str, str]]:
        """The database keys a result may be served from: this run's settings, then the settings
        as the user gave them (a thorough result serves a quick run)."""
        assert self.env is not None
        envs = [self.env]
        base = self.base_settings.result_key()
        if "settings" in self.env and self.env["settings"] != base:
            envs.append(dict(self.env, settings=base))
        return envs

    def tune(self, problem: ConvProblem, progress: Any = None) -> Any:
        if not self.available:
            return None
        from ..tune.harness import HarnessConfig, tune_problem

        be = self._be
        if self.isolate:
            if self._starting is not None:
                self._starting.join()
                self._starting = None
            if self._worker is None:
                from ..tune.worker import WorkerBackend

                self._worker = WorkerBackend(self.backend_name, settings=self.settings)
            be = self._worker
        if self._hopeless is None:
            from ..tune.hopeless import HopelessMemory

            self._hopeless = HopelessMemory()
        return tune_problem(problem, backend=be, db=self.db, budget_s=self.budget_s,
                            progress=progress, settings=self.settings,
                            config=HarnessConfig(hopeless_memory=self._hopeless))

    def _cuda(self) -> bool:
        return self.available and self._be is not None and getattr(self._be, "name", "") == "cuda"

    def _precompile_workers(self) -> int:
        import torch

        from ..tune.precompile import default_workers

        workers = self.settings.precompile
        if workers < 0:
            workers = default_workers(torch.cuda.mem_get_info(self._be.device)[0])
        return workers

    def prestart(self) -> None:
        """Start what tuning will need - the worker process (in a thread) and the precompiler's
        child processes, waiting for their kernels - so that their start-up overlaps the steps
        before tuning. For a CUDA backend in a worker only; does nothing otherwise."""
        if not self._cuda() or not self.isolate or self._worker is not None:
            return
        try:
            from ..tune.precompile import Precompiler

            workers = self._precompile_workers()
            if workers > 0 and self.settings.triton:
                self._pre = Precompiler([], workers=workers, settings=self.settings,
                                        sealed=False).start()

            def start() -> None:
                from ..tune.worker import WorkerBackend

                try:
                    w = WorkerBackend(self.backend_name, settings=self.settings)
                except Exception:  # noqa: BLE001 - tune() starts it again and reports
                    return
                with self._lock:
                    keep = not self._discard
                    if keep:
                        self._worker = w
                if not keep:               # closed meanwhile: nobody will use it
                    w.shutdown()

            self._starting = threading.Thread(target=start, daemon=True,
                                              name="convdoctor-worker-start")
            self._starting.start()
        except Exception:  # noqa: BLE001 - tuning starts them when it needs them
            pass

    def precompiler(self, problems: list[ConvProblem]) -> Any:
        """A started `tune.precompile.Precompiler` for the Triton kernels of `problems` (the one
        `prestart` began, given its tasks now), or None where there is nothing to compile, no
        CUDA backend, or `settings.precompile` is 0."""
        if not self._cuda():
            return None
        try:
            from ..tune.precompile import start_for, triton_tasks

            sm = int(self.env["sm_count"]) if self.env else 0
            if self._pre is not None:
                pre, self._pre = self._pre, None
                pre.add(triton_tasks(problems, self.settings, sm), seal=True)
                return pre
            return start_for(problems, self.settings, sm, self._precompile_workers())
        except Exception:  # noqa: BLE001 - without it the tuner compiles each kernel itself
            return None

    def close(self) -> None:
        if self._pre is not None:          # prestarted, never given kernels
            self._pre.close()
            self._pre = None
        with self._lock:
            # a worker still starting is not waited for: its thread shuts it down once started
            self._discard = True
            self._starting = None
        if self._worker is not None:
            try:
                self._worker.shutdown()
            except Exception:  # noqa: BLE001
                pass
            self._worker = None


def _won(res: Any) -> bool:
    return res is not None and getattr(res, "winner", None) is not None


def find_results(problems: dict[str, ConvProblem], opts: OptimizeOptions,
                 report: OptimizeReport, *, clock: Clock = time.monotonic,
                 tuning: Any = None, uses: dict[str, int] | None = None) -> Results:
    """A tuning result with a winner for each problem that has one: from the database, else
    tuned (`opts.tune_missing`, largest `importance` first, with `uses[key]` calls per problem,
    within `opts.tune_limit()`), with `tuning` (default: a new `Tuning` of `opts`; closed here
    either way). Counts and notes go to `report`; a problem without a result runs PyTorch's
    path."""
    results: Results = {}
    if tuning is None:
        tuning = Tuning.of(opts)
    if not tuning.available:
        report.notes.append(tuning.why + "; every convolution runs PyTorch's path")
    t0 = clock()
    gpu_quick = opts.tuning == "quick" and str(report.device).startswith("cuda")
    minor = (minor_keys({pk: p for pk, p in problems.items() if not tiny(p)}, uses)
             if gpu_quick else set())
    try:
        missing = []
        for pk, p in problems.items():
            res = tuning.lookup(p)
            if _won(res):
                results[pk] = (res, "db")
                report.from_db += 1
            elif gpu_quick and tiny(p):
                report.left_tiny += 1
            elif pk in minor:
                report.left_minor += 1
            else:
                missing.append((pk, p))
        if report.left_tiny:
            report.notes.append(
                f"{report.left_tiny} tiny problem(s) (at most {TINY_FLOPS / 1e6:.0f} MFLOP and "
                f"{TINY_BYTES >> 20} MiB each: any kernel's time is its launch) left on PyTorch's "
                "path without tuning; tuning='thorough' tunes them")
        if report.left_minor:
            report.notes.append(
                f"{report.left_minor} problem(s) past {MINOR_SHARE:.0%} of the model's estimated "
                "tuning saving left on PyTorch's path without tuning; tuning='thorough' tunes them")
        # stable: equal estimates keep call order
        missing.sort(key=lambda kp: -importance(kp[1], (uses or {}).get(kp[0], 1)))
        if missing and opts.tune_missing and tuning.available:
            _tune_missing(tuning, missing, opts, report, results, t0, clock)
    finally:
        tuning.close()
    report.tuning_s = clock() - t0
    report.untuned = len(problems) - len(results) - report.left_tiny - report.left_minor
    return results


def _tune_missing(tuning: Tuning, missing: list[tuple[str, ConvProblem]], opts: OptimizeOptions,
                  report: OptimizeReport, results: Results, t0: float, clock: Clock) -> None:
    """Tune `missing` in order, reporting to the feedback `opts.progress` asks for
    (`feedback.tuning_feedback`), until `opts.tune_limit(...)` after `t0` (the quick default
    counts the phases `report` timed before tuning); winners go to `results`."""
    fb = tuning_feedback(opts.progress, len(missing), now=clock)
    limit = opts.tune_limit(sum(report.phase_s.values()))
    start_pre = getattr(tuning, "precompiler", None)
    pre = start_pre([p for _, p in missing]) if start_pre is not None else None
    try:
        skipped = 0
        for pk, p in missing:
            if limit is not None and clock() - t0 > limit:
                skipped += 1
                continue
            fb.start(p)
            if pre is not None:
                left = PRECOMPILE_WAIT_S if limit is None else limit - (clock() - t0)
                pre.wait(p.key(), max(0.0, min(PRECOMPILE_WAIT_S, left)))
            t = clock()
            why = ""
            try:
                with own_steps():
                    res = tuning.tune(p, fb.progress)
            except Exception as exc:  # noqa: BLE001 - one problem failing keeps PyTorch's path
                why = f"failed: {type(exc).__name__}: {exc}"
                report.notes.append(f"tuning {p.short()} {why}")
                res = None
            if _won(res):
                results[pk] = (res, "tuned")
                report.tuned += 1
            elif res is not None:
                why = "; ".join(getattr(res, "notes", []) or []) or "no candidate won"
                report.notes.append(f"{p.short()}: not tuned ({why}); PyTorch's path")
            fb.done(p, res, clock() - t, why)
        if skipped:
            report.notes.append(f"tuning time limit ({limit:.0f} s) reached: "
                                f"{skipped} problems not tuned, PyTorch's path (the least "
                                "promising by estimate; the next call tunes them, or pass "
                                "tune_time_limit_s=float('inf'))")
    finally:
        if pre is not None:
            report.precompile = pre.close().to_dict()
        fb.close()
