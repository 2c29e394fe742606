"""`convdoctor tune`: tune one problem (--problem) or every unique convolution of a model."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ..argtypes import bounded_int, positive_seconds
from ..errors import UsageError
from ..problem import PARSE_HELP, ConvProblem
from ..settings import Settings, current

if TYPE_CHECKING:
    from ..tune.result import TuneResult


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="zoo:<name> or path/to/file.py:factory (needs "
                   "--input-shape; file.py:factory imports file.py and calls factory(): it runs "
                   "that file's code, so only name files you trust); or use --problem")
    p.add_argument("--problem", action="append", default=[], metavar="TEXT",
                   help='a problem, e.g. "fprop n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1 '
                   'dtype=float32 layout=nchw" (repeatable)')
    p.add_argument("--input-shape", help="model input shape, e.g. 32,3,224,224")
    p.add_argument("--dtype", default="float32", help="model dtype: float32|float16|bfloat16")
    p.add_argument("--channels-last", action="store_true", help="run the model channels-last")
    p.add_argument("--train", action="store_true", help="also tune dgrad and wgrad (training)")
    p.add_argument("--math", default="tf32", choices=["tf32", "strict"],
                   help="fp32 math for model problems: tf32 allowed (default) or strict")
    p.add_argument("--deterministic", action="store_true",
                   help="model problems need deterministic engines")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--tuning", choices=("thorough", "quick"), default="thorough",
                   help="thorough (default): every candidate convdoctor can list; quick: the "
                        "short listing and prescreen of docs/configuration.md, for results within "
                        "seconds per problem")
    p.add_argument("--budget", type=positive_seconds(), default=None, metavar="S",
                   help="sampling time cap per problem in seconds (default 10 GPU, 3 CPU)")
    p.add_argument("--timeout", type=positive_seconds(), default=120.0, metavar="S",
                   help="a candidate that does not answer in S seconds counts as hung")
    p.add_argument("--db", default=None, help="tuning database file (default: CONVDOCTOR_DB or "
                   "the user cache dir)")
    p.add_argument("--no-db", action="store_true", help="do not read or write the database")
    p.add_argument("--force", action="store_true", help="tune again even when the database has "
                   "a valid result")
    p.add_argument("--limit", type=bounded_int(1), default=None,
                   help="tune only the first N problems")
    p.add_argument("--detail", action="store_true", help="print every candidate's statistics")
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="append the tuner's decisions (screen rounds and verdicts, sampling "
                        "rounds, the selection with its ratios and ties) to FILE as JSON lines "
                        "(env CONVDOCTOR_TUNE_TRACE does the same for every tuning run)")
    p.add_argument("--no-isolate", action="store_true",
                   help="run candidates in this process (debugging; a crash kills the run)")


def model_problems(spec: str, input_shape: str | None, *, dtype: str, channels_last: bool,
                   train: bool, math: str, deterministic: bool) -> list[ConvProblem]:
    if not input_shape:
        raise UsageError("tuning a model needs --input-shape, e.g. --input-shape 32,3,224,224")
    from ..check.models import load_model, parse_shape
    from ..check.trace import trace_convs

    shape = parse_shape(input_shape, name="--input-shape")
    model = load_model(spec)
    calls = trace_convs(model, input_shape=shape, dtype=dtype,
                        memory_format="channels_last" if channels_last else "contiguous",
                        train=train)
    if not calls:
        raise UsageError(f"{spec} runs no convolutions on input {shape}: nothing to tune")
    out: list[ConvProblem] = []
    for call in calls:
        out.append(ConvProblem.from_conv_call(call, "fprop", math=math,
                                              deterministic=deterministic))
        if train:
            # The data input needs no gradient: PyTorch skips dgrad for a conv fed by it.
            if not (tuple(call.x_shape) == tuple(shape) and not call.transposed):
                out.append(ConvProblem.from_conv_call(call, "dgrad", math=math,
                                                      deterministic=deterministic))
            out.append(ConvProblem.from_conv_call(call, "wgrad", math=math,
                                                  deterministic=deterministic))
    return unique(out)


def unique(problems: list[ConvProblem]) -> list[ConvProblem]:
    seen: set[str] = set()
    out = []
    for p in problems:
        if p.key() not in seen:
            seen.add(p.key())
            out.append(p)
    return out


def open_db(args: argparse.Namespace) -> Any:
    if getattr(args, "no_db", False):
        return None
    from ..db import TuningDB

    return TuningDB(args.db)


def make_backend(name: str, *, isolate: bool, timeout_s: float,
                 settings: Settings | None = None) -> Any:
    if isolate:
        from ..tune.worker import WorkerBackend

        return WorkerBackend(name, timeout_s=timeout_s, settings=settings)
    from ..tune.backend import get_backend

    return get_backend(name, settings)


def _problems(args: argparse.Namespace) -> list[ConvProblem]:
    """The problems the command line names (--problem, a model), unique, at most --limit."""
    problems: list[ConvProblem] = []
    for text in args.problem:
        problems.append(ConvProblem.parse(text))
    if args.model:
        problems += model_problems(args.model, args.input_shape, dtype=args.dtype,
                                   channels_last=args.channels_last, train=args.train,
                                   math=args.math, deterministic=args.deterministic)
    if not problems:
        raise UsageError(f"nothing to tune: give MODEL with --input-shape, or --problem TEXT "
                         f"({PARSE_HELP})")
    problems = unique(problems)
    if args.limit:
        problems = problems[: args.limit]
    return problems


def _trace_config(path: str | None) -> Any:
    """A `HarnessConfig` tracing to `path` (checked writable now), or None without --trace."""
    if not path:
        return None
    from ..tune.harness import HarnessConfig, file_trace

    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"--trace {path!r}: cannot write there ({exc.strerror})") from None
    return HarnessConfig(trace=file_trace(path))


def start_precompiler(problems: list[ConvProblem], settings: Settings, env: dict[str, str],
                      db: Any, force: bool) -> Any:
    """Compile the Triton kernels of the problems this run will tune ahead, in child processes
    (`tune.precompile`), while it tunes: a CUDA backend only, `settings.precompile` children (-1:
    the machine's CPUs and free GPU memory decide, 0: none). None where there is nothing to do."""
    if env.get("backend") != "cuda" or not settings.triton or settings.precompile == 0:
        return None
    from ..tune.precompile import default_workers, free_gpu_bytes, start_for

    todo = problems if db is None or force else [
        p for p in problems if db.lookup(p, env).status != "hit"]
    try:
        workers = settings.precompile
        if workers < 0:
            free = free_gpu_bytes()
            workers = default_workers(free) if free is not None else min(4, default_workers())
        return start_for(todo, settings, int(env.get("sm_count") or 0), workers)
    except Exception:  # noqa: BLE001 - without it the tuner compiles each kernel itself
        return None


def run(args: argparse.Namespace) -> int:
    from ..progress import Progress
    from ..tune.harness import environment_of, tune_problem
    from ..tune.render import candidate_table, summary_row, summary_table
    from . import emit

    problems = _problems(args)
    if args.budget is not None and args.budget <= 0:
        raise UsageError("--budget must be > 0 seconds")
    from ..tune.harness import HarnessConfig
    from ..tune.hopeless import HopelessMemory

    config = _trace_config(args.trace) or HarnessConfig()
    config.hopeless_memory = HopelessMemory()      # shared by this run's problems
    from ..settings import for_tuning

    settings = for_tuning(current(), args.tuning)
    db = open_db(args)
    be = make_backend(args.backend, isolate=not args.no_isolate, timeout_s=args.timeout,
                      settings=settings)
    notes: list[str] = []
    pre: Any = None
    precompiled: dict[str, Any] = {}
    try:
        env = environment_of(be)
        budget = args.budget if args.budget is not None else (3.0 if be.name == "cpu" else 10.0)
        pre = start_precompiler(problems, settings, env, db, args.force)
        results = []
        with Progress(len(problems), "tuning", enabled=None if not args.json else False) as bar:
            for p in problems:
                bar.update(0, p.short())
                if pre is not None:
                    from ..tune.precompile import PRECOMPILE_WAIT_S

                    pre.wait(p.key(), PRECOMPILE_WAIT_S)
                if db is not None and not args.force:
                    lk = db.lookup(p, env)
                    if lk.status == "stale":
                        diff = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in lk.differences.items())
                        notes.append(f"{p.short()}: stored result is stale ({diff}); tuned again")
                    elif lk.status == "imported":
                        notes.append(f"{p.short()}: the stored result was imported, not measured "
                                     "here; measured here now")
                r = tune_problem(p, backend=be, db=db, budget_s=budget, progress=bar,
                                 reuse=not args.force, config=config, settings=settings)
                results.append(r)
                bar.update(1, p.short())
        peaks_fn = getattr(be, "peaks", None)
        peaks = peaks_fn() if callable(peaks_fn) else None
    finally:
        try:
            if pre is not None:
                precompiled = pre.close().to_dict()
        finally:
            shutdown = getattr(be, "shutdown", None)
            if callable(shutdown):
                shutdown()
            if db is not None:
                db.close()

    notes += result_notes(results)
    if precompiled.get("tasks"):
        notes.append(f"{precompiled['compiled']} of {precompiled['tasks']} Triton kernels compiled "
                     f"ahead in {precompiled['workers']} processes")
    rows = [summary_row(r, peaks) for r in results]
    payload = {"kind": "tune", "backend": env.get("backend"), "env": env,
               "db": None if db is None else str(db.path), "peaks": peaks, "rows": rows,
               "results": [r.to_dict(with_samples=False) for r in results], "notes": notes,
               "precompile": precompiled}
    lines = [f"backend: {env.get('backend')}  ({', '.join(f'{k}={v}' for k, v in env.items() if k != 'backend')})"]
    if db is not None:
        lines.append(f"database: {db.path}")
    lines += ["", summary_table(results, peaks)]
    if args.detail:
        for r in results:
            lines += ["", r.problem.key(), candidate_table(r)]
    if notes:
        lines += [""] + [f"note: {n}" for n in notes]
    emit(args, payload, "\n".join(lines))
    sys.stdout.flush()
    bad = any(r.winner is None for r in results) or any(
        s.status == "disqualified" for r in results for s in r.candidates)
    return 1 if bad else 0


