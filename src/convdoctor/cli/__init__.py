"""The `convdoctor` command line.

Each subcommand is a module of this package (`cli/<command>.py`: its arguments and its output; the
work is done by the capability's package). This module only knows their names, their one-line help
and their modules, so `convdoctor --help` imports nothing heavy (no torch). Each command module
exposes `add_arguments(parser)` and `run(args) -> int` (the exit code:
0 ok, 1 warnings, 2 errors). Errors meant for the user (`ConvdoctorError`) become one clear message
and exit code 2; nothing prints a traceback unless the `debug` setting is on (`settings.py`).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .._version import __version__
from ..errors import ConvdoctorError
from ..textsafe import clean

# (name, module, one-line help). Order is the order shown in --help.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("doctor", "convdoctor.cli.doctor", "diagnose this machine end to end (env + GPU smoke test)"),
    ("env", "convdoctor.cli.env", "probe driver, GPUs, CUDA/cuDNN libraries and frameworks; find what is broken"),
    ("check", "convdoctor.cli.check", "find convolutions cuDNN will reject (or run slowly) before it sees them"),
    ("explain", "convdoctor.cli.explain", "name the root cause of a cuDNN/CUDA error message or log, with the fix"),
    ("run", "convdoctor.cli.run", "run a command; if it fails, explain why (exit code preserved)"),
    ("tune", "convdoctor.cli.tune", "find the fastest correct engine for each convolution and remember it"),
    ("bench", "convdoctor.cli.bench", "benchmark a suite: PyTorch heuristics vs benchmark=True vs convdoctor"),
    ("db", "convdoctor.cli.db", "list, export, import and prune the tuning database"),
    ("optimize", "convdoctor.cli.optimize", "run a model on tuned engines; print the plan and the measured speedup"),
    ("report", "convdoctor.htmlreport.cmd", "write one self-contained HTML page: diagnosis, tuning, roofline, bench, optimize"),
)

EPILOG = "Every command takes --json for machine-readable output. Exit codes: 0 ok, 1 warnings, 2 errors."


def _debug() -> bool:
    """The `debug` setting; a malformed value counts as off here (the message about it comes
    from the command that reads the settings)."""
    from ..settings import current

    try:
        return current().debug
    except ConvdoctorError:
        return False


class OutputError(ConvdoctorError):
    """Standard output cannot be written (closed, a full disk, /dev/full)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad value or option reported on one line (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {clean(message)} (see {self.prog} --help)\n")


class _GuardedOut:
    """sys.stdout for the length of a command: a failed write or flush (closed, no space left)
    becomes an `OutputError`, so it ends in one line and exit code 2. A closed pipe stays a
    BrokenPipeError: the reader has stopped, which is not an error (`convdoctor db list | head`)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def _call(self, name: str, *args: Any) -> Any:
        if self._inner is None:
            raise OutputError("standard output is closed: nothing can be printed",
                              hint="run again with standard output open (a file, a pipe or a "
                              "terminal)")
        try:
            return getattr(self._inner, name)(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(f"cannot write to standard output: {exc.strerror or exc}") from None

    def write(self, text: str) -> int:
        return int(self._call("write", text) or 0)

    def flush(self) -> None:
        if self._inner is not None:  # nothing was written to a closed stdout: nothing to flush
            self._call("flush")

    def isatty(self) -> bool:
        return bool(self._inner is not None and self._inner.isatty())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _ClosedInput:
    """sys.stdin when file descriptor 0 is closed: reading it is a usage error."""

    def _closed(self, *args: Any) -> NoReturn:
        from ..errors import UsageError

        raise UsageError("standard input is closed: nothing to read",
                         hint="pipe the text in, or give it as an argument or a file")

    read = readline = readlines = read1 = readinto = __iter__ = _closed
    encoding = "utf-8"

    @property
    def buffer(self) -> _ClosedInput:
        return self

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return 0

    def close(self) -> None:
        pass


def _reserve_std_fds() -> None:
    """Hold file descriptors 0-2 open (on /dev/null) when the caller closed them, so no file this
    process opens (a database) lands on 0, 1 or 2 where a child process would write into it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
            except OSError:
                pass


def _silence_stdout() -> None:
    """After stdout failed: point it at /dev/null, so the flush at exit does not fail again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass


def build_parser(selected: str | None) -> tuple[argparse.ArgumentParser, dict[str, Any]]:
    """The top-level parser; only the selected command's module is imported to add its arguments."""
    parser = _Parser(
        prog="convdoctor",
        description="convdoctor: make GPU convolutions work and run fast.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"convdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules: dict[str, Any] = {}
    for name, module_name, help_text in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG)
        p.add_argument("--json", action="store_true", help="print machine-readable JSON")
        if name == selected:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            modules[name] = module
    return parser, modules


def _selected_command(argv: Sequence[str]) -> str | None:
    names = {c[0] for c in COMMANDS}
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    saved = (sys.stdin, sys.stdout, sys.stderr)
    if sys.stdin is None or sys.stdout is None or sys.stderr is None:
        _reserve_std_fds()
    if sys.stdin is None:
        sys.stdin = _ClosedInput()  # type: ignore[assignment]
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    sys.stdout = _GuardedOut(sys.stdout)  # type: ignore[assignment]
    try:
        rc = _main(argv)
        try:
            sys.stdout.flush()
        except OutputError as exc:
            _silence_stdout()
            print(f"convdoctor: error: {exc}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            _silence_stdout()
        return rc
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved


def _main(argv: list[str]) -> int:
    try:
        selected = _selected_command(argv)
        parser, modules = build_parser(selected)
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return 0
        return int(modules[args.command].run(args) or 0)
    except ConvdoctorError as exc:
        if isinstance(exc, OutputError):
            _silence_stdout()
        print(f"convdoctor: error: {clean(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("convdoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except OSError as exc:
        if _debug() or not exc.filename or exc.errno in (errno.ENOMEM,):
            return _internal(exc)
        # a path the system refused (too long, no permission, not there): the user's to fix
        print(f"convdoctor: error: {clean(exc.filename)}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - last line of defence: no tracebacks for users
        return _internal(exc)


def _internal(exc: BaseException) -> int:
    if _debug():
        raise exc
    print(
        f"convdoctor: internal error: {type(exc).__name__}: {clean(exc)}\n"
        f"  This is a bug in convdoctor. Run again with {env_name('debug')}=1 to see the traceback, "
        "and report it.",
        file=sys.stderr,
    )
    return 2


def env_name(setting: str) -> str:
    """The environment variable of a setting (`settings.py` declares them), for help and messages."""
    from ..settings import declared

    return next(d["env"] for d in declared() if d["name"] == setting)


def emit(args: argparse.Namespace, payload: Any, human: str, *, color: bool = False) -> None:
    """Print JSON when --json was given, else the human text with every control character shown
    as an escape (`textsafe.clean`); `color`: the text holds convdoctor's own colour sequences,
    whose untrusted parts were cleaned before they were coloured."""
    if getattr(args, "json", False):
        from ..report import dumps

        print(dumps(payload))
    else:
        print(clean(human, keep_color=color))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
