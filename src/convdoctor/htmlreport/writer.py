"""Writing the page where the user asked for it, and nowhere else.

The page is written to a temporary file beside its destination and renamed over it, so a reader
never sees half a page and a failure leaves the previous file as it was. What is at the path is
checked first: a directory, a device, a pipe or a socket is never replaced; a file that is one of
the report's inputs is never replaced; and a file at the default path (the user named no --out)
is replaced only when it is a page this command wrote. A symbolic link is followed: its target is
the file replaced.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable

from ..errors import UsageError
from .page import GENERATOR

DEFAULT_OUT = "convdoctor-report.html"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISFIFO, "a pipe"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _ours(path: str) -> bool:
    """The file is a page written by `convdoctor report` (its head names the generator)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8192)
    except OSError:
        return False
    return f'name="generator" content="{GENERATOR}'.encode() in head


def check_out(path: str, *, flag: str = "--out", named: bool = True,
              inputs: Iterable[str] = ()) -> str:
    """The file the page will replace or create (a link's target), or a UsageError saying why
    the path cannot take it. Nothing is written."""
    if not path:
        raise UsageError(f"{flag}: the path is empty; name an .html file")
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{flag} {path} is {_kind(st.st_mode)}: it is never replaced; name a "
                         "file for the page")
    for src in inputs:
        if src and os.path.exists(src) and os.path.realpath(src) == target:
            raise UsageError(f"{flag} {path} is one of the report's inputs; it is never "
                             "replaced: name another file for the page")
    if st is not None and not named and not _ours(target):
        raise UsageError(f"{path} exists and is not a page convdoctor report wrote; it is not "
                         "replaced: name the page's file with --out")
    parent = os.path.dirname(target) or "."
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path}: the directory {parent} does not exist")
    return target


def write_page(path: str, html: str, *, flag: str = "--out", named: bool = True,
               inputs: Iterable[str] = ()) -> tuple[str, int]:
    """Write `html` at `path` atomically; returns (the file written, bytes)."""
    target = check_out(path, flag=flag, named=named, inputs=inputs)
    data = html.encode("utf-8")
    parent = os.path.dirname(target) or "."
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        mode = 0o666 & ~mask
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                   dir=parent)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write in {parent}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise UsageError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
        raise
    return target, len(data)
