"""What a caller of optimize sees: a progress bar with problems done, left and time left on a
terminal; one logging line per tuned problem elsewhere; nothing with progress=False; the caller's
own progress object as it was; one summary line at the end. Fake terminals and fake clocks."""

from __future__ import annotations

import io
import logging
import sys
from typing import Any

import pytest

from convdoctor.errors import UsageError
from convdoctor.problem import ConvProblem
from convdoctor.progress import Progress, seconds_text
from convdoctor.runtime import feedback as F
from convdoctor.runtime import tuning as T
from convdoctor.runtime.options import OptimizeOptions
from convdoctor.runtime.report import OptimizeReport
from convdoctor.tune.backend import Candidate
from convdoctor.tune.result import CandidateStats, TuneResult


class Tty(io.StringIO):
    """A terminal stand-in: what was written, and isatty() True."""

    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# ---------------------------------------------------------------------- the bar
def test_the_bar_shows_done_left_and_time_left_from_the_mean_time_per_problem() -> None:
    clock, out = Clock(), Tty()
    bar = Progress(4, "convdoctor: tuning", enabled=True, stream=out, eta=True, now=clock)
    bar.update(0, "fprop a")
    assert "0/4 done, 4 left, time left -" in out.getvalue()
    clock.t = 10.0
    bar.update(1, "fprop a")
    assert bar.eta_s() == pytest.approx(30.0)
    clock.t = 30.0
    bar.update(1, "fprop b")       # 2 done in 30 s: 15 s each, 2 left
    last = out.getvalue().split("\r")[-1]
    assert "[###############---------------] 2/4 done, 2 left, time left 30 s" in last
    assert "fprop b" in last
    bar.close()
    assert out.getvalue().endswith("\n")
    assert [seconds_text(s) for s in (41.2, 185, 3720)] == ["41 s", "3 min 05 s", "1 h 02 min"]


# ---------------------------------------------------------------------- which feedback
class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []
        self.closed = False

    def update(self, n: int = 1, note: str = "") -> None:
        self.calls.append((n, note))

    def close(self) -> None:
        self.closed = True


def test_which_feedback_progress_asks_for() -> None:
    plain = io.StringIO()
    assert isinstance(F.tuning_feedback(False, 3, stream=Tty()), F.Silent)
    assert type(F.tuning_feedback(None, 3, stream=Tty())) is F.Bar
    assert type(F.tuning_feedback(None, 3, stream=plain)) is F.LogLines
    assert type(F.tuning_feedback(True, 3, stream=plain)) is F.Bar
    rec = Recorder()
    fb = F.tuning_feedback(rec, 3, stream=Tty())
    assert type(fb) is F.CallerProgress and fb.progress is rec


def test_a_bad_progress_value_is_a_one_line_usage_error() -> None:
    with pytest.raises(UsageError, match="progress must be None, True, False or an object"):
        OptimizeOptions(progress="yes")
    OptimizeOptions(progress=Recorder())


# ---------------------------------------------------------------------- tuning with each
def _result(p: ConvProblem, key: str, ms: float) -> TuneResult:
    c = Candidate(key=key, backend="cpu")
    return TuneResult(problem=p, env={}, backend="cpu", winner=c,
                      candidates=[CandidateStats(candidate=c, samples=[ms * 1e-3] * 5)])


class SlowTuning:
    """Stands in for `tuning.Tuning`: nothing stored; tuning problem i takes `costs[i]` seconds
    of the fake clock and returns `outcomes[i]`."""

    clock: Clock = Clock()
    costs: list[float] = []
    outcomes: list[Any] = []
    seen_progress: list[Any] = []

    def __init__(self) -> None:
        self.available, self.why, self.i = True, "", 0

    @classmethod
    def of(cls, opts: OptimizeOptions) -> SlowTuning:
        return cls()

    def lookup(self, p: ConvProblem) -> Any:
        return None

    def tune(self, p: ConvProblem, progress: Any = None) -> Any:
        self.seen_progress.append(progress)
        self.clock.t += self.costs[self.i]
        out = self.outcomes[self.i]
        self.i += 1
        return out

    def close(self) -> None:
        pass


def _problems() -> dict[str, ConvProblem]:
    # largest first: the order they are tuned in (`runtime.tuning.importance`)
    ps = [ConvProblem.parse(f"fprop n=1 c=8 h={h} w={h} k=8 r=3 s=3 pad=1") for h in (32, 16, 8)]
    return {p.key(): p for p in ps}


