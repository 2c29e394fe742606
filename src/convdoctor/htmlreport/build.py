"""From what the user named to a written page: read every input, choose peaks, render, write.

`Request` says what to read. With no input at all the page is this machine's diagnosis and the
default tuning database. The roofline of each device takes measured peaks where there are some
(`--peaks`, the peaks in a `tune --json` file, this machine's roofline cache) and the datasheet's
otherwise; the page says which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from .inputs import (
    cached_peaks,
    datasheet_peaks,
    display_name,
    load_bench,
    load_env,
    load_peaks,
    load_tuned,
    peaks_from,
    tuned_from_bench,
)
from .model import BenchDoc, DevicePeaks, EnvDoc, Inputs, OptimizeRun, TunedProblem
from .optdata import load_optimize
from .page import Page, render_page
from .writer import DEFAULT_OUT, write_page


@dataclass(frozen=True)
class Request:
    db: str | None = None
    envs: tuple[str, ...] = ()
    benches: tuple[str, ...] = ()
    optimize: tuple[str, ...] = ()
    peaks: tuple[str, ...] = ()
    title: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.db or self.envs or self.benches or self.optimize)

    def files(self) -> list[str]:
        return [f for f in (self.db, *self.envs, *self.benches, *self.optimize, *self.peaks) if f]


@dataclass
class _Parts:
    envs: list[EnvDoc] = field(default_factory=list)
    tuned: list[TunedProblem] = field(default_factory=list)
    measured: list[DevicePeaks] = field(default_factory=list)
    benches: list[BenchDoc] = field(default_factory=list)
    runs: list[OptimizeRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def this_machine() -> EnvDoc:
    """`convdoctor env` on this machine, without the GPU smoke test."""
    from ..env import diagnose

    return EnvDoc("this machine", diagnose(smoke=False, progress=False).to_dict())


def _read_db(req: Request, parts: _Parts) -> None:
    from ..db import default_path

    path = req.db or str(default_path())
    try:
        tuned, peaks, skipped = load_tuned(path, named=req.db is not None)
    except UsageError as exc:
        if req.db is not None:   # a file the user named: its error is the answer
            raise
        parts.notes.append(f"Tuning: the default database cannot be read: {exc.message}")
        return
    parts.tuned += tuned
    parts.measured += [p for p in (peaks_from(d, f"measured, {display_name(path)}")
                                   for d in peaks) if p is not None]
    parts.sources.append(f"tuning results: {path}")
    if not tuned:
        parts.notes.append(f"Tuning: {path} holds no tuning result.")
    if skipped:
        parts.notes.append(f"Tuning: {skipped} record(s) of {path} could not be read (their "
                           "problem is not valid) and are not shown.")


def choose_peaks(tuned: list[TunedProblem], measured: list[DevicePeaks]
                 ) -> tuple[list[DevicePeaks], list[str]]:
    """Per device: measured peaks where any (the first found), else the datasheet's."""
    out: list[DevicePeaks] = []
    notes: list[str] = []
    sheet = datasheet_peaks()
    for dev in sorted({t.device for t in tuned}):
        want = " ".join(dev.lower().split())
        pick = next((p for p in (*measured, *sheet) if " ".join(p.device.lower().split())
                     == want), None)
        if pick is None:
            notes.append(f"Roofline: no peaks for {dev} (measured or datasheet): its points have "
                         "no roof; pass --peaks.")
        else:
            out.append(pick)
    return out, notes


def gather(req: Request, *, machine: Callable[[], EnvDoc] = this_machine) -> Inputs:
    """Read everything `req` names (a UsageError names the first file that cannot be read)."""
    parts = _Parts()
    for p in req.peaks:
        parts.measured += load_peaks(p)
        parts.sources.append(f"peaks: {p}")
    if req.empty:
        parts.envs.append(machine())
        parts.sources.append("this machine's diagnosis (convdoctor env)")
    for p in req.envs:
        parts.envs.append(load_env(p))
        parts.sources.append(f"env: {p}")
    if req.db or req.empty:
        _read_db(req, parts)
    for p in req.benches:
        b = load_bench(p)
        parts.benches.append(b)
        parts.tuned += tuned_from_bench(b)
        parts.sources.append(f"bench: {p}")
    for p in req.optimize:
        parts.runs += load_optimize(p)
        parts.sources.append(f"optimize: {p}")
    return _inputs(parts, req.title)


def _inputs(parts: _Parts, title: str | None) -> Inputs:
    names = [e.name for e in parts.envs]
    for i, n in enumerate(names):   # the same file name twice: tell the machines apart
        if names.count(n) > 1:
            parts.envs[i] = EnvDoc(f"{n} ({i + 1})", parts.envs[i].doc)
    if parts.tuned:   # this machine's measured peaks matter only to a roofline
        parts.measured += cached_peaks()
    peaks, notes = choose_peaks(parts.tuned, parts.measured)
    return Inputs(envs=tuple(parts.envs), tuned=tuple(parts.tuned), peaks=tuple(peaks),
                  benches=tuple(parts.benches), runs=tuple(parts.runs),
                  notes=tuple(parts.notes + notes), sources=tuple(parts.sources),
                  title=title or "convdoctor report")


def inputs_of(*, tuned: Sequence[TunedProblem] = (), benches: Sequence[BenchDoc] = (),
              runs: Sequence[OptimizeRun] = (), sources: Sequence[str] = (),
              title: str | None = None) -> Inputs:
    """Inputs made in memory (the `--report` flags of bench and optimize)."""
    parts = _Parts(tuned=list(tuned), benches=list(benches), runs=list(runs),
                   sources=list(sources))
    for b in parts.benches:
        parts.tuned += tuned_from_bench(b)
    return _inputs(parts, title)


def tuned_for_run(run: OptimizeRun, db: str | None) -> list[TunedProblem]:
    """The tuning results of a run's problems, from the database it used (none when the
    database holds none or cannot be read: the page then has no tuning section)."""
    from ..db import default_path

    wanted = {x.problem for x in run.layers if x.problem}
    if not wanted:
        return []
    try:
        tuned, _, _ = load_tuned(db or str(default_path()), named=False)
    except UsageError:
        return []
    return [t for t in tuned if t.label in wanted]


def write(inputs: Inputs, out: str | None, *, files: Sequence[str] = (),
          flag: str = "--out", only: tuple[str, ...] | None = None) -> tuple[Page, str, int]:
    """Render and write the page: (page, file written, bytes)."""
    page = render_page(inputs, only=only)
    path, n = write_page(out or DEFAULT_OUT, page.html, flag=flag, named=out is not None,
                         inputs=files)
    return page, path, n


def summary(page: Page, path: str, nbytes: int, inputs: Inputs) -> dict[str, Any]:
    return {"kind": "report", "path": path, "bytes": nbytes, "sections": list(page.sections),
            "machines": len(inputs.envs), "tuned_problems": len(inputs.tuned),
            "bench_files": len(inputs.benches), "optimize_runs": len(inputs.runs),
            "not_shown": list(inputs.notes)}