def result_notes(results: list[TuneResult]) -> list[str]:
    """What a user should know about each `TuneResult`: a slowed-down device, a short list, no
    winner, the listing's advice (`listing_notes`), disqualified candidates."""
    notes: list[str] = []
    for r in results:
        if r.degraded:
            notes.append(f"{r.problem.short()}: the device was slowed down (GPU clock throttling, "
                         "or other processes taking the CPU) and did not recover: nothing chosen, "
                         "nothing stored; tune again when it is idle (CPU: "
                         "CONVDOCTOR_CPU_MIN_SHARE=0 measures anyway)")
        elif r.short_list:
            notes.append(f"{r.problem.short()}: " + "; ".join(r.notes))
        elif r.winner is None:
            why = [n for n in r.notes if "tuning database" not in n]
            notes.append(f"{r.problem.short()}: " + ("; ".join(why) if why else
                                                     "no candidate ran correctly"))
        if "loaded from the tuning database" not in r.notes:  # a stored record's advice is old
            notes += [f"{r.problem.short()}: {n}" for n in listing_notes(r.listing)]
        for s in r.candidates:
            if s.status == "disqualified":
                notes.append(f"{r.problem.short()}: {s.candidate.key} disqualified: {s.reason}")
    return notes


def listing_notes(listing: dict[str, Any]) -> list[str]:
    """What a user should know from the backend's listing record (`TuneResult.listing`): cuDNN
    listed no plan for the problem, or the knob refinement stopped at its time budget."""
    out: list[str] = []
    if listing.get("error"):
        out.append(f"cuDNN listed no plan ({listing['error']}); only PyTorch's paths were tuned")
    walk = listing.get("refinement") or {}
    if walk.get("budget_spent"):
        out.append(f"the knob refinement stopped at its time budget after {walk.get('seconds')} s "
                   f"({walk.get('built')} new plans built); CONVDOCTOR_CUDNN_REFINE_BUDGET_S "
                   "raises it")
    return out
