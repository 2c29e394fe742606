"""`convdoctor doctor`: the env diagnosis plus the GPU smoke test (on when a GPU is visible)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-smoke", action="store_true", help="skip the GPU convolution smoke test")
    parser.add_argument("--no-subprocess", action="store_true",
                        help="do not start child processes (no library loading, no torch import): file-level checks only")


def run(args: argparse.Namespace) -> int:
    from .env import run_diagnosis

    return run_diagnosis(args, smoke=False if args.no_smoke else None)
