"""Streaming pre-filter: find the few lines of a (possibly huge) log that can matter, with context.

Inputs up to `SMALL` bytes are kept whole (every line is a candidate). Beyond that, a log is read in
blocks; each block is lower-cased once and searched for a handful of anchor substrings with C-level
literal searches (no per-line Python loop); only lines holding an anchor are kept, with a window of
neighbouring lines. Memory is bounded: at most `head_limit` kept lines from the start and
`tail_limit` from the end are stored (failures are at the end, noise at the start). Large files are
split between two worker processes.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

# Lower-case anchors, as few as possible (each costs one pass over the log). Every failure line of
# the knowledge base holds one of them, or sits inside the context window of a line that does:
# Python/XLA exceptions end in "...Error", CUDA/cuDNN names and XLA's cuda_dnn.cc lines hold "cud",
# NVML's mismatch holds "driver", TensorFlow's "DNN library is not found" holds "dnn", kernel lines
# hold "Xid", XLA/TF allocator failures hold "exhausted", MXNet's cuBLAS checks hold "cublas" and ONNX
# Runtime's input checks "INVALID_ARGUMENT". Checked by tests/explain/test_explain_kb.py.
ANCHORS: tuple[bytes, ...] = (b"cud", b"rror", b"driver", b"dnn", b"xid", b"exhaust", b"cublas",
                               b"invalid_arg")
_ANCHOR_RX = tuple(re.compile(re.escape(a)) for a in ANCHORS)
BLOCK = 8 << 20          # bytes per read
SMALL = 1 << 20          # inputs up to this size are analysed whole, without the pre-filter
LAST_LINES = 40          # the last lines of a log are always kept: a dying process prints its cause last
MAX_LINE = 4000          # characters kept of one line
MAX_CARRY = 1 << 20      # a "line" longer than this is cut (binary input without newlines)
PARALLEL_MIN = 96 << 20  # files at least this large are scanned by two processes


@dataclass
class ScanResult:
    lines: list[tuple[int, str]] = field(default_factory=list)  # (1-based line number, text)
    anchor_lines: int = 0       # lines that held an anchor
    total_lines: int = 0
    total_bytes: int = 0
    dropped: int = 0            # kept lines dropped from the middle to bound memory
    nontext_bytes: int = 0      # NUL and other control bytes seen in the sampled blocks
    sampled_bytes: int = 0
    whole: bool = False         # True when every line was kept (small input)

    @property
    def binary_fraction(self) -> float:
        return self.nontext_bytes / self.sampled_bytes if self.sampled_bytes else 0.0


_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 12, 13, 27)) + b"\x7f"


class Scanner:
    """Incremental scanner: feed() bytes as they arrive, then close() for the ScanResult."""

    def __init__(self, *, before: int = 8, after: int = 14, head_limit: int = 3000,
                 tail_limit: int = 20000, small: int = SMALL) -> None:
        self.before = before
        self.after = after
        self.head_limit = head_limit
        self.tail_limit = tail_limit
        self.small = small
        self._small_buf: bytearray | None = bytearray()
        self._head: dict[int, str] = {}
        self._tail: OrderedDict[int, str] = OrderedDict()
        self._carry = b""
        self._line_base = 0          # lines fully consumed before the current block
        self._prev_tail: deque[str] = deque(maxlen=max(before, LAST_LINES))  # last lines seen so far
        self._pending_after = 0      # context lines still wanted from the next block
        self.res = ScanResult()

    # -- storage -------------------------------------------------------------------------------
    def _keep(self, lineno: int, text: str) -> None:
        if lineno in self._head or lineno in self._tail:
            return
        if len(self._head) < self.head_limit and not self._tail:
            self._head[lineno] = text
            return
        self._tail[lineno] = text
        if len(self._tail) > self.tail_limit:
            self._tail.popitem(last=False)
            self.res.dropped += 1

    # -- feeding -------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.res.total_bytes += len(data)
        if self.res.sampled_bytes < (4 << 20):
            sample = data[: 1 << 16]
            self.res.sampled_bytes += len(sample)
            self.res.nontext_bytes += sum(sample.count(bytes([c])) for c in _CONTROL)
        if self._small_buf is not None:
            if len(self._small_buf) + len(data) <= self.small:
                self._small_buf += data
            else:
                self._small_buf = None
        first = data.find(b"\n")
        if first == -1:
            self._carry += data
            if len(self._carry) > MAX_CARRY:
                blk = self._carry + b"\n"
                self._carry = b""
                self._scan(blk, blk.lower(), 0, len(blk))
            return
        if self._carry:
            head = self._carry + data[: first + 1]
            self._carry = b""
            self._scan(head, head.lower(), 0, len(head))
            start = first + 1
        else:
            start = 0
        last = data.rfind(b"\n")
        if last + 1 > start:
            self._scan(data, data.lower(), start, last + 1)
        self._carry = data[last + 1:]

    def close(self) -> ScanResult:
        if self._carry:
            blk = self._carry + b"\n"
            self._carry = b""
            self._scan(blk, blk.lower(), 0, len(blk))
        self.res.total_lines = self._line_base
        if self._small_buf is not None:
            text = bytes(self._small_buf)
            self.res.lines = [(i, _text(t)) for i, t in enumerate(text.split(b"\n"), 1)
                              if i <= self._line_base or t]
            self.res.whole = True
            self._small_buf = None
            return self.res
        last = list(self._prev_tail)[-LAST_LINES:]
        for j, line in enumerate(last):
            self._keep(self._line_base - len(last) + 1 + j, line)
        self.res.lines = sorted({**self._head, **self._tail}.items())
        return self.res

    # -- scanning ------------------------------------------------------------------------------
    def _scan(self, data: bytes, low: bytes, start: int, end: int) -> None:
        """Scan data[start:end], which holds whole lines (end is just past a newline)."""
        nlines = data.count(b"\n", start, end)
        starts: set[int] = set()
        for rx in _ANCHOR_RX:
            m = rx.search(low, start, end)
            while m is not None:
                i = m.start()
                s = low.rfind(b"\n", start, i) + 1
                if s < start:
                    s = start
                starts.add(s)
                e = low.find(b"\n", i, end)
                m = rx.search(low, e + 1, end) if e != -1 else None
        if self._pending_after:
            pos = start
            for k in range(min(self._pending_after, nlines)):
                e = data.find(b"\n", pos, end)
                self._keep(self._line_base + k + 1, _text(data[pos:e]))
                pos = e + 1
            self._pending_after = max(0, self._pending_after - nlines)
        if starts:
            self.res.anchor_lines += len(starts)
            ordered = sorted(starts)
            if len(ordered) > 4000:  # pathological logs: keep windows only near the ends
                keep_first = 200 if len(self._head) < self.head_limit and not self._tail else 0
                ordered = ordered[:keep_first] + ordered[-3000:]
            counted_to, line_at = start, 0
            for s in ordered:
                line_at += data.count(b"\n", counted_to, s)
                counted_to = s
                self._keep_window(data, start, end, s, line_at, nlines)
        tail_from = max(start, end - 64 * 1024)
        tail_lines = data[tail_from:end].split(b"\n")[-max(self.before, LAST_LINES) - 1:-1]
        self._prev_tail.extend(_text(t) for t in tail_lines)
        self._line_base += nlines

    def _keep_window(self, data: bytes, start: int, end: int, s: int, idx: int, nlines: int) -> None:
        lineno = self._line_base + idx + 1
        pos, k = s, 1
        while k <= self.before:
            if pos <= start:  # the rest of the window is in the previous block
                prev = list(self._prev_tail)[-(self.before - k + 1):] if self.before - k + 1 > 0 else []
                n = len(prev)
                for j, text in enumerate(prev):
                    self._keep(lineno - k - (n - 1 - j), text)
                break
            p = data.rfind(b"\n", start, pos - 1) + 1
            if p < start:
                p = start
            self._keep(lineno - k, _text(data[p:pos - 1]))
            pos, k = p, k + 1
        pos = s
        last = self._line_base + nlines
        for k in range(self.after + 1):
            if lineno + k > last:
                self._pending_after = max(self._pending_after, self.after - k + 1)
                break
            e = data.find(b"\n", pos, end)
            self._keep(lineno + k, _text(data[pos:e]))
            pos = e + 1


def _text(raw: bytes) -> str:
    if len(raw) > MAX_LINE:
        raw = raw[:MAX_LINE]
    return raw.decode("utf-8", errors="replace").rstrip("\r")


# -- entry points ------------------------------------------------------------------------------

def scan_bytes(data: bytes, **kw: int) -> ScanResult:
    sc = Scanner(**kw)
    for i in range(0, len(data), BLOCK):
        sc.feed(data[i:i + BLOCK])
    return sc.close()


def scan_text(text: str, **kw: int) -> ScanResult:
    return scan_bytes(text.encode("utf-8", errors="replace"), **kw)


def scan_stream(stream: BinaryIO, **kw: int) -> ScanResult:
    sc = Scanner(**kw)
    while True:
        chunk = stream.read(BLOCK)
        if not chunk:
            break
        sc.feed(chunk)
    return sc.close()


_PROGRESS: Any = None  # a multiprocessing.Value shared with scan workers (bytes read so far)


def _init_worker(counter: Any) -> None:
    global _PROGRESS
    _PROGRESS = counter


def _scan_range(path: str, start: int, end: int) -> ScanResult:
    """Scan bytes [start, end) of `path`; start/end are already aligned to line starts."""
    sc = Scanner(small=0)
    with open(path, "rb") as fh:
        fh.seek(start)
        left = end - start
        while left > 0:
            chunk = fh.read(min(BLOCK, left))
            if not chunk:
                break
            left -= len(chunk)
            sc.feed(chunk)
            if _PROGRESS is not None:
                with _PROGRESS.get_lock():
                    _PROGRESS.value += len(chunk)
    return sc.close()


def _align(fh: BinaryIO, pos: int) -> int:
    """The offset of the first line start at or after `pos`."""
    if pos == 0:
        return 0
    fh.seek(pos - 1)
    while True:
        chunk = fh.read(1 << 16)
        if not chunk:
            return fh.tell()
        i = chunk.find(b"\n")
        if i != -1:
            return fh.tell() - len(chunk) + i + 1


def scan_file(path: str, *, workers: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> ScanResult:
    """Scan a log file; gzip-compressed logs (.gz or gzip magic) are decompressed on the fly.

    progress(done_bytes, total_bytes) is called now and then (for a progress bar).
    """
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        import gzip

        with gzip.open(path, "rb") as gz:
            return scan_stream(gz)  # type: ignore[arg-type]
    size = os.path.getsize(path)
    if workers is None:
        workers = 2 if size >= PARALLEL_MIN and (os.cpu_count() or 1) >= 2 else 1
    if workers <= 1:
        sc = Scanner()
        done = 0
        with open(path, "rb") as fh:
            while True:
                chunk = fh.read(BLOCK)
                if not chunk:
                    break
                sc.feed(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, size)
        return sc.close()
    with open(path, "rb") as fh:
        cuts = [0] + [_align(fh, size * k // workers) for k in range(1, workers)] + [size]
    ranges = [(cuts[k], cuts[k + 1]) for k in range(workers) if cuts[k + 1] > cuts[k]]
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    counter = multiprocessing.Value("q", 0)
    with ProcessPoolExecutor(max_workers=len(ranges), initializer=_init_worker,
                             initargs=(counter,)) as pool:
        futures = [pool.submit(_scan_range, path, a, b) for a, b in ranges]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            if progress is not None:
                progress(int(counter.value), size)
        parts = [f.result() for f in futures]
    return merge(parts)


def merge(parts: Iterable[ScanResult]) -> ScanResult:
    out = ScanResult()
    offset = 0
    lines: list[tuple[int, str]] = []
    for part in parts:
        lines.extend((n + offset, t) for n, t in part.lines)
        offset += part.total_lines
        out.anchor_lines += part.anchor_lines
        out.total_bytes += part.total_bytes
        out.dropped += part.dropped
        out.nontext_bytes += part.nontext_bytes
        out.sampled_bytes += part.sampled_bytes
    out.total_lines = offset
    out.lines = lines
    return out
