"""GPU timing: an L2 flush sized to the device, CUDA events, batched launches or CUDA graph replay.

`time_launches(fn, reps)` returns one time per rep, in seconds per launch:
- before each rep the L2 is flushed (a memset over a buffer twice the device's L2), on the same
  stream, before the start event: the flush is outside the timed interval;
- a rep is `batch` back-to-back launches between two CUDA events (batch=1 for kernels long enough to
  time alone); with `graph=True` the batch is captured once into a CUDA graph and replayed, which
  removes the CPU launch gaps that dominate microsecond kernels. Capture failures fall back to
  plain launches (reported in `TimingInfo.mode`).
- only the first launch of a batch starts from a cold L2; batches are used only for kernels under
  `auto_batch_below_s`, whose working set mostly stays in L2 anyway (documented in docs/tune-gpu.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_FLUSHERS: dict[int, L2Flusher] = {}


class L2Flusher:
    """A device buffer twice the size of the L2; `flush()` overwrites it on the current stream."""

    def __init__(self, device: int | None = None) -> None:
        import torch

        dev = torch.cuda.current_device() if device is None else int(device)
        props = torch.cuda.get_device_properties(dev)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        self.l2_bytes = l2
        self.nbytes = max(2 * l2, 8 << 20)  # 8 MiB floor when the property is missing
        self.buf = torch.empty(self.nbytes, dtype=torch.uint8, device=f"cuda:{dev}")
        self._value = 0

    def flush(self) -> None:
        # alternate the value so no driver/hardware shortcut can skip an unchanged memset
        self._value ^= 1
        self.buf.fill_(self._value)


def flusher(device: int | None = None) -> L2Flusher:
    import torch

    dev = torch.cuda.current_device() if device is None else int(device)
    f = _FLUSHERS.get(dev)
    if f is None:
        f = _FLUSHERS[dev] = L2Flusher(dev)
    return f


@dataclass
class TimingInfo:
    batch: int = 1
    mode: str = "events"          # "events" | "events+batch" | "graph"
    note: str = ""


def choose_batch(estimate_s: float, *, target_s: float = 200e-6, max_batch: int = 64,
                 auto_batch_below_s: float = 50e-6) -> int:
    """How many launches per event pair: 1 for kernels of `auto_batch_below_s` or more, else
    enough launches to fill about `target_s` (at most `max_batch`)."""
    if not math.isfinite(estimate_s) or estimate_s <= 0:
        return 1
    if estimate_s >= auto_batch_below_s:
        return 1
    return int(max(1, min(max_batch, math.ceil(target_s / estimate_s))))


def _events_once(fn: Callable[[], Any], *, batch: int, flush: L2Flusher | None) -> float:
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    if flush is not None:
        flush.flush()
    start.record()
    for _ in range(batch):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / batch


def quick_estimate(fn: Callable[[], Any], runs: int = 3) -> float:
    """Median seconds of a few single launches (warm, no flush): picks the batch size."""
    ts = sorted(_events_once(fn, batch=1, flush=None) for _ in range(max(1, runs)))
    return ts[len(ts) // 2]


class LaunchTimer:
    """Times a callable on the current CUDA stream; reuse it for all reps of one candidate."""

    def __init__(self, fn: Callable[[], Any], *, device: int | None = None, flush: bool = True,
                 batch: int | None = None, graph: bool = True) -> None:
        self.fn = fn
        self.flusher = flusher(device) if flush else None
        self.info = TimingInfo()
        self._batch = batch
        self._want_graph = graph
        self._graph: Any = None
        self._prepared = False

    def _prepare(self) -> None:
        import torch

        if self._batch is None:
            self._batch = choose_batch(quick_estimate(self.fn))
        self.info.batch = self._batch
        self.info.mode = "events" if self._batch == 1 else "events+batch"
        if self._batch > 1 and self._want_graph:
            try:
                torch.cuda.synchronize()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    self.fn()  # one launch on the side stream before capture (library init)
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=s):
                    for _ in range(self._batch):
                        self.fn()
                torch.cuda.synchronize()
                g.replay()
                torch.cuda.synchronize()
                self._graph = g
                self.info.mode = "graph"
            except Exception as exc:  # noqa: BLE001 - fall back to plain batched launches
                self._graph = None
                self.info.note = f"CUDA graph capture failed, plain launches: {type(exc).__name__}"
                try:
                    torch.cuda.synchronize()
                except Exception:  # noqa: BLE001
                    pass
        self._prepared = True

    def time(self, reps: int) -> list[float]:
        """`reps` samples, seconds per launch; L2 flushed before each sample, outside the events."""
        import torch

        if not self._prepared:
            self._prepare()
        batch = int(self._batch or 1)
        out: list[float] = []
        if self._graph is not None:
            pairs = []
            for _ in range(reps):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                if self.flusher is not None:
                    self.flusher.flush()
                start.record()
                self._graph.replay()
                end.record()
                pairs.append((start, end))
            torch.cuda.synchronize()
            return [s.elapsed_time(e) / 1e3 / batch for s, e in pairs]
        pairs = []
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            if self.flusher is not None:
                self.flusher.flush()
            start.record()
            for _ in range(batch):
                self.fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        out = [s.elapsed_time(e) / 1e3 / batch for s, e in pairs]
        return out

    def close(self) -> None:
        self._graph = None


def time_launches(fn: Callable[[], Any], reps: int, **kw: Any) -> list[float]:
    return LaunchTimer(fn, **kw).time(reps)
