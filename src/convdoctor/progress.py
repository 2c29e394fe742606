"""A dependency-free progress bar for long work (tuning, tracing), drawn on stderr.

It draws only when stderr is a terminal and `--json`/quiet mode is off, so logs and pipes stay clean.
With `eta=True` the bar also shows how many items are left and the time left, estimated from the
mean time per finished item so far.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def seconds_text(s: float) -> str:
    """A duration as a person reads it: "41 s", "3 min 05 s", "1 h 02 min"."""
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


class Progress:
    def __init__(self, total: int, label: str = "", *, enabled: bool | None = None,
                 stream: TextIO | None = None, lines: bool = False, eta: bool = False,
                 now: Callable[[], float] = time.monotonic) -> None:
        """`lines=True`: one plain line per update (for logs of long batch jobs), never
        throttled; otherwise a bar redrawn in place. `eta=True`: the bar shows the items left and
        the time left. `now`: the clock (seconds)."""
        self.total = max(int(total), 0)
        self.label = label
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.now = now
        self._t0 = now()
        self._last = float("-inf")
        self.lines = lines
        self.eta = eta

    def eta_s(self) -> float | None:
        """Seconds left: the mean time per finished item so far times the items left (None
        before the first item finished)."""
        if self.done <= 0:
            return None
        left = max(self.total - self.done, 0)
        return (self.now() - self._t0) / self.done * left

    def _counts(self, elapsed: float) -> str:
        if not self.eta:
            return f"{self.done}/{self.total} {elapsed:5.1f}s"
        left = max(self.total - self.done, 0)
        eta = self.eta_s()
        return (f"{self.done}/{self.total} done, {left} left, "
                f"{'time left ' + seconds_text(eta) if eta is not None else 'time left -'}")

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        now = self.now()
        if self.enabled and self.lines:
            self.stream.write(f"{self.label} {self.done}/{self.total} {now - self._t0:.1f}s "
                              f"{note}\n")
            self.stream.flush()
            return
        if not self.enabled or (now - self._last < 0.1 and self.done < self.total):
            return
        self._last = now
        width = 30
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        self.stream.write(f"\r{self.label} [{bar}] {self._counts(now - self._t0)} "
                          f"{note[:40]:<40}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and not self.lines:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
