"""What a caller of `optimize` sees while it runs and when it ends.

`optimize(..., progress=...)`:
- None (default): on a terminal (stderr is a tty) a progress bar of the tuning on stderr (problems
  done, problems left, time left from the mean time per tuned problem so far); otherwise one
  `logging` INFO line per tuned problem (logger "convdoctor") with its time and its winner.
- True: the bar on stderr, terminal or not. False: nothing at all.
- An object with `update(n, note)` (and optionally `close()`): it gets `update(0, problem)` before
  and `update(1, problem)` after each tuned problem, and the tuner's notes; the caller closes it.
At the end one summary line (`summary_line`): on stderr on a terminal (or with progress=True),
else through `logging` at INFO; none with progress=False.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from ..problem import ConvProblem
from ..progress import Progress
from .report import OptimizeReport

log = logging.getLogger("convdoctor")

Clock = Callable[[], float]


def is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:  # noqa: BLE001 - a replaced stream without isatty is not a terminal
        return False


def is_progress_object(progress: Any) -> bool:
    """A caller's progress object: anything with a callable `update` (not a bool or None)."""
    return progress is not None and not isinstance(progress, bool) and \
        callable(getattr(progress, "update", None))


class TuningFeedback(Protocol):
    """What the tuning loop reports to: `start` before a problem, `done` after it (its result
    or None, and the seconds it took), `close` at the end. `progress` is what the tuner itself
    writes its notes to (None: nothing)."""

    progress: Any

    def start(self, problem: ConvProblem) -> None: ...

    def done(self, problem: ConvProblem, result: Any, seconds: float, why: str = "") -> None: ...

    def close(self) -> None: ...


class Silent:
    progress: Any = None

    def start(self, problem: ConvProblem) -> None:
        pass

    def done(self, problem: ConvProblem, result: Any, seconds: float, why: str = "") -> None:
        pass

    def close(self) -> None:
        pass


class CallerProgress(Silent):
    """The caller's own progress object, driven as `update(0, problem)` / `update(1, problem)`."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress

    def start(self, problem: ConvProblem) -> None:
        self.progress.update(0, problem.short())

    def done(self, problem: ConvProblem, result: Any, seconds: float, why: str = "") -> None:
        self.progress.update(1, problem.short())


class Bar(CallerProgress):
    """A progress bar on `stream` with problems done, problems left and time left."""

    def __init__(self, total: int, stream: TextIO, now: Clock) -> None:
        super().__init__(Progress(total, "convdoctor: tuning", enabled=True, stream=stream,
                                  eta=True, now=now))

    def close(self) -> None:
        self.progress.close()


def winner_text(result: Any) -> str:
    """"<winner key> <its tuned time>" of a tuning result ("" without a winner)."""
    w = getattr(result, "winner", None) if result is not None else None
    if w is None:
        return ""
    s = result.stats_for(w.key) if hasattr(result, "stats_for") else None
    t = getattr(s, "median_s", None)
    return w.key + (f" ({t * 1e3:.3f} ms)" if t is not None else "")


class LogLines(Silent):
    """One INFO line per tuned problem on the "convdoctor" logger."""

    def __init__(self, total: int) -> None:
        self.total, self.n = total, 0

    def done(self, problem: ConvProblem, result: Any, seconds: float, why: str = "") -> None:
        self.n += 1
        won = winner_text(result)
        outcome = f"winner {won}" if won else f"no winner ({why or 'no candidate won'}), " \
                                              "PyTorch's path"
        log.info("convdoctor: tuned %d/%d %s in %.1f s: %s", self.n, self.total,
                 problem.short(), seconds, outcome)


def tuning_feedback(progress: Any, total: int, *, stream: TextIO | None = None,
                    now: Clock = time.monotonic) -> TuningFeedback:
    """The feedback `optimize(..., progress=progress)` gives while tuning `total` problems (see
    the module's docstring); `stream`: stderr (read when called)."""
    stream = sys.stderr if stream is None else stream
    if progress is False:
        return Silent()
    if is_progress_object(progress):
        return CallerProgress(progress)
    if progress is True or is_tty(stream):
        return Bar(total, stream, now)
    return LogLines(total)


def _problems_text(r: OptimizeReport) -> str:
    parts = [f"{r.from_db} from the database"]
    if r.tuned or r.tuning_s >= 0.05:
        parts.append(f"{r.tuned} tuned in {r.tuning_s:.1f} s")
    if r.optimize_s >= 0.05:
        parts.append(f"{r.optimize_s:.1f} s in all")
    if r.untuned:
        parts.append(f"{r.untuned} on PyTorch's path")
    if r.left_tiny:
        parts.append(f"{r.left_tiny} too small to tune")
    if r.left_minor:
        parts.append(f"{r.left_minor} not worth tuning")
    noun = "problem" if r.problems == 1 else "problems"
    return f"{r.problems} convolution {noun} ({', '.join(parts)})"


def switches_text(r: OptimizeReport) -> str:
    def on(v: bool) -> str:
        return "on" if v else "off"

    return (f"routing {on(r.routing)}, channels_last {on(r.channels_last)}, "
            f"CUDA graphs {on(r.graphs)}")


def outcome_text(r: OptimizeReport) -> str:
    """What the caller gets, end to end: the measured speedup with its interval, or that the
    model runs as PyTorch runs it, or why nothing was measured."""
    if r.speedup is not None and len(r.speedup_ci) == 2:
        lo, hi = r.speedup_ci
        when = ("measured before for this model and environment (reused)"
                if r.decisions == "reused" else "measured")
        return (f"{when} {r.speedup:.2f}x ({lo:.2f}-{hi:.2f}) over the model as given: "
                f"{switches_text(r)}")
    if not r.changed:
        return (f"{r.speedup_source}: " if r.speedup_source else "") + \
            "optimize leaves the model as PyTorch runs it"
    return f"{r.speedup_source or 'not measured end to end'}: {switches_text(r)}"


def summary_line(r: OptimizeReport) -> str:
    """`convdoctor: 23 convolution problems (5 from the database, 18 tuned in 41.2 s, 63.0 s in
    all); measured 1.32x (1.29-1.35) over the model as given: routing on, channels_last on, CUDA
    graphs off`; with reused decisions "measured before for this model and environment (reused)"."""
    return f"convdoctor: {_problems_text(r)}; {outcome_text(r)}"


def announce(report: OptimizeReport, progress: Any, *, stream: TextIO | None = None) -> None:
    """The summary line where `progress` says (see the module's docstring)."""
    if progress is False:
        return
    stream = sys.stderr if stream is None else stream
    line = summary_line(report)
    if progress is True or is_tty(stream):
        stream.write(line + "\n")
        stream.flush()
    else:
        log.info("%s", line)
