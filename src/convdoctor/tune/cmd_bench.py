"""`convdoctor bench SUITE`: PyTorch heuristics vs PyTorch benchmark=True vs convdoctor, in one run.

Every arm runs in fresh worker processes and every time is measured by the same harness (warm-up,
round-robin, median with CI), so the ratios compare choices, not timing methods:
- PyTorch: `--pytorch-runs` fresh processes; in each, the heuristic path and the benchmark=True
  choice (on the CPU: PyTorch's default path, and the pick of a one-sample screen over the CPU
  candidates, which is what benchmark=True does) are timed.
- convdoctor: `--tune-runs` fresh processes, each tuning every problem from scratch (no database),
  to measure speed, stability (do two runs choose within 3%?) and tuning cost.
- referee: one more fresh process times every path chosen above side by side (round-robin, paired
  rounds); the speed ratios and the stability come from it, never from times taken in different
  processes (on a shared machine those differ by more than the effects measured).
  On the GPU, PyTorch's heuristic path must run in a child process of the referee (PyTorch's cuDNN
  choice cache ignores the benchmark flag), so each winner is timed there too (`twin:<key>`):
  "vs heuristic" is the ratio inside the child, "vs benchmark" the ratio inside the referee's own
  process. Session 7 (H100): the same 7-11 us fp16 kernel read 3-5% slower in the referee's process
  than in its child, which alone had made three 1x1 layers look "> 2% slower" than PyTorch.
  `--referees N` (default 3) runs N such processes; a row's ratios are the median over them of
  each process's own ratio. Session 27 (H100, fp32 forward): the pass's two "> 2% slower" rows
  were one process each - the referee's benchmark=True picked a 19.5 us kernel where both
  benchmark=True arms ran 20.4 us, and the referee read the winner at 160.6 us where its twin in the
  child and both tuning runs read 150 us - so one referee process decided a row on a process-level
  draw. `--referee-only FILE` re-measures a finished result's choices that way.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from ..argtypes import bounded_int, positive_seconds
from ..engines.registry import TWIN_PREFIX, built_by_name
from ..errors import UsageError
from ..problem import ConvProblem
from .backend import Candidate, ClockReading
from .provenance import code_identity
from .result import BASELINE_KEYS, CPU_BASELINE_KEYS

# The PyTorch and referee arms only time paths chosen elsewhere: no knob refinement there (it
# would run cuDNN plans in those processes before PyTorch's paths are timed, and cost time).
MEASURE_ONLY_ENV = {"CONVDOCTOR_CUDNN_REFINE": "0"}
PYTORCH_PATH_KEYS = BASELINE_KEYS + CPU_BASELINE_KEYS   # PyTorch's own paths (GPU, CPU)
OUTSIDE_KEY = "_outside_tolerance"   # the referee's record of paths timed outside the tolerance

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


CONFIGS = {
    "fp32-nchw": ("float32", "nchw", "tf32"),
    "fp32-nchw-strict": ("float32", "nchw", "strict"),
    "fp32-nhwc": ("float32", "nhwc", "tf32"),
    "fp16-nhwc": ("float16", "nhwc", "tf32"),
    "fp16-nchw": ("float16", "nchw", "tf32"),
    "bf16-nhwc": ("bfloat16", "nhwc", "tf32"),
}


def _matching(entries: list[Any], pattern: str, direction: str, dtype: str, layout: str,
              math_mode: str) -> list[Any]:
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--match {pattern!r} is not a valid regular expression: {exc}") from None
    out = [e for e in entries if rx.search(" ".join((e.group, e.name, e.problem(
        direction=direction, dtype=dtype, layout=layout, math=math_mode).key())))]
    if not out:
        raise UsageError(f"--match {pattern!r} selects no problem of the suite")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", nargs="?", default=None,
                   help="a built-in suite name (cnn-layers) or a suite JSON file")
    p.add_argument("--config", default="fp32-nchw", choices=sorted(CONFIGS),
                   help="dtype, layout and math mode applied to the suite (default fp32-nchw, "
                   "TF32 allowed)")
    p.add_argument("--direction", default="fprop", choices=["fprop", "dgrad", "wgrad"])
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--limit", type=bounded_int(1), default=None,
                   help="run N problems spread over the suite (default: all on a GPU, 4 on CPU)")
    p.add_argument("--batch", type=bounded_int(1, 1_000_000), default=None,
                   help="override every problem's batch size (default: the suite's on a GPU, 1 "
                   "on CPU)")
    p.add_argument("--budget", type=positive_seconds(), default=None, metavar="S",
                   help="sampling cap per problem and run (default 5 GPU, 1 CPU)")
    p.add_argument("--pytorch-runs", type=bounded_int(1, 100), default=2, help="fresh PyTorch processes")
    p.add_argument("--tune-runs", type=bounded_int(1, 100), default=2, help="fresh convdoctor processes")
    p.add_argument("--referees", type=bounded_int(1, 100), default=3,
                   help="fresh referee processes timing every chosen path side by side; a row's "
                   "ratios are the median of each process's own ratios (default 3)")
    p.add_argument("--referee-only", default=None, metavar="FILE",
                   help="instead of running the arms: time the PyTorch picks and convdoctor "
                   "winners recorded in the bench result FILE again in --referees fresh referee "
                   "processes (same GPU and software stack), and write the result with the new "
                   "ratios (the old ones kept under each row's first_referee); with --out and "
                   "--resume it continues from FILE.partial like a bench run")
    p.add_argument("--timeout", type=positive_seconds(), default=120.0, metavar="S",
                   help="per call into a worker process; a candidate that hangs longer costs "
                   "only itself (default 120)")
    p.add_argument("--match", default=None, metavar="REGEX",
                   help="only problems whose 'group name key' matches REGEX (Python re.search), "
                        "e.g. 'r=1 s=1 \\S+ pad_pre=0,0 pad_post=0,0 .*groups=1' (2D 1x1 layers); applied before --shard")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="run only the K-th of N contiguous parts of the (spread) problem list, "
                   "so a long suite can run as several shorter jobs; join them with --merge")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="also write the JSON result to FILE (written when the run ends)")
    p.add_argument("--resume", action="store_true",
                   help="with --out FILE: continue an interrupted run from FILE.partial (written "
                   "after every problem: the PyTorch and convdoctor processes already finished, "
                   "and the finished problems of the one it stopped in, are not run again; the "
                   "file must come from the same problems, settings, machine and "
                   "convdoctor code)")
    p.add_argument("--merge", nargs="+", default=None, metavar="FILE",
                   help="instead of running: join the JSON results of several bench runs (shards "
                   "of one suite and configuration, measured on one machine and software "
                   "stack) and summarize them as one; a problem in several files counts once, "
                   "from the first; each row names its file and the code that measured it")
    p.add_argument("--report", default=None, metavar="FILE.html",
                   help="also write the result's HTML page (see convdoctor report)")


class _Restricted:
    """A backend that offers only some candidates (the PyTorch arm times just PyTorch's paths)."""

    def __init__(self, inner: Any, keys: set[str]) -> None:
        self.inner = inner
        self.keys = keys
        self.name = inner.name

    def environment(self) -> dict[str, str]:
        return dict(self.inner.environment())

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        return self._restrict(self.inner.candidates(problem))

    def lean_candidates(self, problem: ConvProblem) -> list[Candidate]:
        """The same restriction over the inner backend's short list (the harness's fallback when
        the full listing failed); plans missing from it are built by name as above."""
        lean = getattr(self.inner, "lean_candidates", None)
        if lean is None:
            raise RuntimeError(f"backend {self.name!r} has no short candidate list")
        return self._restrict(lean(problem))

    def _restrict(self, base: list[Candidate]) -> list[Candidate]:
        from dataclasses import replace

        out = [c for c in base if c.key in self.keys]
        by = {c.key: c for c in base}
        # A cuDNN plan chosen by a tuning run need not be in this process's listing (knob
        # refinement picks its neighbours from quick timings, which differ run to run): it is
        # offered by name, and its runner builds it by name.
        for k in sorted(self.keys):
            if k in by or k.startswith(TWIN_PREFIX) or not built_by_name(k):
                continue
            by[k] = Candidate(k, self.name, 0, False, ("not in this process's listing: built by "
                                                       "its name",))
            out.append(by[k])
        # "twin:<key>": <key> again, in the process of PyTorch's heuristic path (GPU backend)
        for k in sorted(self.keys):
            inner = k[len(TWIN_PREFIX):]
            if k.startswith(TWIN_PREFIX) and (inner in by or built_by_name(inner)):
                c = by.get(inner) or Candidate(inner, self.name, 0, False,
                                               ("not in this process's listing: built by its "
                                                "name",))
                out.append(replace(c, key=k))
        return out

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> Any:
        return self.inner.prepare(problem, candidate)

    def clock(self) -> ClockReading | None:
        return self.inner.clock()


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _pytorch_arm(problems: list[ConvProblem], spec: str, budget: float, timeout: float,
                 bar: Any, fresh: Any = None, done: dict[str, Any] | None = None,
                 on_problem: ArmCheckpoint | None = None) -> dict[str, Any]:
    """One fresh process: PyTorch's heuristic and benchmark=True choices, timed by the harness.
    `done`: this arm's results restored from an interrupted run (those problems are skipped);
    `on_problem` gets the arm's results so far after each problem."""
    from .harness import Harness, HarnessConfig, one_sample_select
    from .worker import WorkerBackend

    out: dict[str, Any] = dict(done or {})
    with fresh if fresh is not None else WorkerBackend(spec, timeout_s=timeout,
                                                       env=MEASURE_ONLY_ENV) as be:
        cpu = be.name == "cpu"
        env = be.environment()
        for p in problems:
            if p.key() in out:
                bar.update(1, "pytorch " + p.short() + " (resumed)")
                continue
            t0 = time.monotonic()
            if cpu:
                pick = one_sample_select(p, be)       # what benchmark=True does, on CPU paths
                bench_key = pick.key if pick else None
                keys = {"cpu:mkldnn-on"} | ({bench_key} if bench_key else set())
            else:
                bench_key = "torch:benchmark"
                keys = {"torch:heuristic", "torch:benchmark"}
            select_s = time.monotonic() - t0
            # PyTorch's paths are timed even where they miss our tolerance (what users get)
            cfg = HarnessConfig(budget_s=budget, keep_keys=tuple(keys),
                                time_outside_tolerance=tuple(keys))
            r = Harness(_Restricted(be, keys), cfg).run(p, env)
            heur = r.stats_for("cpu:mkldnn-on" if cpu else "torch:heuristic")
            bench = r.stats_for(bench_key) if bench_key else None
            out[p.key()] = {
                "heuristic_s": heur.median_s if heur and heur.status == "ok" else None,
                "benchmark_s": bench.median_s if bench and bench.status == "ok" else None,
                "outside_tolerance": outside_tolerance(r),
                "benchmark_pick": bench_key if cpu else "torch:benchmark",
                # GPU: benchmark=True searches when the path is built or on its first call
                # (prepare + first run); CPU: the one-sample screen.
                "benchmark_cost_s": select_s if cpu else (
                    (bench.prepare_s or 0.0) + (bench.first_run_s or 0.0) if bench else None),
            }
            if on_problem is not None:
                on_problem(out)
            bar.update(1, "pytorch " + p.short())
    return out


def _tune_arm(problems: list[ConvProblem], spec: str, budget: float, timeout: float,
              bar: Any, done: dict[str, Any] | None = None,
              on_problem: ArmCheckpoint | None = None) -> dict[str, Any]:
    """One fresh process tunes every problem (`done`, `on_problem`: as for `_pytorch_arm`;
    `_process_s` adds up the processes an interrupted arm ran in)."""
    from .harness import tune_problem
    from .worker import WorkerBackend

    out: dict[str, Any] = dict(done or {})
    before = float(out.get("_process_s") or 0.0)
    with WorkerBackend(spec, timeout_s=timeout) as be:
        t_start = time.monotonic()
        for p in problems:
            if p.key() in out:
                bar.update(1, "tune " + p.short() + " (resumed)")
                continue
            r = tune_problem(p, backend=be, db=None, budget_s=budget, progress=bar, reuse=False)
            measured = {s.candidate.key: s.median_s for s in r.candidates
                        if s.status == "ok" and s.median_s}
            out[p.key()] = {"winner": r.winner.key if r.winner else None,
                            "tuned_s": r.winner_time_s, "tuning_s": r.tuning_s,
                            "degraded": r.degraded, "short_list": r.short_list,
                            "listing": dict(r.listing), "costliest": costliest(r),
                            "measured": measured,
                            "notes": list(r.notes), "failures": failure_summary(r),
                            "candidates": candidate_digest(r)}
            out["_process_s"] = before + time.monotonic() - t_start
            if on_problem is not None:
                on_problem(out)
            bar.update(1, "tune " + p.short())
        out["_process_s"] = before + time.monotonic() - t_start
    return out


def outside_tolerance(result: Any) -> dict[str, float]:
    """{key: norm-wise error} of the candidates timed although their check failed on the
    tolerance (`HarnessConfig.time_outside_tolerance`)."""
    return {s.candidate.key: s.correctness.max_rel_err for s in result.candidates
            if s.status == "ok" and s.correctness is not None and not s.correctness.ok}


def _worst_errors(dicts: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = max(out.get(k, v), v)
    return out


def failure_summary(result: Any, limit: int = 5) -> list[str]:
    """The most common reasons candidates failed or were disqualified ("3 x failed: ..."), so a
    bench row with no winner says why."""
    counts: dict[str, int] = {}
    for s in result.candidates:
        if s.status in ("failed", "disqualified"):
            why = f"{s.status}: {' '.join((s.reason or '').split())[:160]}"
            counts[why] = counts.get(why, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
    return [f"{n} x {why}" for why, n in top]


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


def slower_lines(rows: list[dict[str, Any]], limit: float = 0.02) -> list[str]:
    """One line per row slower than the faster PyTorch path by more than `limit`: per tuning run,
    the winner's and PyTorch's faster path's medians inside that run (`tune_candidates`). Whether
    the run itself measured the winner faster (the referee's process disagrees: placement, process)
    or measured PyTorch's path faster and still chose the winner (a tie, or the placement ranking)
    tells two causes apart. Session 16 (H100, fp32): both rows of this kind were diagnosed by hand
    from these fields."""
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
        line = f"slower than PyTorch on {r['problem']}: {vb:.3f}x; " + "; ".join(runs)
        # session 19 (H100, fp32 wgrad Mixed_5b.branch3x3dbl_3, 0.920x): both runs chose the
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


def costliest(result: Any, n: int = 5) -> list[list[Any]]:
    """[key, status, host seconds] of the `n` candidates the harness spent most time on
    (`CandidateStats.cost_s`). Session 15 (H100, fp16 depthwise layers): tuning took 40-50 s per
    run, ~25 s of it after the last listed candidate's first run, and which candidates cost it
    could not be told from the row."""
    top = sorted(result.candidates, key=lambda s: -s.cost_s)[:n]
    return [[s.candidate.key, s.status, round(s.cost_s, 3)] for s in top if s.cost_s > 0]


def candidate_digest(result: Any, fastest: int = 8, screened: int = 3) -> list[list[Any]]:
    """[key, status, median us, reason] for the `fastest` measured candidates, the `screened`
    fastest screened-out ones (median of their screen samples; session 13: a plan that won one
    tuning run of wav2vec2 pos_conv was absent from the other run's digest, and whether the
    screen had dropped it could not be told afterwards), and every candidate that was neither
    measured nor screened out (failed, disqualified, unsupported): enough to see afterwards why a
    candidate did not win, without every sample."""
    def row(s: Any) -> list[Any]:
        med = round(s.median_s * 1e6, 2) if s.median_s else None
        return [s.candidate.key, s.status, med, " ".join((s.reason or "").split())[:120]]

    def fastest_of(status: str, n: int) -> list[Any]:
        return sorted((s for s in result.candidates if s.status == status and s.median_s),
                      key=lambda s: s.median_s)[:n]

    other = [s for s in result.candidates if s.status not in ("ok", "screened-out")]
    return [row(s) for s in fastest_of("ok", fastest) + fastest_of("screened-out", screened)
            + other]


def _referee_arm(problems: list[ConvProblem], keys_for: dict[str, list[str]], spec: str,
                 budget: float, timeout: float, bar: Any, done: dict[str, Any] | None = None,
                 on_problem: ArmCheckpoint | None = None,
                 pytorch_for: dict[str, set[str]] | None = None) -> dict[str, dict[str, Any]]:
    """One more fresh process times every path chosen above side by side (round-robin, paired
    rounds), so the ratios do not mix measurements from different processes (`done`,
    `on_problem`: as for `_pytorch_arm`). `pytorch_for`: per problem, PyTorch's paths (its default
    path and benchmark=True's picks), timed even where they miss our tolerance; what missed is
    kept under the reserved key OUTSIDE_KEY ({problem key: {key: error}})."""
    from .harness import Harness, HarnessConfig
    from .worker import WorkerBackend

    # values: {key: seconds} per problem, and {problem key: {key: error}} under OUTSIDE_KEY
    out: dict[str, dict[str, Any]] = dict(done or {})
    with WorkerBackend(spec, timeout_s=timeout, env=MEASURE_ONLY_ENV) as be:
        env = be.environment()
        for p in problems:
            if p.key() in out:
                bar.update(1, "referee " + p.short() + " (resumed)")
                continue
            keys = set(keys_for.get(p.key(), []))
            # PyTorch's paths are timed even where they miss our tolerance (as in the PyTorch arms)
            relaxed = (pytorch_for or {}).get(p.key(), set(PYTORCH_PATH_KEYS)) & keys
            cfg = HarnessConfig(budget_s=budget, keep_keys=tuple(keys), max_finalists=len(keys),
                                time_outside_tolerance=tuple(sorted(relaxed)))
            r = Harness(_Restricted(be, keys), cfg).run(p, env)
            out[p.key()] = {s.candidate.key: s.median_s for s in r.candidates
                            if s.status == "ok" and s.median_s}
            missed = outside_tolerance(r)
            if missed:
                out.setdefault(OUTSIDE_KEY, {})[p.key()] = missed
            if on_problem is not None:
                on_problem(out)
            bar.update(1, "referee " + p.short())
    return out


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard must look like K/N (e.g. 2/4), not {text!r}") from None
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"--shard {text}: need 1 <= K <= N")
    return k, n


def shard_of(items: list[Any], shard: tuple[int, int] | None) -> list[Any]:
    """The K-th of N contiguous, nearly equal parts (every item is in exactly one part)."""
    if shard is None:
        return items
    k, n = shard
    lo = (k - 1) * len(items) // n
    hi = k * len(items) // n
    return items[lo:hi]


def run(args: argparse.Namespace) -> int:
    if args.report:  # a page that could not be written is refused before the run
        from ..htmlreport import check_report_path
        check_report_path(args.report)
    if args.merge:
        return _merge(args)
    if args.referee_only:
        return _referee_only(args)
    if args.suite is None:
        raise UsageError("bench needs a SUITE (e.g. cnn-layers), or --merge FILE...")
    return _bench(args)


def _bench(args: argparse.Namespace) -> int:
    from ..progress import Progress
    from .suites import load_suite
    from .worker import WorkerBackend

    suite = load_suite(args.suite)
    shard = parse_shard(args.shard)
    dtype, layout, math_mode = CONFIGS[args.config]
    if args.pytorch_runs < 1 or args.tune_runs < 1 or args.referees < 1:
        raise UsageError("--pytorch-runs, --tune-runs and --referees must be >= 1")
    if args.resume and not args.out:
        raise UsageError("--resume needs --out FILE (the run's state is FILE.partial)")
    # The first worker tells us the backend; it then serves (still fresh) as the first PyTorch arm.
    first = WorkerBackend(args.backend, timeout_s=args.timeout, env=MEASURE_ONLY_ENV)
    backend_name = first.name
    env = first.environment()
    arm_s: dict[str, list[float]] = {"pytorch": [], "tune": [], "referee": []}
    try:
        cpu = backend_name == "cpu"
        limit = args.limit if args.limit is not None else (4 if cpu else None)
        batch = args.batch if args.batch is not None else (1 if cpu else None)
        budget = args.budget if args.budget is not None else (1.0 if cpu else 5.0)
        if limit is not None and limit < 1:
            raise UsageError("--limit must be >= 1")
        entries = suite.spread(limit)
        if args.match:
            entries = _matching(entries, args.match, args.direction, dtype, layout, math_mode)
        entries = shard_of(entries, shard)
        if not entries:
            raise UsageError(f"shard {args.shard} of {suite.name} has no problems")
        problems = [e.problem(direction=args.direction, dtype=dtype, layout=layout, math=math_mode,
                              batch=batch) for e in entries]
        spec = backend_name
        # the code that measures, taken before anything runs; its source hash is part of the
        # run's signature, so a stopped run is never resumed by other code (session 24 had to
        # remember not to resume a shard of code it had changed since)
        code = code_identity()
        sig = {"suite": suite.name, "config": args.config, "direction": args.direction,
               "backend": backend_name, "env": env, "budget_s": budget,
               "problems": [p.key() for p in problems], "source": code["source"]}
        partial = (args.out + ".partial") if args.out else None
        torch_runs: list[dict[str, Any]] = []
        tune_runs: list[dict[str, Any]] = []
        referee_runs: list[dict[str, Any]] = []
        # the arm that was running when the run stopped: its kind, finished problems, wall so far
        current: dict[str, Any] | None = None
        # wall seconds of the stopped runs this one continues (session 17: a merged pass whose
        # shards were resumed reported 1,252 s of bench wall where its arms had taken 1,794 s)
        wall_before = 0.0
        t0 = time.monotonic()
        if args.resume:
            assert partial is not None
            done = load_partial(partial, sig)
            torch_runs = done["torch_runs"][: args.pytorch_runs]
            tune_runs = done["tune_runs"][: args.tune_runs]
            referee_runs = done["referee_runs"][: args.referees]
            for k in arm_s:
                arm_s[k] = list(done.get("arm_wall_s", {}).get(k, []))
            current = done.get("current")
            wall_before = resumed_wall(done)
        left_arms = (args.pytorch_runs - len(torch_runs)) + (args.tune_runs - len(tune_runs))
        total = len(problems) * (left_arms + args.referees - len(referee_runs))

        def checkpoint(arm: dict[str, Any] | None = None) -> None:
            if partial is not None:
                save_partial(partial, {"signature": sig, "torch_runs": torch_runs,
                                       "tune_runs": tune_runs, "referee_runs": referee_runs,
                                       "arm_wall_s": arm_s,
                                       "current": arm,
                                       "wall_s_before": wall_before + time.monotonic() - t0})

        arms = ArmResume(current, checkpoint)

        # --json --out (batch jobs): a plain line per step on stderr, so a log shows how far a
        # run that was stopped got; --json alone keeps stderr quiet
        log_lines = bool(args.json and args.out)
        with Progress(total, "bench", enabled=True if log_lines else (None if not args.json
                                                                       else False),
                      lines=log_lines) as bar:
            for i in range(len(torch_runs), args.pytorch_runs):
                prior, wall, save = arms.start("pytorch")
                torch_runs.append(_pytorch_arm(problems, spec, budget, args.timeout, bar,
                                               fresh=first if i == 0 else None, done=prior,
                                               on_problem=save))
                arm_s["pytorch"].append(wall())
                checkpoint()
            for _ in range(len(tune_runs), args.tune_runs):
                prior, wall, save = arms.start("tune")
                tune_runs.append(_tune_arm(problems, spec, budget, args.timeout, bar,
                                           done=prior, on_problem=save))
                arm_s["tune"].append(wall())
                checkpoint()
            heur_key = heuristic_key(cpu)
            keys_for: dict[str, list[str]] = {}
            pytorch_for: dict[str, set[str]] = {}
            for p in problems:
                k = p.key()
                keys_for[k], pytorch_for[k] = referee_keys(
                    heur_key, [r[k]["benchmark_pick"] for r in torch_runs],
                    [r[k]["winner"] for r in tune_runs], cpu)
            for _ in range(len(referee_runs), args.referees):
                prior, wall, save = arms.start("referee")
                referee_runs.append(_referee_arm(problems, keys_for, spec, budget, args.timeout,
                                                 bar, done=prior, on_problem=save,
                                                 pytorch_for=pytorch_for))
                arm_s["referee"].append(wall())
                checkpoint()
    finally:
        first.shutdown()
    wall_s = time.monotonic() - t0

    rows: list[dict[str, Any]] = []
    for e, p in zip(entries, problems, strict=True):
        k = p.key()
        heur = [r[k]["heuristic_s"] for r in torch_runs if r[k]["heuristic_s"]]
        bench = [r[k]["benchmark_s"] for r in torch_runs if r[k]["benchmark_s"]]
        winners = [r[k]["winner"] for r in tune_runs]
        picks = [r[k]["benchmark_pick"] for r in torch_runs]
        rf = referee_fields([ref.get(k, {}) for ref in referee_runs], heur_key, winners, picks)
        # Do fresh benchmark=True processes choose alike? CPU: the picks timed side by side by
        # the referee; GPU (the pick is inside cuDNN): each process's own timing of its pick.
        bench_spread = spread(picks_times(rf["referee_s"], picks) if cpu else bench)
        # PyTorch's default path in every process that timed it (PyTorch arms, tuning runs, the
        # referee): on the GPU its cuDNN engine is picked per process, and session 8 saw it run
        # a 19-20% slower kernel in one process than in the others
        heur_spread = spread(heur + [r[k]["measured"][heur_key] for r in tune_runs
                                     if r[k].get("measured", {}).get(heur_key)]
                             + [x[heur_key] for x in rf["referee_runs_s"] if x.get(heur_key)])
        rows.append({
            "group": e.group, "name": e.name, "problem": p.short(), "problem_key": k,
            **{f: rf[f] for f in ("heuristic_s", "benchmark_s", "tuned_s", "referee_s")},
            "benchmark_picks": picks, "winners": winners,
            "arm_heuristic_s": heur, "arm_benchmark_s": bench,
            "arm_tuned_s": [r[k]["tuned_s"] for r in tune_runs],
            **{f: rf[f] for f in REFEREE_ROW_FIELDS[4:]},
            "benchmark_spread": bench_spread,
            "heuristic_process_spread": heur_spread,
            "tuning_s": [r[k]["tuning_s"] for r in tune_runs],
            # PyTorch's paths timed above although they miss our tolerance: {key: worst error}
            "pytorch_outside_tolerance": _worst_errors(
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
        })

    summary = summarize(rows)
    # the whole bench's wall: this process's and that of the stopped runs it resumed
    summary["wall_s"] = wall_before + wall_s
    summary["wall_s_this_process"] = wall_s
    summary["resumed_arms"] = (args.pytorch_runs + args.tune_runs) - left_arms
    # problems of an arm the run had stopped in, not run again
    summary["resumed_problems"] = arms.resumed_problems
    summary["tuning_s_total_per_run"] = [r.get("_process_s") for r in tune_runs]
    summary["arm_wall_s"] = arm_s
    payload = {"kind": "bench", "suite": suite.name, "config": args.config,
               "direction": args.direction, "backend": backend_name, "env": env,
               "code": code,
               "batch_override": batch, "budget_s": budget, "pytorch_runs": args.pytorch_runs,
               "tune_runs": args.tune_runs, "referees": args.referees, "shard": args.shard,
               "match": args.match, "summary": summary,
               "rows": rows}
    rc = _emit(args, payload)
    if partial is not None and os.path.exists(partial):
        os.remove(partial)  # the result is written: nothing left to resume
    return rc


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
        theirs = state.get("signature") or {}
        diff = sorted(k for k in set(signature) | set(theirs)
                      if signature.get(k) != theirs.get(k))
        if diff == ["source"]:
            raise UsageError(
                f"{path} was written by other convdoctor code (source "
                f"{theirs.get('source') or 'not recorded'}, now {signature.get('source')}): "
                "resuming would mix two versions' figures in one result; remove it to run the "
                "part again, or resume with the code that wrote it")
        raise UsageError(f"{path} belongs to another run (differs in: {', '.join(diff)}); remove "
                         "it, or run without --resume")
    cur = state.get("current")
    return {"torch_runs": torch_runs, "tune_runs": tune_runs, "referee_runs": referee_runs,
            "arm_wall_s": state.get("arm_wall_s", {}),
            "wall_s_before": state.get("wall_s_before"),
            "current": cur if isinstance(cur, dict) and isinstance(cur.get("done"), dict) else None}


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


def referee_ratios(ref: dict[str, float], heur_key: str, winners: list[str | None],
                   picks: list[str | None]) -> dict[str, Any]:
    """A row's times and ratios from the referee's medians `ref` (key -> seconds).

    h: PyTorch's heuristic path; b: the median of the benchmark=True picks' times; t: the first
    run's winner; th: that winner in the heuristic's process (`twin:`; t when not timed there).
    vs_h = h / th and vs_b = b / t are each measured inside one process; vs_best is the smaller.
    """
    h = ref.get(heur_key)
    bt = [ref[x] for x in picks if x and x in ref]
    b = statistics.median(bt) if bt else None
    w = winners[0] if winners else None
    t = ref.get(w) if w else None
    th = ref.get(TWIN_PREFIX + w, t) if w and w != heur_key else t
    vs_h = (h / th) if h and th else None
    vs_b = (b / t) if b and t else None
    vs = [x for x in (vs_h, vs_b) if x]
    return {"h": h, "b": b, "t": t, "th": th, "bt": bt, "vs_h": vs_h, "vs_b": vs_b,
            "vs_best": min(vs) if vs else None}


def heuristic_key(cpu: bool) -> str:
    """PyTorch's default path's candidate key on the CPU or the GPU."""
    return "cpu:mkldnn-on" if cpu else "torch:heuristic"


def referee_keys(heur_key: str, picks: list[str | None], winners: list[str | None],
                 cpu: bool) -> tuple[list[str], set[str]]:
    """What a referee times for one problem - PyTorch's default path, benchmark=True's picks and
    the tuning runs' winners (on the GPU also each winner's `twin:` in the heuristic's child) -
    and which of those are PyTorch's own paths (timed even outside our tolerance)."""
    wins = [w for w in winners if w]
    ks = [heur_key] + [x for x in picks if x] + wins
    if not cpu:
        # PyTorch's heuristic path runs in a child process (its cuDNN choice cache would
        # otherwise hold benchmark=True's pick); the winners are timed there too, so "vs
        # heuristic" compares within one process
        ks += [TWIN_PREFIX + w for w in wins if w != heur_key]
    # on the CPU the pick is a candidate key such as cpu:mkldnn-off+nhwc
    return sorted(set(ks)), {heur_key} | {x for x in picks if x}


# a row's fields set from its referee processes (`referee_fields`)
REFEREE_ROW_FIELDS = ("heuristic_s", "benchmark_s", "tuned_s", "referee_s",
                      "tuned_in_heuristic_process_s", "speedup_vs_heuristic",
                      "speedup_vs_benchmark", "speedup_vs_best", "stability", "referee_runs_s",
                      "referee_ratios")


def _median(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def referee_fields(refs: list[dict[str, float]], heur_key: str, winners: list[str | None],
                   picks: list[str | None]) -> dict[str, Any]:
    """A row's referee figures from several referee processes' medians (`refs`, key -> seconds,
    one dict per process): each process's own ratios (`referee_ratios`), then per ratio the
    median over the processes, so no ratio mixes times from two processes and one process's
    draw (its benchmark=True pick, its memory placement) cannot decide a row alone. The times
    shown (`heuristic_s`, ...) and `referee_s` are per-key medians over the processes; the
    stability is the median of each process's gap between the two runs' winners."""
    per = [referee_ratios(r, heur_key, winners, picks) for r in refs]
    vs_h = _median([x["vs_h"] for x in per])
    vs_b = _median([x["vs_b"] for x in per])
    vs = [x for x in (vs_h, vs_b) if x is not None]
    stab: float | None = None
    if len(winners) >= 2 and winners[0] and winners[-1]:
        w1, w2 = winners[0], winners[-1]
        stab = 0.0 if w1 == w2 else _median(
            [abs(r[w1] - r[w2]) / min(r[w1], r[w2]) for r in refs if w1 in r and w2 in r])
    keys = sorted({k for r in refs for k in r})
    med_s = {k: _median([r.get(k) for r in refs]) for k in keys}
    return {"heuristic_s": _median([x["h"] for x in per]),
            "benchmark_s": _median([x["b"] for x in per]),
            "tuned_s": _median([x["t"] for x in per]),
            "referee_s": {k: v for k, v in med_s.items() if v is not None},
            "tuned_in_heuristic_process_s": _median([x["th"] for x in per]),
            "speedup_vs_heuristic": vs_h, "speedup_vs_benchmark": vs_b,
            # against the faster PyTorch path: the smaller of the two within-process ratios
            "speedup_vs_best": min(vs) if vs else None,
            "stability": stab,
            "referee_runs_s": [dict(r) for r in refs],
            "referee_ratios": [{"vs_heuristic": x["vs_h"], "vs_benchmark": x["vs_b"]}
                               for x in per]}


def picks_times(ref: dict[str, float], picks: list[str | None]) -> list[float]:
    """The referee's times of benchmark=True's picks (the CPU's bench spread)."""
    return [ref[x] for x in picks if x and x in ref]


def spread(xs: list[float]) -> float | None:
    """(max - min) / min of times of one path taken in different processes; None for < 2."""
    xs = [x for x in xs if x]
    return (max(xs) - min(xs)) / min(xs) if len(xs) >= 2 else None


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
        "geomean_speedup_vs_benchmark": _geomean(vs_bench),
        "geomean_speedup_vs_heuristic": _geomean([r["speedup_vs_heuristic"] for r in rows
                                                  if r["speedup_vs_heuristic"]]),
        "geomean_speedup_vs_best_pytorch": _geomean(vs_best),
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
    }


def _merge(args: argparse.Namespace) -> int:
    from .bench_merge import merge_docs

    docs = [load_result(path) for path in args.merge]
    return _emit(args, merge_docs([str(p) for p in args.merge], docs, summarize))


def load_result(path: str) -> Any:
    """A bench result file's JSON; `FILE.json.gz` is read through gzip (the repository keeps old
    sessions' raw results compressed: the working tree that travels to the device is capped)."""
    from ..jsonfile import read_json

    return read_json(path, what="bench result")


def _read_result(path: str) -> dict[str, Any]:
    doc = load_result(path)
    if not isinstance(doc, dict) or doc.get("kind") != "bench" or not isinstance(
            doc.get("rows"), list):
        raise UsageError(f"{path} is not a bench result (written by `convdoctor bench --out`)")
    return doc


def _referee_only(args: argparse.Namespace) -> int:
    """`bench --referee-only FILE`: the choices recorded in FILE (benchmark=True's picks, the
    tuning runs' winners) timed again by `--referees` fresh referee processes, on the same GPU
    and software stack as FILE's; every other field of FILE is kept, the old referee figures
    under each row's `first_referee`."""
    from ..progress import Progress
    from .worker import WorkerBackend

    path = args.referee_only
    doc = _read_result(path)
    if args.referees < 1:
        raise UsageError("--referees must be >= 1")
    rows = doc["rows"]
    backend = doc.get("backend")
    if backend not in ("cpu", "cuda"):
        raise UsageError(f"{path}: unknown backend {backend!r}")
    cpu = backend == "cpu"
    heur_key = heuristic_key(cpu)
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
        keys_for[p.key()], pytorch_for[p.key()] = referee_keys(heur_key, picks, winners, cpu)
    budget = args.budget if args.budget is not None else doc.get("budget_s")
    if not isinstance(budget, (int, float)) or budget <= 0:
        raise UsageError(f"{path} records no sampling budget: pass --budget S")
    be = WorkerBackend(backend, timeout_s=args.timeout, env=MEASURE_ONLY_ENV)
    try:
        env = be.environment()
    finally:
        be.shutdown()
    theirs = doc.get("env") or {}
    diff = sorted(k for k in set(env) | set(theirs) if env.get(k) != theirs.get(k))
    if diff:
        raise UsageError(f"{path} was measured on another machine or software stack (differs "
                         f"in: {', '.join(f'{k} {theirs.get(k)!r} here {env.get(k)!r}' for k in diff)}): "
                         "its choices can only be re-timed where they were made")
    code = code_identity()
    # --resume: FILE.partial holds the finished referee processes and the finished problems of
    # the one that stopped (session 27: the fp16 wgrad pass's third process was cut by a call's
    # deadline at 290 of 303 problems, and nothing came back)
    partial = (args.out + ".partial") if args.out else None
    if args.resume and partial is None:
        raise UsageError("--resume needs --out FILE (the run's state is FILE.partial)")
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

    arms = ArmResume(done.get("current"), checkpoint)
    log_lines = bool(args.json and args.out)
    with Progress(len(problems) * (args.referees - len(refs)), "referee",
                  enabled=True if log_lines else (None if not args.json else False),
                  lines=log_lines) as bar:
        for _ in range(len(refs), args.referees):
            prior, wall, save = arms.start("referee")
            refs.append(_referee_arm(problems, keys_for, backend, float(budget), args.timeout,
                                     bar, done=prior, on_problem=save, pytorch_for=pytorch_for))
            walls.append(wall())
            checkpoint()
    new_rows = []
    for r, p in zip(rows, problems, strict=True):
        k = p.key()
        rf = referee_fields([ref.get(k, {}) for ref in refs], heur_key, r["winners"],
                            r["benchmark_picks"])
        nr = {**r, **rf,
              "first_referee": r.get("first_referee") or {f: r.get(f) for f in
                                                           REFEREE_ROW_FIELDS if f in r}}
        if cpu:
            nr["benchmark_spread"] = spread(picks_times(rf["referee_s"], r["benchmark_picks"]))
        nr["pytorch_outside_tolerance"] = _worst_errors(
            [r.get("pytorch_outside_tolerance") or {}]
            + [(ref.get(OUTSIDE_KEY) or {}).get(k) or {} for ref in refs])
        new_rows.append(nr)
    first = doc.get("summary") or {}
    summary = summarize(new_rows)
    for f in ("wall_s", "wall_s_this_process", "resumed_arms", "resumed_problems",
              "tuning_s_total_per_run", "arm_wall_s"):
        if f in first:
            summary[f] = first[f]
    payload = {**doc, "rows": new_rows, "summary": summary, "referees": args.referees,
               "referee_only": {"from": path, "code": code, "referees": args.referees,
                                "budget_s": budget, "wall_s": time.monotonic() - t0,
                                "arm_wall_s": walls, "first_summary": first}}
    rc = _emit(args, payload)
    if partial is not None and os.path.exists(partial):
        os.remove(partial)  # the result is written: nothing left to resume
    return rc


def _emit(args: argparse.Namespace, payload: dict[str, Any]) -> int:
    from ..cli import emit
    from ..report import dumps
    from .bench_merge import provenance_lines
    from .render import fmt_time, table

    if getattr(args, "out", None):
        try:
            with open(args.out, "w", encoding="utf-8") as fh:
                fh.write(dumps(payload))
        except OSError as exc:
            raise UsageError(f"cannot write --out {args.out}: {exc}") from None
    cpu = payload["backend"] == "cpu"
    rows, s = payload["rows"], payload["summary"]
    hl = "PyTorch default" if cpu else "heuristic"
    bl = "one-sample pick" if cpu else "benchmark=True"
    trows = []
    for r in rows:
        sp = r["speedup_vs_best"]
        st = r["stability"]
        trows.append([r["problem"], fmt_time(r["heuristic_s"]), fmt_time(r["benchmark_s"]),
                      fmt_time(r["tuned_s"]), "-" if sp is None else f"{sp:.2f}x",
                      "-" if st is None else f"{st * 100:.1f}%", (r["winners"][0] or "-")])

    def f(x: Any, pat: str = "{:.3f}") -> str:
        return "-" if x is None else pat.format(x)

    batch = payload.get("batch_override")
    where = f" (shard {payload['shard']})" if payload.get("shard") else (
        f" (merged from {len(payload['merged_from'])} runs)" if payload.get("merged_from") else "")
    lines = [f"suite {payload['suite']}{where}: {len(rows)} problems, {payload['direction']} "
             f"{payload['config']}, backend {payload['backend']}"
             + (f", batch {batch}" if batch else "") +
             f"; {payload['pytorch_runs']} PyTorch and {payload['tune_runs']} convdoctor fresh "
             "processes" + (f", {payload['referees']} referee processes (the median of their "
                            "ratios)" if payload.get("referees", 1) > 1 else ""),
             "", table(trows, ["problem", hl, bl, "convdoctor", "vs best PyTorch", "run-to-run",
                              "chosen"]), "",
             # 4 decimals: session 16's fp32 pass read 1.080x against the 1.08 target at 1.0799
             f"geomean speedup: {f(s['geomean_speedup_vs_benchmark'], '{:.4f}')}x vs {bl}, "
             f"{f(s['geomean_speedup_vs_heuristic'])}x vs {hl}, "
             f"{f(s['geomean_speedup_vs_best_pytorch'])}x vs the faster of the two",
             f"problems >= 1.10x vs {bl}: {f(s['share_at_1_10x_vs_benchmark'], '{:.0%}')} "
             f"(vs the faster of the two: "
             f"{f(s.get('share_at_1_10x_vs_best_pytorch'), '{:.0%}')}); "
             f"slower than the best PyTorch path by > 2%: "
             f"{s['slower_than_best_pytorch_by_2pct']} (worst "
             f"{f(s['worst_vs_best_pytorch'])}x)",
             f"stability: convdoctor runs within 3% on {f(s['stable_within_3pct'], '{:.0%}')}; "
             f"{bl} runs differ by > 5% on {f(s['benchmark_runs_disagree_over_5pct'], '{:.0%}')}; "
             f"{hl} timed > 5% apart between processes on "
             f"{f(s.get('heuristic_path_differs_over_5pct'), '{:.0%}')}",
             f"cost: convdoctor tuning {f(s['tuning_s_per_problem'], '{:.2f}')} s per problem "
             f"(median; mean {f(s.get('tuning_s_per_problem_mean'), '{:.2f}')} s); "
             f"{bl} {f(s['pytorch_benchmark_cost_s_per_problem'], '{:.4f}')} s; "
             f"wall {s['wall_s']:.1f} s"]
    if s["measured"] < s["problems"]:
        lines.append(f"note: {s['problems'] - s['measured']} of {s['problems']} problems have no "
                     "side-by-side figure (a path failed or was not measured; see --json rows)")
    nb = s.get("measured_vs_benchmark")
    if nb is not None and nb < s["measured"]:
        lines.append(f"note: the figures vs {bl} cover {nb} of {s['measured']} rows (the others "
                     f"have no {bl} time)")
    for r in rows:
        for i, w in enumerate(r["winners"]):
            why = (r.get("tune_notes") or [[]] * len(r["winners"]))[i]
            if w is None:
                lines.append(f"no winner in tuning run {i + 1} for {r['problem']}: "
                             + ("; ".join(why[:3]) or "no reason recorded"))
    lines += slower_lines(rows)
    lines += disagreement_lines(rows)
    lines += provenance_lines(payload)
    ro = payload.get("referee_only")
    if isinstance(ro, dict):
        fs = ro.get("first_summary") or {}
        code = ro.get("code") or {}
        lines.append(
            f"referee only: the choices of {ro.get('from')} re-timed by {ro.get('referees')} fresh "
            f"referee processes (code {code.get('commit') or '?'}, source "
            f"{code.get('source') or '?'}; {ro.get('wall_s', 0.0):.1f} s); its own referee had read "
            f"{f(fs.get('geomean_speedup_vs_benchmark'), '{:.4f}')}x vs {bl}, "
            f"{f(fs.get('share_at_1_10x_vs_benchmark'), '{:.0%}')} >= 1.10x, "
            f"{fs.get('slower_than_best_pytorch_by_2pct', '-')} rows > 2% slower")
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
    emit(args, payload, "\n".join(lines))
    if getattr(args, "report", None):
        from ..htmlreport import report_for_bench
        report_for_bench(args.report, payload)
    return 0
