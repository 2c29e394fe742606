"""A listing's steps, from the worker process to its parent: which step a hang or a crash was in.

A listing (the cuDNN enumeration, a knob refinement) reports each step before it takes it
(`engines.listing.listing_step`). In the worker, `StepFile` writes each step as a line
"kind TAB unit TAB name" to a file the parent made; in the parent, `StepWatch` follows that file:
the last step, whether a quick time has run past its limit (then the worker counts as hung), and
how much longer to wait for a quick time that began late. `tune.worker.WorkerBackend` leaves the
unit of the step a hang or crash happened in out of the listing and lists again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..engines.listing import set_step_sink


@dataclass(frozen=True)
class ListingStep:
    """A step of a listing, as the worker wrote it (`engines.listing.listing_step`)."""

    kind: str
    unit: str
    name: str

    def describe(self) -> str:
        what = {"build": "the build of", "time": "the quick time of",
                "engine": "the knob listing of", "knobs": "the knob walk from"}.get(
                    self.kind, f"the {self.kind} step of")
        return f"{what} {self.name or self.unit}"


class StepWatch:
    """Follows a listing's step file: the last step, and whether a quick time has stalled."""

    def __init__(self, path: str, step_timeout_s: float) -> None:
        self.path = path
        self.step_timeout_s = step_timeout_s
        self.size = -1
        self.since = time.monotonic()
        self.step: ListingStep | None = None

    def _read_last(self) -> ListingStep | None:
        try:
            with open(self.path, "rb") as f:
                f.seek(0, os.SEEK_END)
                end = f.tell()
                f.seek(max(0, end - 4096))
                tail = f.read().decode(errors="replace")
        except OSError:
            return self.step
        lines = [ln for ln in tail.split("\n")[:-1] if ln.count("\t") >= 2]  # complete lines
        if not lines:
            return self.step
        kind, unit, name = lines[-1].split("\t", 2)
        return ListingStep(kind, unit, name)

    def poll(self) -> str | None:
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return None
        now = time.monotonic()
        if size != self.size:
            self.size, self.since = size, now
            self.step = self._read_last()
            return None
        st = self.step
        if st is not None and st.kind == "time" and now - self.since > self.step_timeout_s:
            return (f"{st.describe()} did not return within {self.step_timeout_s:.0f} s (hung); "
                    "worker killed")
        return None

    def last(self) -> ListingStep | None:
        self.poll()
        return self.step

    def age(self) -> float:
        """Seconds since the last step began (since the watch began, before any step)."""
        return time.monotonic() - self.since

    def grace(self) -> float:
        """When the listing's wait runs out inside a quick time that began less than
        `step_timeout_s` ago: the seconds until it would count as hung (plus one poll), so a
        quick time that starts hanging late in a listing is still named; else 0."""
        st = self.last()
        if st is None or st.kind != "time":
            return 0.0
        return max(0.0, self.step_timeout_s - self.age()) + 1.5


class StepFile:
    """While a listing runs, write each `listing_step` as a line "kind TAB unit TAB name" to the
    file its parent watches (`StepWatch`); nothing when no file is named."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.fd = -1
        self.old: Callable[[str, str, str], None] | None = None

    def _write(self, kind: str, unit: str, name: str) -> None:
        clean = [" ".join(str(v).split()) for v in (kind, unit, name)]  # no tab, no newline
        os.write(self.fd, ("\t".join(clean) + "\n").encode())

    def __enter__(self) -> StepFile:
        if self.path:
            try:
                # the parent made the file: never make it again after the parent removed it
                self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            except OSError:
                self.fd = -1
        if self.fd >= 0:
            self.old = set_step_sink(self._write)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            set_step_sink(self.old)
            os.close(self.fd)
            self.fd = -1