def _tune(monkeypatch: Any, progress: Any, stderr: Any) -> tuple[OptimizeReport, Clock]:
    probs = _problems()
    a, b, c = probs.values()
    clock = Clock()
    monkeypatch.setattr(SlowTuning, "clock", clock)
    monkeypatch.setattr(SlowTuning, "costs", [2.0, 4.0, 6.0])
    monkeypatch.setattr(SlowTuning, "outcomes", [
        _result(a, "cpu:mkldnn-on", 0.5),
        TuneResult(problem=b, env={}, backend="cpu", winner=None, candidates=[],
                   notes=["timings not trusted"]),
        _result(c, "cpu:mkldnn-off", 1.25)])
    monkeypatch.setattr(SlowTuning, "seen_progress", [])
    monkeypatch.setattr(T, "Tuning", SlowTuning)
    monkeypatch.setattr(sys, "stderr", stderr)
    report = OptimizeReport(device="cpu", train=False)
    T.find_results(probs, OptimizeOptions(progress=progress), report, clock=clock)
    return report, clock


def test_on_a_terminal_tuning_draws_the_bar(monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO, logger="convdoctor")
    out = Tty()
    report, _ = _tune(monkeypatch, None, out)
    frames = out.getvalue().split("\r")
    assert any("1/3 done, 2 left, time left 4 s" in f for f in frames), frames
    assert any("2/3 done, 1 left, time left 3 s" in f for f in frames), frames
    assert "3/3 done, 0 left" in frames[-1] and out.getvalue().endswith("\n")
    assert all(isinstance(p, Progress) for p in SlowTuning.seen_progress)  # the tuner's notes
    assert not [r for r in caplog.records if r.name == "convdoctor"]
    assert report.tuned == 2 and report.tuning_s == 12.0


def test_elsewhere_tuning_logs_one_line_per_problem(monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO, logger="convdoctor")
    out = io.StringIO()
    _tune(monkeypatch, None, out)
    assert out.getvalue() == ""
    lines = [r.getMessage() for r in caplog.records if r.name == "convdoctor"]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "convdoctor")
    a, b, c = (p.short() for p in _problems().values())
    assert lines == [
        f"convdoctor: tuned 1/3 {a} in 2.0 s: winner cpu:mkldnn-on (0.500 ms)",
        f"convdoctor: tuned 2/3 {b} in 4.0 s: no winner (timings not trusted), PyTorch's path",
        f"convdoctor: tuned 3/3 {c} in 6.0 s: winner cpu:mkldnn-off (1.250 ms)"]
    assert SlowTuning.seen_progress == [None] * 3


def test_progress_false_is_silent(monkeypatch, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    out = Tty()
    report, _ = _tune(monkeypatch, False, out)
    assert out.getvalue() == "" and not caplog.records and report.tuned == 2
    F.announce(report, False, stream=out)
    assert out.getvalue() == "" and not caplog.records


def test_progress_true_draws_the_bar_on_a_pipe_too(monkeypatch) -> None:
    out = io.StringIO()
    _tune(monkeypatch, True, out)
    assert "3/3 done, 0 left" in out.getvalue()


def test_the_callers_progress_object_works_as_before(monkeypatch) -> None:
    rec, out = Recorder(), Tty()
    _tune(monkeypatch, rec, out)
    shorts = [p.short() for p in _problems().values()]
    assert rec.calls == [c for s in shorts for c in ((0, s), (1, s))]
    assert not rec.closed and out.getvalue() == ""   # the caller closes it
    assert SlowTuning.seen_progress == [rec] * 3


# ---------------------------------------------------------------------- the summary line
def _report(**kw: Any) -> OptimizeReport:
    r = OptimizeReport(device="cuda:0", train=True, problems=23, from_db=5, tuned=18,
                       tuning_s=41.23, channels_last=True, routing=True)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_summary_line() -> None:
    r = _report(speedup=1.3214, speedup_ci=[1.2911, 1.3502], speedup_level=0.96)
    assert F.summary_line(r) == (
        "convdoctor: 23 convolution problems (5 from the database, 18 tuned in 41.2 s); "
        "measured 1.32x (1.29-1.35) over the model as given: routing on, channels_last on, "
        "CUDA graphs off")
    r = _report(channels_last=False, routing=False, untuned=2, tuned=16,
                speedup_source="no layout, routing or graph variant was measured faster")
    assert F.summary_line(r) == (
        "convdoctor: 23 convolution problems (5 from the database, 16 tuned in 41.2 s, 2 on "
        "PyTorch's path); no layout, routing or graph variant was measured faster: optimize "
        "leaves the model as PyTorch runs it")


def test_the_summary_goes_to_stderr_on_a_terminal_and_to_logging_elsewhere(caplog) -> None:
    caplog.set_level(logging.INFO, logger="convdoctor")
    r = _report(speedup=1.5, speedup_ci=[1.4, 1.6])
    tty, pipe = Tty(), io.StringIO()
    F.announce(r, None, stream=tty)
    assert tty.getvalue() == F.summary_line(r) + "\n" and not caplog.records
    F.announce(r, True, stream=pipe)
    assert pipe.getvalue() == F.summary_line(r) + "\n"
    pipe = io.StringIO()
    F.announce(r, Recorder(), stream=pipe)
    assert pipe.getvalue() == ""
    assert [(x.levelno, x.getMessage()) for x in caplog.records] == [
        (logging.INFO, F.summary_line(r))]
