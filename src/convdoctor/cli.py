"""The `convdoctor` command line.

Subcommands live in their capability's package; this module only knows their names, their one-line
help and the module that implements them, so `convdoctor --help` imports nothing heavy (no torch).
Each command module exposes `add_arguments(parser)` and `run(args) -> int` (the exit code:
0 ok, 1 warnings, 2 errors). Errors meant for the user (`ConvdoctorError`) become one clear message
and exit code 2; nothing prints a traceback unless CONVDOCTOR_DEBUG=1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from ._version import __version__
from .errors import ConvdoctorError

# (name, module, one-line help). Order is the order shown in --help.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("doctor", "convdoctor.env.cmd_doctor", "diagnose this machine end to end (env + GPU smoke test)"),
    ("env", "convdoctor.env.cmd_env", "probe driver, GPUs, CUDA/cuDNN libraries and frameworks; find what is broken"),
    ("check", "convdoctor.check.cmd", "find convolutions cuDNN will reject (or run slowly) before it sees them"),
    ("explain", "convdoctor.explain.cmd_explain", "name the root cause of a cuDNN/CUDA error message or log, with the fix"),
    ("run", "convdoctor.explain.cmd_run", "run a command; if it fails, explain why (exit code preserved)"),
    ("tune", "convdoctor.tune.cmd_tune", "find the fastest correct engine for each convolution and remember it"),
    ("bench", "convdoctor.tune.cmd_bench", "benchmark a suite: PyTorch heuristics vs benchmark=True vs convdoctor"),
    ("db", "convdoctor.db.cmd", "list, export, import and prune the tuning database"),
    ("optimize", "convdoctor.runtime.cmd", "run a model on tuned engines; print the plan and the measured speedup"),
)

EPILOG = "Every command takes --json for machine-readable output. Exit codes: 0 ok, 1 warnings, 2 errors."


def _debug() -> bool:
    return os.environ.get("CONVDOCTOR_DEBUG", "") not in ("", "0")


def build_parser(selected: str | None) -> tuple[argparse.ArgumentParser, dict[str, Any]]:
    """The top-level parser; only the selected command's module is imported to add its arguments."""
    parser = argparse.ArgumentParser(
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
    try:
        selected = _selected_command(argv)
        parser, modules = build_parser(selected)
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return 0
        return int(modules[args.command].run(args) or 0)
    except ConvdoctorError as exc:
        print(f"convdoctor: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("convdoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except Exception as exc:  # noqa: BLE001 - last line of defence: no tracebacks for users
        if _debug():
            raise
        print(
            f"convdoctor: internal error: {type(exc).__name__}: {exc}\n"
            "  This is a bug in convdoctor. Run again with CONVDOCTOR_DEBUG=1 to see the traceback, "
            "and report it.",
            file=sys.stderr,
        )
        return 2


def emit(args: argparse.Namespace, payload: Any, human: str) -> None:
    """Print JSON when --json was given, else the human text."""
    if getattr(args, "json", False):
        from .report import dumps

        print(dumps(payload))
    else:
        print(human)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
