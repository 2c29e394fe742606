"""`convdoctor run -- CMD ...`: run a command, pass its output through unchanged (streamed by one thread
per pipe, so it works on Linux, macOS and Windows), keep only
a bounded set of candidate lines, and explain the failure when it exits non-zero. The command's exit
code is preserved (a signal becomes 128+N)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from ..errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-live", action="store_true", help="skip live checks on this machine")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="the command to run, after --")
    parser.epilog = ("The diagnosis goes to stderr (JSON with --json) after the command's own output; "
                     "the exit code is the command's.")


def run_and_scan(cmd: list[str], *, out: Any = None, err: Any = None,
                 env: dict[str, str] | None = None) -> tuple[int, Any, float]:
    """Run `cmd`, copy its stdout/stderr through as they arrive, scan them. Returns (rc, scan, secs)."""
    from .scan import Scanner

    out = out if out is not None else sys.stdout.buffer
    err = err if err is not None else sys.stderr.buffer
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env)
    except FileNotFoundError:
        raise UsageError(f"command not found: {cmd[0]}") from None
    except PermissionError:
        raise UsageError(f"cannot execute {cmd[0]} (permission denied)") from None
    scanner = Scanner()
    lock = threading.Lock()
    assert proc.stdout is not None and proc.stderr is not None

    def pump(src: Any, sink: Any) -> None:
        fd = src.fileno()
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            try:
                sink.write(data)
                sink.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass
            with lock:
                scanner.feed(data)

    threads = [threading.Thread(target=pump, args=(proc.stdout, out), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err), daemon=True)]
    for t in threads:
        t.start()
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    for t in threads:
        t.join(timeout=30)
    if rc < 0:
        rc = 128 + (-rc)
    return rc, scanner.close(), time.perf_counter() - t0


def run(args: argparse.Namespace) -> int:
    from ..report import dumps
    from . import _live
    from .engine import analyze

    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("nothing to run: give the command after --",
                         hint="convdoctor run -- python train.py --epochs 1")
    rc, res, secs = run_and_scan(cmd)
    if rc == 0:
        return 0
    looked = {"source": f"output of {' '.join(cmd)[:200]}", "bytes": res.total_bytes,
              "total_lines": res.total_lines, "dropped_lines": res.dropped,
              "binary_fraction": round(res.binary_fraction, 3), "exit_code": rc,
              "run_s": round(secs, 3)}
    diag = analyze(res.lines, looked_at=looked, live=_live(not args.no_live))
    if args.json:
        print(dumps(diag.to_dict()), file=sys.stderr)
    else:
        print(f"\n--- convdoctor: the command exited with {rc}; explanation ---", file=sys.stderr)
        print(diag.render(), file=sys.stderr)
    return rc
