"""Streaming pre-filter: find the few lines of a (possibly huge) log that can matter, with context.

A log is read in blocks. Each block is lower-cased once and searched with `bytes.find` for a handful
of anchor substrings (C speed, no per-line Python loop); only lines holding an anchor are kept, with
a window of neighbouring lines. Memory is bounded: at most `head_limit` kept lines from the start and
`tail_limit` from the end are stored (failures are at the end, noise at the start). Large files are
split between two worker processes.
"""

from __future__ import annotations

import os
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

# Lower-case anchors: every failure message in the knowledge base contains at least one of them
# (checked by tests/explain/test_explain_kb.py against every pattern example and corpus entry).
ANCHORS: tuple[bytes, ...] = (
    b"cud", b"rror", b"memory", b"driver", b"dnn", b"xid", b"fallen", b"exhaust", b"oom",
    b"implemented",
)
BLOCK = 8 << 20          # bytes per read
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

    @property
    def binary_fraction(self) -> float:
        return self.nontext_bytes / self.sampled_bytes if self.sampled_bytes else 0.0


_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 13)) + b"\x7f"
_DELETE_TEXT = bytes(c for c in range(256) if bytes([c]) not in _CONTROL)


class Scanner:
    """Incremental scanner: feed() bytes as they arrive, then result()."""

    def __init__(self, *, before: int = 8, after: int = 14, head_limit: int = 3000,
                 tail_limit: int = 20000) -> None:
        self.before = before
        self.after = after
        self.head_limit = head_limit
        self.tail_limit = tail_limit
        self._head: dict[int, str] = {}
        self._tail: OrderedDict[int, str] = OrderedDict()
        self._carry = b""
        self._line_base = 0          # lines fully consumed before the current block
        self._prev_tail: deque[str] = deque(maxlen=before)  # last lines before this block
        self._pending_after = 0      # context lines still wanted from the next block
        self.res = ScanResult()

    # -- storage -------------------------------------------------------------------------------
    def _keep(self, lineno: int, text: str) -> None:
        if lineno in self._head or lineno in self._tail:
            return
        if len(self._head) < self.head_limit and (not self._tail):
            self._head[lineno] = text
            return
        self._tail[lineno] = text
        if len(self._tail) > self.tail_limit:
            self._tail.popitem(last=False)
            self.res.dropped += 1

    # -- scanning ------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.res.total_bytes += len(data)
        if self.res.sampled_bytes < (4 << 20):
            sample = data[: 1 << 16]
            self.res.sampled_bytes += len(sample)
            self.res.nontext_bytes += len(sample.translate(None, _DELETE_TEXT))
        buf = self._carry + data
        cut = buf.rfind(b"\n")
        if cut == -1:
            if len(buf) > MAX_CARRY:
                self._scan_block(buf + b"\n")
                self._carry = b""
            else:
                self._carry = buf
            return
        self._carry = buf[cut + 1:]
        if len(self._carry) > MAX_CARRY:
            self._scan_block(buf + b"\n")
            self._carry = b""
            return
        self._scan_block(buf[: cut + 1])

    def close(self) -> ScanResult:
        if self._carry:
            self._scan_block(self._carry + b"\n")
            self._carry = b""
        lines = sorted({**self._head, **self._tail}.items())
        self.res.lines = lines
        self.res.total_lines = self._line_base
        return self.res

    def _scan_block(self, block: bytes) -> None:
        """`block` ends with a newline and holds whole lines."""
        nlines = block.count(b"\n")
        low = block.lower()
        starts: set[int] = set()
        for anchor in ANCHORS:
            i = low.find(anchor)
            while i != -1:
                s = low.rfind(b"\n", 0, i) + 1
                e = low.find(b"\n", i)
                starts.add(s)
                i = low.find(anchor, e + 1) if e != -1 else -1
        # context lines owed from the previous block
        if self._pending_after:
            pos = 0
            for k in range(min(self._pending_after, nlines)):
                e = block.find(b"\n", pos)
                self._keep(self._line_base + k + 1, _text(block[pos:e]))
                pos = e + 1
            self._pending_after = max(0, self._pending_after - nlines)
        if starts:
            self.res.anchor_lines += len(starts)
            ordered = sorted(starts)
            if len(ordered) > 4000:  # pathological logs: keep windows only near the ends
                keep_first = 200 if len(self._head) < self.head_limit and not self._tail else 0
                ordered = ordered[:keep_first] + ordered[-3000:]
            counted_to, line_at = 0, 0
            for s in ordered:
                line_at += block.count(b"\n", counted_to, s)
                counted_to = s
                self._keep_window(block, s, line_at, nlines)
        tail_lines = block[max(0, len(block) - 64 * 1024):].split(b"\n")[-self.before - 1:-1]
        self._prev_tail.extend(_text(t) for t in tail_lines)
        self._line_base += nlines

    def _keep_window(self, block: bytes, start: int, idx: int, nlines: int) -> None:
        lineno = self._line_base + idx + 1
        pos, k = start, 1
        while k <= self.before:
            if pos == 0:  # the rest of the window is in the previous block
                prev = list(self._prev_tail)[-(self.before - k + 1):]
                n = len(prev)
                for j, text in enumerate(prev):
                    self._keep(lineno - k - (n - 1 - j), text)
                break
            p = block.rfind(b"\n", 0, pos - 1) + 1
            self._keep(lineno - k, _text(block[p:pos - 1]))
            pos, k = p, k + 1
        pos = start
        last = self._line_base + nlines
        for k in range(self.after + 1):
            if lineno + k > last:
                self._pending_after = max(self._pending_after, self.after - k + 1)
                break
            e = block.find(b"\n", pos)
            self._keep(lineno + k, _text(block[pos:e]))
            pos = e + 1


