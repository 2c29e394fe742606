"""Helpers shared by the GPU probes in this folder: CUDA-event timing and the current passes.

The probes run as `python lab/<probe>.py`, so this folder is on `sys.path` and they import
`from probe_timing import event_us`. The tuner's own timer (with L2 flush, placements and clock
watch) is convdoctor's; these probes want plain back-to-back calls on purpose.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bench"


def pass_rows(config: str, direction: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Rows of the current 101-layer pass `cnn-layers_<config>_<direction>.json.gz` under
    benchmarks/results/bench (the figures docs/results.md quotes), keyed by (group, name)."""
    path = RESULTS / f"cnn-layers_{config}_{direction}.json.gz"
    with gzip.open(path, "rt") as fh:
        return {(r["group"], r["name"]): r for r in json.load(fh)["rows"]}


def deadline(margin_s: float) -> float:
    """The time.time() by which a probe stops starting new work: PROBE_TIME_S seconds from now
    (unset: no limit) less `margin_s`."""
    return time.time() + float(os.environ.get("PROBE_TIME_S", "1e9")) - margin_s


def event_us(fn: Callable[[], Any], calls: int, *, warm: int = 0, blocks: int = 1) -> float:
    """Microseconds per call of `fn`: `warm` untimed calls, then `blocks` blocks of `calls`
    back-to-back calls between two CUDA events on the current stream; the median block."""
    import torch

    for _ in range(warm):
        fn()
    if warm:
        torch.cuda.synchronize()
    out = []
    for _ in range(max(1, blocks)):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1000.0 / calls)
    return statistics.median(out)
