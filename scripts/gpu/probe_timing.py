"""CUDA-event timing shared by the standalone GPU probe scripts in this folder.

The probes run as `python scripts/gpu/<probe>.py`, so this folder is on `sys.path` and they import
`from probe_timing import event_us`. The tuner's own timer (with L2 flush, placements and clock
watch) is `convdoctor.tune.gpu.timing`; these probes want plain back-to-back calls on purpose.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


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
