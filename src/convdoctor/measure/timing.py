"""GPU timing: an L2 flush sized to the device, CUDA events, batched launches or CUDA graph replay.

`LaunchTimer(fn).time(reps)` returns one time per rep, in seconds per launch:
- before each rep the L2 is flushed (a memset over a buffer twice the device's L2), on the same
  stream, before the start event: the flush is outside the timed interval;
- then a GPU spin (`torch.cuda._sleep`) long enough to cover the CPU's enqueueing of the start
  event, the launches and the end event: without it the interval would include the host's launch
  latency (tens of microseconds for a PyTorch convolution call), which is not GPU time and would
  bias comparisons against paths with more host overhead (measured on an H100: a 16 us depthwise
  kernel timed as 72 us through PyTorch without the spin);
- a rep is `batch` back-to-back launches between two CUDA events (batch=1 for kernels of 50 us or
  more); for batches the launches are captured once into a CUDA graph and replayed, which removes
  the gaps between launches. Capture failures fall back to plain launches (`TimingInfo.mode`/note);
- only the first launch of a batch starts from a cold L2; batches are used only for kernels under
  50 us, whose working set mostly stays in L2 anyway (documented in docs/tune-gpu.md);
- every sample checks that the spin really covered it: the host time from the start event's
  enqueue to the end event's must stay under the spin's length. When the host was slower than at
  preparation (a cold call after switching candidates, a descheduled thread, a garbage
  collection), the GPU ran dry and the interval includes host time: the sample is retaken with a
  longer spin (`TimingInfo.retakes`). Measured on an H100: before this, one-shot
  screen samples of `torch:gemm` on a strided 1x1 layer (steady 77 us) read 140-230 us and the
  screen dropped the fastest candidate in 4 of 6 tuning runs; with it, the screen kept it every time
  (6 of 6 runs chose it), and 215 of 241 finalists of a 25-problem suite shard needed at least one
  retake (none stayed uncovered);
- a spin grown by a retake shrinks back once the host is quick again: after every covered
  sample the spin becomes what the last `shrink_window` covered samples needed (never below the
  spin sized at preparation). Why: a one-off host stall (a worker restart) grew wav2vec2
  pos_conv's spins to 6-7 ms for the rest of its tuning, for 0.5 ms kernels, so its 0.5 s budget
  held 5 rounds instead of 14 and the pick flipped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_FLUSHERS: dict[int, L2Flusher] = {}
_SPIN_HZ: dict[int, float] = {}


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


def spin_rate(device: int) -> float:
    """Cycles per second of `torch.cuda._sleep` on this device (calibrated once), 0 if absent."""
    import torch

    if device in _SPIN_HZ:
        return _SPIN_HZ[device]
    rate = 0.0
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        try:
            cycles = 2_000_000
            sleep(cycles)  # first call loads the kernel
            torch.cuda.synchronize()
            best = math.inf
            for _ in range(3):
                s = torch.cuda.Event(enable_timing=True)
                e = torch.cuda.Event(enable_timing=True)
                s.record()
                sleep(cycles)
                e.record()
                e.synchronize()
                best = min(best, s.elapsed_time(e) / 1e3)
            rate = cycles / best if best > 0 else 0.0
        except Exception:  # noqa: BLE001
            rate = 0.0
    _SPIN_HZ[device] = rate
    return rate


def best_event_s(fn: Callable[[], Any], reps: int = 5, *, warmup: bool = True) -> float:
    """Seconds of the fastest of `reps` runs of `fn`, each between two CUDA events, after one
    warm-up run unless `warmup=False` (no spin, no L2 flush: launch cost is included)."""
    import torch

    if warmup:
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e) / 1e3)
    return best


def spin(device: int, seconds: float) -> None:
    """Keep the GPU busy for about `seconds` on the current stream (no-op if unavailable)."""
    import torch

    rate = spin_rate(device)
    if rate > 0 and seconds > 0:
        torch.cuda._sleep(int(min(seconds, 0.05) * rate))


@dataclass
class TimingInfo:
    batch: int = 1
    mode: str = "events"          # "events" | "events+batch" | "graph"
    note: str = ""
    estimate_s: float = math.nan  # GPU time of one launch (spin-covered, no flush)
    cover_s: float = 0.0          # spin before each sample
    retakes: int = 0              # samples retaken because the host outran the spin
    uncovered: int = 0            # samples kept although still not covered (after the retries)
    shrinks: int = 0              # times a grown spin shrank back after covered samples
    max_cover_s: float = 0.0      # the longest spin a retake asked for


def longer_cover(host_s: float, cover_s: float) -> float | None:
    """None when a spin of `cover_s` covered `host_s` of enqueueing; else the longer spin to retry
    with (at most 50 ms, so a pathological host stall cannot stall the timer for long)."""
    if host_s < cover_s:
        return None
    return min(0.05, max(cover_for(host_s), 2.0 * cover_s))


def shrunk_cover(cover_s: float, base_s: float, recent_host_s: Sequence[float],
                 window: int = 4) -> float:
    """The spin to use after a covered sample: what the last `window` covered samples' host times
    needed (`cover_for` of their maximum), never below `base_s` (the spin sized at preparation) and
    never above the current `cover_s`. Unchanged until `window` covered samples are known."""
    if len(recent_host_s) < window:
        return cover_s
    need = max(base_s, cover_for(max(recent_host_s[-window:])))
    return min(cover_s, need)


def choose_batch(estimate_s: float, *, target_s: float = 200e-6, max_batch: int = 64,
                 auto_batch_below_s: float = 50e-6) -> int:
    """How many launches per event pair: 1 for kernels of `auto_batch_below_s` or more, else
    enough launches to fill about `target_s` (at most `max_batch`)."""
    if not math.isfinite(estimate_s) or estimate_s <= 0:
        return 1
    if estimate_s >= auto_batch_below_s:
        return 1
    return int(max(1, min(max_batch, math.ceil(target_s / estimate_s))))


def cover_for(host_s: float) -> float:
    """Spin length that covers `host_s` of host-side enqueueing, with margin."""
    return min(0.05, 1.5 * max(0.0, host_s) + 30e-6)


class SpinCover:
    """The pre-sample spin's length over a timer's life: `retake(host_s)` after each sample says
    whether it must be retaken (the host outran the spin: `longer_cover` grows it) and, after a
    covered sample, shrinks a grown spin back (`shrunk_cover`). Pure logic, unit-tested on the CPU."""

    def __init__(self, base_s: float, *, enabled: bool = True, window: int = 4) -> None:
        self.base_s = base_s
        self.cover_s = base_s
        self.enabled = enabled
        self.window = window
        self.hosts: list[float] = []
        self.retakes = self.uncovered = self.shrinks = 0
        self.max_cover_s = base_s

    def retake(self, host_s: float, *, last_try: bool = False) -> bool:
        longer = longer_cover(host_s, self.cover_s) if self.enabled else None
        if longer is None:
            self.hosts = (self.hosts + [host_s])[-self.window:]
            shrunk = shrunk_cover(self.cover_s, self.base_s, self.hosts, self.window)
            if shrunk < self.cover_s:
                self.cover_s = shrunk
                self.shrinks += 1
            return False
        self.cover_s = longer
        self.max_cover_s = max(self.max_cover_s, longer)
        if last_try:
            self.uncovered += 1
            return False
        self.retakes += 1
        return True


class LaunchTimer:
    """Times a callable on the current CUDA stream; reuse it for all reps of one candidate."""

    def __init__(self, fn: Callable[[], Any], *, device: int | None = None, flush: bool = True,
                 batch: int | None = None, graph: bool = True) -> None:
        import torch

        self.fn = fn
        self.device = torch.cuda.current_device() if device is None else int(device)
        self.flusher = flusher(self.device) if flush else None
        self.info = TimingInfo()
        self._batch = batch
        self._want_graph = graph
        self._graph: Any = None
        self._prepared = False
        self._cover = SpinCover(0.0)

    def _host_time(self, run: Callable[[], Any]) -> tuple[float, float]:
        """(host seconds to enqueue `run` between two events, event seconds incl. any gaps)."""
        import torch

        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        host = time.perf_counter() - t0
        end.synchronize()
        return host, start.elapsed_time(end) / 1e3

    def _estimate(self) -> float:
        """GPU time of one launch: spin-covered events around a single launch, median of 3
        (long kernels: the plain event time, host latency is then negligible)."""
        import torch

        first = [self._host_time(self.fn) for _ in range(2)]
        host = min(h for h, _ in first)
        plain = min(g for _, g in first)
        if plain > 1e-3:
            return plain
        cover = cover_for(host)
        ts = []
        for _ in range(3):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            spin(self.device, cover)
            s.record()
            self.fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        ts.sort()
        return ts[1]

    def _prepare(self) -> None:
        import torch

        est = self._estimate()
        self.info.estimate_s = est
        if self._batch is None:
            self._batch = choose_batch(est)
        batch = self._batch
        self.info.batch = batch
        self.info.mode = "events" if batch == 1 else "events+batch"
        if batch > 1 and self._want_graph:
            try:
                torch.cuda.synchronize()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    self.fn()  # one launch on the capture stream first (handles, lazy init)
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=s):
                    for _ in range(batch):
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
        one_rep = (self._graph.replay if self._graph is not None
                   else (lambda: [self.fn() for _ in range(batch)]))
        self.info.cover_s = cover_for(min(self._host_time(one_rep)[0] for _ in range(2)))
        self._cover = SpinCover(self.info.cover_s, enabled=bool(spin_rate(self.device)),
                                window=self.shrink_window)
        self._prepared = True

    max_retakes = 3
    shrink_window = 4

    def _one(self, batch: int) -> tuple[float, float]:
        """(event seconds of one rep, host seconds spent enqueueing it after the spin)."""
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        if self.flusher is not None:
            self.flusher.flush()
        spin(self.device, self.info.cover_s)
        t0 = time.perf_counter()
        start.record()
        if self._graph is not None:
            self._graph.replay()
        else:
            for _ in range(batch):
                self.fn()
        end.record()
        host = time.perf_counter() - t0
        # wait for this sample before queueing the next, so each spin covers one sample's
        # enqueueing only (the GPU would otherwise run ahead into host gaps)
        end.synchronize()
        return start.elapsed_time(end) / 1e3, host

    def time(self, reps: int) -> list[float]:
        """`reps` samples, seconds per launch; L2 flushed and the host covered before each."""
        if not self._prepared:
            self._prepare()
        batch = int(self._batch or 1)
        cover = self._cover
        out = []
        for _ in range(reps):
            for attempt in range(self.max_retakes + 1):
                self.info.cover_s = cover.cover_s
                gpu_s, host_s = self._one(batch)
                if not cover.retake(host_s, last_try=attempt == self.max_retakes):
                    break
            out.append(gpu_s / batch)
        self.info.cover_s = cover.cover_s
        self.info.retakes, self.info.uncovered = cover.retakes, cover.uncovered
        self.info.shrinks, self.info.max_cover_s = cover.shrinks, cover.max_cover_s
        return out

    def close(self) -> None:
        self._graph = None


def time_launches(fn: Callable[[], Any], reps: int, **kw: Any) -> list[float]:
    return LaunchTimer(fn, **kw).time(reps)
