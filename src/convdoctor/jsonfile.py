"""Reading a JSON file a user names, with bounds: size, text encoding and nesting depth.

A file that is too large (or endless, like /dev/zero), not UTF-8 text (binary, UTF-16), not JSON,
or nested deeper than any convdoctor file is refused with a `UsageError` that names it; reading
never runs out of memory or stack. `.gz` files are read through gzip with the same bounds.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
from typing import Any

from .errors import UsageError

MAX_BYTES = 256 << 20
MAX_DEPTH = 64
_CHUNK = 1 << 20


def read_bytes(path: str | os.PathLike[str], *, what: str, max_bytes: int = MAX_BYTES) -> bytes:
    """At most `max_bytes` of the file (UsageError beyond), from a regular file, a pipe or a
    character device; `.gz` files decompressed (the bound applies to the decompressed size)."""
    p = os.fspath(path)
    if not p:
        raise UsageError(f"{what}: the path is empty")
    try:
        st = os.stat(p)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {p}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{what} {p} is a directory, not a file")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        raise UsageError(f"{what} {p} is not a file that can be read")
    chunks: list[bytes] = []
    total = 0
    try:
        opener: Any = gzip.open if p.endswith(".gz") else open
        with opener(p, "rb") as fh:
            while True:
                block = fh.read(_CHUNK)
                if not block:
                    break
                total += len(block)
                if total > max_bytes:
                    raise UsageError(f"{what} {p} is larger than {max_bytes >> 20} MiB; "
                                     "this is not a file convdoctor wrote")
                chunks.append(block)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise UsageError(f"cannot read {what} {p}: {getattr(exc, 'strerror', None) or exc}"
                         ) from None
    return b"".join(chunks)


def parse(data: bytes, *, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON from UTF-8 bytes (a BOM allowed), nested at most `max_depth` levels."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} is not UTF-8 text (byte {exc.start}: binary data, or another "
                         "encoding such as UTF-16); expected JSON") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not JSON ({exc.msg} at line {exc.lineno} column "
                         f"{exc.colno})") from None
    except RecursionError:
        raise UsageError(f"{what} is nested more than {max_depth} levels deep; "
                         "this is not a file convdoctor wrote") from None
    if depth(doc, max_depth) > max_depth:
        raise UsageError(f"{what} is nested more than {max_depth} levels deep; "
                         "this is not a file convdoctor wrote")
    return doc


def read_json(path: str | os.PathLike[str], *, what: str, max_bytes: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH) -> Any:
    """`parse(read_bytes(path))`: the JSON document of a file a user named."""
    data = read_bytes(path, what=what, max_bytes=max_bytes)
    return parse(data, what=f"{what} {os.fspath(path)}", max_depth=max_depth)


def depth(doc: Any, limit: int) -> int:
    """Nesting depth of a parsed document (1 for a scalar), counted up to `limit` + 1."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest
