"""`convdoctor run -- CMD ...`: run a command, pass its output through unchanged (streamed by one thread
per pipe, so it works on Linux, macOS and Windows), keep only
a bounded set of candidate lines, and explain the failure when it exits non-zero. The command's exit
code is preserved (a signal becomes 128+N; a command that cannot be found 127, one that cannot be
executed 126, as shells report them).

It behaves like the command run directly, as a shell would run it:
- Signals. The command stays in convdoctor's process group, so a terminal's Ctrl-C, Ctrl-\\ or
  hangup reach it directly; convdoctor passes on only what the command did not already get: a
  SIGINT, SIGTERM, SIGHUP or SIGQUIT sent to convdoctor alone by another process (`kill PID`).
- Output. Copying never waits for the scan: the pump threads only copy, and a scanner thread reads
  what they hand over; when it falls behind, the oldest unscanned output is skipped (its line count
  kept) rather than slowing the command. When the reader of convdoctor's output goes away (`| head`),
  the command's pipe is closed too, so it gets SIGPIPE as it would in a shell pipeline.
- Ending. convdoctor returns when the command exits, after at most `DRAIN_S` seconds for output
  still in the pipes: a background process that inherited them (`sh -c 'sleep 120 & exit 1'`) does
  not hold it up.
"""

from __future__ import annotations

import argparse
import collections
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..textsafe import clean

DRAIN_S = 1.0              # after the command exits: time left for output still in the pipes
SCAN_BACKLOG = 4 << 20     # unscanned bytes kept at most; beyond, the oldest are skipped
SCAN_SHARE = 0.1           # while the command runs, the scan takes at most this share of the time
KEEP_LINES = 40            # lines kept at the end of what the scan skips (a failure prints last)
HOLD_MAX = 1 << 20         # bytes of those lines kept at most
FORWARDED = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
                  if hasattr(signal, n))
_SI_KERNEL = 0x80          # si_code of a signal the kernel sent (a terminal's Ctrl-C, a hangup)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-live", action="store_true", help="skip live checks on this machine")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="the command to run, after --")
    parser.epilog = ("The diagnosis goes to stderr (JSON with --json) after the command's own output; "
                     "the exit code is the command's (127: not found, 126: not executable).")


class CommandNotRun(UsageError):
    """The command could not be started; `exit_code` is what a shell would return."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _ScanFeeder:
    """Hands output to the scanner on its own thread; never blocks the pumps. While the command
    runs the scan may take `SCAN_SHARE` of the time (it shares the interpreter with the pumps);
    output beyond that, or beyond `SCAN_BACKLOG` unscanned bytes, is replaced by its newlines
    (cheap to scan, line numbers kept), all but the last `KEEP_LINES` lines. What is left when
    the command ends is scanned in full."""

    def __init__(self, scanner: Any) -> None:
        self.scanner = scanner
        self._t0 = time.perf_counter()
        self._busy_s = 0.0
        self._held = b""
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self.skipped_bytes = 0
        self._cond = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def put(self, data: bytes) -> None:
        with self._cond:
            if self._done:
                return
            self._queue.append(data)
            self._queued += len(data)
            if self._queued > SCAN_BACKLOG:
                newlines = 0
                while self._queued > SCAN_BACKLOG and len(self._queue) > 1:
                    old = self._queue.popleft()
                    self._queued -= len(old)
                    n = old.count(b"\n")
                    self.skipped_bytes += len(old) - n
                    newlines += n
                if newlines:
                    self._queue.appendleft(b"\n" * newlines)
                    self._queued += newlines
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._done:
                    self._cond.wait()
                if not self._queue:
                    held, self._held = self._held, b""
                    if held:
                        self.scanner.feed(held)
                    return
                behind = not self._done and (
                    self._busy_s > SCAN_SHARE * (time.perf_counter() - self._t0) + 0.05)
                if behind:      # everything queued so far becomes one run of newlines
                    chunks = list(self._queue)
                    self._queue.clear()
                    self._queued = 0
                else:
                    chunks = [self._queue.popleft()]
                    self._queued -= len(chunks[0])
            if behind:
                # the last lines are held back, not skipped: if the output ends here, they are
                # its last lines (where a failure is printed); if not, they are skipped next time
                joined = self._held + b"".join(chunks)
                cut = len(joined)
                for _ in range(KEEP_LINES + 1):
                    cut = joined.rfind(b"\n", 0, cut)
                    if cut < 0:
                        break
                cut = max(cut, len(joined) - HOLD_MAX - 1)     # a line without end is cut
                self._held = joined[cut + 1:]
                newlines = joined.count(b"\n", 0, cut + 1)
                self.skipped_bytes += cut + 1 - newlines
                data = b"\n" * newlines
            else:
                data, self._held = self._held + chunks[0], b""
            t = time.perf_counter()
            self.scanner.feed(data)
            self._busy_s += time.perf_counter() - t

    def close(self) -> Any:
        with self._cond:
            self._done = True
            self._cond.notify()
        self._thread.join()
        return self.scanner.close()


def _pump(src: Any, sink: Any, feeder: _ScanFeeder, broken: threading.Event) -> None:
    fd = src.fileno()
    writing = sink is not None
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        if writing:
            try:
                sink.write(data)
                sink.flush()
            except BrokenPipeError:
                # our reader is gone: close the command's pipe, so its next write gets SIGPIPE
                broken.set()
                break
            except (ValueError, OSError):
                writing = False          # a full disk or a closed stream: keep the command going
        feeder.put(data)
    try:
        src.close()
    except OSError:
        pass


def _binary(stream: Any) -> Any:
    """The binary stream under a text stream (None when there is none: a closed stdout)."""
    return getattr(stream, "buffer", None) if stream is not None else None


@contextmanager
def _forwarding(proc: subprocess.Popen[bytes], seen: set[int]) -> Iterator[None]:
    """Pass FORWARDED signals to `proc`, except those the kernel sent to the whole foreground
    process group (the command, in our group, got them already); `seen` collects them all."""
    if threading.current_thread() is not threading.main_thread() or not FORWARDED:
        yield
        return
    if hasattr(signal, "sigtimedwait") and hasattr(signal, "pthread_sigmask"):
        # blocked here and in every thread started inside; one thread collects them with their
        # sender's si_code, so a terminal's signal is told apart from a `kill`
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        stop = threading.Event()

        def collect() -> None:
            while not stop.is_set():
                info = signal.sigtimedwait(FORWARDED, 0.1)
                if info is None:
                    continue
                seen.add(info.si_signo)
                same_group = _same_group(proc)
                if info.si_code != _SI_KERNEL or not same_group:
                    _send(proc, info.si_signo)

        waiter = threading.Thread(target=collect, daemon=True)
        waiter.start()
        try:
            yield
        finally:
            stop.set()
            waiter.join()
            while signal.sigtimedwait(FORWARDED, 0) is not None:   # arrived after the command
                pass
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        return
    # no sigtimedwait (macOS): a terminal's SIGINT is assumed to have reached the command when
    # convdoctor runs in the terminal's foreground process group
    def handler(signo: int, _frame: Any) -> None:
        seen.add(signo)
        if signo != signal.SIGINT or not _terminal_foreground():
            _send(proc, signo)

    old = {s: signal.signal(s, handler) for s in FORWARDED}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _same_group(proc: subprocess.Popen[bytes]) -> bool:
    try:
        return os.getpgid(proc.pid) == os.getpgrp()
    except OSError:
        return True


def _terminal_foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.__stdin__.fileno()) == os.getpgrp()  # type: ignore[union-attr]
    except (OSError, AttributeError, ValueError):
        return False


def _send(proc: subprocess.Popen[bytes], signo: int) -> None:
    try:
        proc.send_signal(signo)
    except (OSError, ProcessLookupError):
        pass


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except FileNotFoundError:
        raise CommandNotRun(f"{cmd[0]}: command not found", 127) from None
    except PermissionError:
        raise CommandNotRun(f"{cmd[0]}: permission denied (not executable)", 126) from None
    except OSError as exc:   # a directory, a file that is no program (ENOEXEC), a name too long
        code = 127 if exc.errno in (errno.ENOENT, errno.ENAMETOOLONG, errno.ENOTDIR) else 126
        raise CommandNotRun(f"{cmd[0][:200]}: cannot execute ({exc.strerror})", code) from None


@dataclass
class RunOutcome:
    rc: int                    # the command's exit code (128+N for signal N)
    scan: Any                  # the ScanResult of its output
    seconds: float
    broken_pipe: bool = False  # the reader of our stdout went away
    unscanned_bytes: int = 0   # output skipped by the scan to keep up with the command
    signals: frozenset[int] = frozenset()   # FORWARDED signals that reached convdoctor


def run_and_scan(cmd: list[str], *, out: Any = None, err: Any = None,
                 env: dict[str, str] | None = None) -> tuple[int, Any, float]:
    """Run `cmd`, copy its stdout/stderr through as they arrive, scan them. Returns (rc, scan, secs)."""
    o = run_command(cmd, out=out, err=err, env=env)
    return o.rc, o.scan, o.seconds


def run_command(cmd: list[str], *, out: Any = None, err: Any = None,
                env: dict[str, str] | None = None) -> RunOutcome:
    """Run `cmd`, copy its stdout/stderr through as they arrive, scan them (CommandNotRun when it
    cannot start)."""
    from ..explain.scan import Scanner

    out = out if out is not None else _binary(sys.stdout)
    err = err if err is not None else _binary(sys.stderr)
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    t0 = time.perf_counter()
    proc = _start(cmd, child_env)
    assert proc.stdout is not None and proc.stderr is not None
    broken = threading.Event()
    seen: set[int] = set()
    with _forwarding(proc, seen):
        feeder = _ScanFeeder(Scanner())
        threads = [threading.Thread(target=_pump, args=(proc.stdout, out, feeder, broken),
                                    daemon=True),
                   threading.Thread(target=_pump, args=(proc.stderr, err, feeder, threading.Event()),
                                    daemon=True)]
        for t in threads:
            t.start()
        rc = proc.wait()
        deadline = time.monotonic() + DRAIN_S
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        res = feeder.close()
    if rc < 0:
        rc = 128 + (-rc)
    return RunOutcome(rc, res, time.perf_counter() - t0, broken.is_set(), feeder.skipped_bytes,
                      frozenset(seen))


def run(args: argparse.Namespace) -> int:
    from ..explain import _live
    from ..explain.engine import analyze
    from ..report import dumps

    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("nothing to run: give the command after --",
                         hint="convdoctor run -- python train.py --epochs 1")
    try:
        o = run_command(cmd)
    except CommandNotRun as exc:
        print(f"convdoctor: run: {clean(exc)}", file=sys.stderr)
        return exc.exit_code
    rc, res = o.rc, o.scan
    if rc == 0 or (o.broken_pipe and rc == 128 + int(getattr(signal, "SIGPIPE", 13))):
        return rc       # a reader that stopped reading (`| head`) is no failure to explain
    if rc - 128 in o.signals:
        return rc       # stopped on request (Ctrl-C, kill): nothing failed
    looked = {"source": f"output of {' '.join(cmd)[:200]}", "bytes": res.total_bytes,
              "total_lines": res.total_lines, "dropped_lines": res.dropped,
              "unscanned_bytes": o.unscanned_bytes,
              "binary_fraction": round(res.binary_fraction, 3), "exit_code": rc,
              "run_s": round(o.seconds, 3)}
    diag = analyze(res.lines, looked_at=looked, live=_live(not args.no_live))
    if args.json:
        print(dumps(diag.to_dict()), file=sys.stderr)
    else:
        print(f"\n--- convdoctor: the command exited with {rc}; explanation ---", file=sys.stderr)
        print(diag.render(), file=sys.stderr)
    return rc
