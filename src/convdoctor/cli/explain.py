"""`convdoctor explain "TEXT" | --file LOG | -`: name the root cause of an error message or a log."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, BinaryIO

from ..errors import UsageError

if TYPE_CHECKING:
    from ..explain.model import Diagnosis


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="?", help="the error message; '-' reads it from stdin")
    parser.add_argument("--file", "-f", metavar="LOG", help="a log file of any size (streamed)")
    parser.add_argument("--no-live", action="store_true",
                        help="skip live checks on this machine (use for logs from another machine)")
    parser.epilog = ("Exit codes: 0 a cause was found, 1 nothing known was found (cause 'unknown'), "
                     "2 bad input.")


def _stdin() -> BinaryIO:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise UsageError("standard input is closed: nothing to read (pipe the log in, or use --file LOG)")
    return stream


def _explain_stream(stream: BinaryIO, live: bool) -> Diagnosis:
    from ..explain import _live
    from ..explain.engine import analyze
    from ..explain.scan import BLOCK, Scanner

    t0 = time.perf_counter()
    sc = Scanner()
    try:
        while True:
            chunk = stream.read(BLOCK)
            if not chunk:
                break
            sc.feed(chunk)
    except OSError as exc:
        raise UsageError(f"cannot read standard input: {exc.strerror or exc}") from None
    res = sc.close()
    looked = {"source": "stdin", "bytes": res.total_bytes, "total_lines": res.total_lines,
              "dropped_lines": res.dropped, "binary_fraction": round(res.binary_fraction, 3),
              "scan_s": round(time.perf_counter() - t0, 3)}
    return analyze(res.lines, looked_at=looked, live=_live(live))


def run(args: argparse.Namespace) -> int:
    from ..explain import explain, explain_file

    live = not args.no_live
    if args.file and args.text:
        raise UsageError("give either TEXT or --file LOG, not both")
    if args.file:
        path = args.file
        if path == "-":
            diag = _explain_stream(_stdin(), live)
        else:
            if not os.path.exists(path):
                raise UsageError(f"no such file: {path}", hint="check the path of the log")
            if os.path.isdir(path):
                raise UsageError(f"{path} is a directory, not a log file")
            if not os.access(path, os.R_OK):
                raise UsageError(f"cannot read {path} (permission denied)")
            size = os.path.getsize(path)
            if size >= (32 << 20) and sys.stderr.isatty() and not args.json:
                from ..progress import Progress

                with Progress(max(1, size >> 20), label=f"scanning {size >> 20} MiB") as bar:
                    def tick(done: int, total: int) -> None:
                        bar.update((done >> 20) - bar.done)

                    diag = explain_file(path, live=live, progress=tick)
            else:
                diag = explain_file(path, live=live)
    elif args.text == "-":
        diag = _explain_stream(_stdin(), live)
    elif args.text is not None:
        diag = explain(args.text, live=live)
    else:
        raise UsageError("nothing to explain: give the error TEXT, --file LOG, or '-' to read stdin",
                         hint='convdoctor explain "CUDNN_STATUS_NOT_INITIALIZED"')
    _emit(args, diag)
    return 1 if diag.cause_id == "unknown" else 0


def _emit(args: argparse.Namespace, diag: Diagnosis) -> None:
    """Print the result (a write that fails ends in one line and exit 2 through the CLI's output
    guard, `convdoctor.cli._GuardedOut`)."""
    from . import emit

    emit(args, diag.to_dict(), diag.render())
