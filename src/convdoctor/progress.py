"""A dependency-free progress bar for long work (tuning, tracing), drawn on stderr.

It draws only when stderr is a terminal and `--json`/quiet mode is off, so logs and pipes stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str = "", *, enabled: bool | None = None,
                 stream: TextIO | None = None, lines: bool = False) -> None:
        """`lines=True`: one plain line per update (for logs of long batch jobs), never
        throttled; otherwise a bar redrawn in place."""
        self.total = max(int(total), 0)
        self.label = label
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._t0 = time.monotonic()
        self._last = 0.0
        self.lines = lines

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        now = time.monotonic()
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
        elapsed = now - self._t0
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s {note[:40]:<40}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and not self.lines:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
