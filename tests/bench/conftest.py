"""The bench's tests run the tuner's simulated backends (tests/tune/tune_fakes.py)."""

from __future__ import annotations

import sys
from pathlib import Path

TUNE_TESTS = str(Path(__file__).resolve().parents[1] / "tune")
if TUNE_TESTS not in sys.path:
    sys.path.insert(0, TUNE_TESTS)
