"""`convdoctor env`: probe the driver, GPUs, CUDA/cuDNN libraries and frameworks; find what is broken."""

from __future__ import annotations

import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help="also run a small conv forward/backward on each GPU and check it")
    parser.add_argument("--compare", nargs="+", metavar="REPORT.json",
                        help="compare saved `convdoctor env --json` reports of several machines; print the facts that differ")
    parser.add_argument("--no-subprocess", action="store_true",
                        help="do not start child processes (no library loading, no torch import): file-level checks only")
    parser.add_argument("--no-conv", action="store_true", help="do not run the one tiny conv the torch child uses to map cuDNN")


def run(args: argparse.Namespace) -> int:

    if args.compare:
        return _compare(args)
    return run_diagnosis(args, smoke=True if args.smoke else False)


def run_diagnosis(args: argparse.Namespace, *, smoke: bool | None) -> int:
    from ..env.engine import diagnose
    from ..env.render import render
    from ..env.system import System
    from . import emit

    system = System(subprocess_ok=not getattr(args, "no_subprocess", False))
    report = diagnose(smoke=smoke, system=system, run_conv=not getattr(args, "no_conv", False),
                      progress=None if not getattr(args, "json", False) else False)
    import sys

    from ..textsafe import use_color

    color = not getattr(args, "json", False) and use_color(sys.stdout)
    emit(args, report.to_dict(), render(report, color=color), color=color)
    return report.exit_code


def _compare(args: argparse.Namespace) -> int:
    from ..env import compare
    from ..errors import UsageError
    from . import emit

    if len(args.compare) < 2:
        raise UsageError("--compare needs at least two reports", hint="convdoctor env --compare node1.json node2.json")
    reports = {}
    for p in args.compare:
        name = os.path.basename(p).removesuffix(".json")
        while name in reports:
            name += "'"
        reports[name] = compare.load(p)
    diff = compare.rows(reports)
    emit(args, {"kind": "env-compare", "machines": list(reports), "differences": diff}, compare.render(reports, diff))
    return 1 if diff else 0