def _text(raw: bytes) -> str:
    if len(raw) > MAX_LINE:
        raw = raw[:MAX_LINE]
    return raw.decode("utf-8", errors="replace").rstrip("\r")


# -- entry points ------------------------------------------------------------------------------

def scan_bytes(data: bytes) -> ScanResult:
    sc = Scanner()
    for i in range(0, len(data), BLOCK):
        sc.feed(data[i:i + BLOCK])
    return sc.close()


def scan_text(text: str) -> ScanResult:
    return scan_bytes(text.encode("utf-8", errors="replace"))


def scan_stream(stream: BinaryIO) -> ScanResult:
    sc = Scanner()
    while True:
        chunk = stream.read(BLOCK)
        if not chunk:
            break
        sc.feed(chunk)
    return sc.close()


def _scan_range(path: str, start: int, end: int) -> ScanResult:
    """Scan bytes [start, end) of `path`; start/end are already aligned to line starts."""
    sc = Scanner()
    with open(path, "rb") as fh:
        fh.seek(start)
        left = end - start
        while left > 0:
            chunk = fh.read(min(BLOCK, left))
            if not chunk:
                break
            left -= len(chunk)
            sc.feed(chunk)
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


def scan_file(path: str, *, workers: int | None = None) -> ScanResult:
    size = os.path.getsize(path)
    if workers is None:
        workers = 2 if size >= PARALLEL_MIN and (os.cpu_count() or 1) >= 2 else 1
    if workers <= 1:
        with open(path, "rb") as fh:
            return scan_stream(fh)
    with open(path, "rb") as fh:
        cuts = [0] + [_align(fh, size * k // workers) for k in range(1, workers)] + [size]
    ranges = [(cuts[k], cuts[k + 1]) for k in range(workers) if cuts[k + 1] > cuts[k]]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=len(ranges)) as pool:
        parts = list(pool.map(_scan_range, [path] * len(ranges), [r[0] for r in ranges],
                              [r[1] for r in ranges]))
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

