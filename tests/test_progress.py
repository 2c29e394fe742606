"""The progress display: a bar on terminals, plain lines for batch logs, nothing when disabled."""

from __future__ import annotations

import io

from convdoctor.progress import Progress


def test_lines_mode_writes_one_line_per_step() -> None:
    buf = io.StringIO()
    with Progress(3, "bench", enabled=True, lines=True, stream=buf) as bar:
        bar.update(1, "pytorch a")
        bar.update(1, "tune a")
    out = buf.getvalue().splitlines()
    assert len(out) == 2
    assert out[0].startswith("bench 1/3 ") and out[0].endswith("pytorch a")
    assert out[1].startswith("bench 2/3 ") and "\r" not in buf.getvalue()


def test_disabled_progress_writes_nothing() -> None:
    buf = io.StringIO()
    with Progress(2, "x", enabled=False, stream=buf) as bar:
        bar.update(2)
    assert buf.getvalue() == ""
