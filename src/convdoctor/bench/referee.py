"""The bench's referee: fresh processes that time every chosen path side by side.

A referee process times PyTorch's paths and the tuning runs' winners round-robin, in paired
rounds; the speed ratios and the stability come from it, never from times taken in different
processes (on a shared machine those differ by more than the effects measured).
On the GPU, PyTorch's heuristic path must run in a child process of the referee (PyTorch's cuDNN
choice cache ignores the benchmark flag), so each winner is timed there too (`twin:<key>`):
"vs heuristic" is the ratio inside the child, "vs benchmark" the ratio inside the referee's own
process. On an H100 the same 7-11 us fp16 kernel reads 3-5% slower in the referee's process than
in its child: enough to make three 1x1 layers look "> 2% slower" than PyTorch across processes.
`--referees N` (default 3) runs N such processes; a row's ratios are the median over them of
each process's own ratio, because one process is one draw: in an H100 fp32 forward pass, one
referee's benchmark=True picked a 19.5 us kernel where both benchmark=True arms ran 20.4 us, and
one read a winner at 160.6 us where its twin in the child and both tuning runs read 150 us - two
rows that a single referee would have called "> 2% slower".
"""

from __future__ import annotations

import statistics
from typing import Any

from ..engines.registry import TWIN_PREFIX
from ..problem import ConvProblem
from ..tune.result import BASELINE_KEYS, CPU_BASELINE_KEYS
from .arms import ArmSpec, Restricted, outside_tolerance
from .resume import ArmCheckpoint

PYTORCH_PATH_KEYS = BASELINE_KEYS + CPU_BASELINE_KEYS   # PyTorch's own paths (GPU, CPU)
OUTSIDE_KEY = "_outside_tolerance"   # the referee's record of paths timed outside the tolerance


def referee_arm(problems: list[ConvProblem], keys_for: dict[str, list[str]], spec: ArmSpec,
                bar: Any, done: dict[str, Any] | None = None,
                on_problem: ArmCheckpoint | None = None,
                pytorch_for: dict[str, set[str]] | None = None) -> dict[str, dict[str, Any]]:
    """One more fresh process times every path chosen above side by side (round-robin, paired
    rounds), so the ratios do not mix measurements from different processes (`done`,
    `on_problem`: as for `arms.pytorch_arm`). `pytorch_for`: per problem, PyTorch's paths (its
    default path and benchmark=True's picks), timed even where they miss our tolerance; what missed is
    kept under the reserved key OUTSIDE_KEY ({problem key: {key: error}})."""
    from ..tune.harness import Harness, HarnessConfig

    # values: {key: seconds} per problem, and {problem key: {key: error}} under OUTSIDE_KEY
    out: dict[str, dict[str, Any]] = dict(done or {})
    with spec.measure_worker() as be:
        env = be.environment()
        for p in problems:
            if p.key() in out:
                bar.update(1, "referee " + p.short() + " (resumed)")
                continue
            keys = set(keys_for.get(p.key(), []))
            # PyTorch's paths are timed even where they miss our tolerance (as in the PyTorch arms)
            relaxed = (pytorch_for or {}).get(p.key(), set(PYTORCH_PATH_KEYS)) & keys
            cfg = HarnessConfig(budget_s=spec.budget_s, keep_keys=tuple(keys),
                                max_finalists=len(keys),
                                time_outside_tolerance=tuple(sorted(relaxed)))
            r = Harness(Restricted(be, keys), cfg).run(p, env)
            out[p.key()] = {s.candidate.key: s.median_s for s in r.candidates
                            if s.status == "ok" and s.median_s}
            missed = outside_tolerance(r)
            if missed:
                out.setdefault(OUTSIDE_KEY, {})[p.key()] = missed
            if on_problem is not None:
                on_problem(out)
            bar.update(1, "referee " + p.short())
    return out


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


def worst_errors(dicts: list[dict[str, float]]) -> dict[str, float]:
    """{key: the largest error} over several {key: error} records."""
    out: dict[str, float] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = max(out.get(k, v), v)
    return out
