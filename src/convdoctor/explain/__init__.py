"""`convdoctor explain`: from a cuDNN/CUDA error message (or a whole log) to its root cause and fix.

Import-light on purpose (no torch): `explain(exc_or_text)` returns a `Diagnosis`;
`install_excepthook()` prints the diagnosis under the traceback of a crashing script.
"""

from __future__ import annotations

import os
import sys
import traceback
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .live import LiveChecks
    from .model import Diagnosis

__all__ = ["LiveChecks", "explain", "explain_file", "install_excepthook"]


def _text_of(obj: Any) -> str:
    if isinstance(obj, BaseException):
        return "".join(traceback.format_exception(type(obj), obj, obj.__traceback__))
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).decode("utf-8", errors="replace")
    if obj is None:
        return ""
    return str(obj)


def __getattr__(name: str) -> Any:
    if name in ("LiveChecks", "Diagnosis"):
        from . import live, model

        return live.LiveChecks if name == "LiveChecks" else model.Diagnosis
    raise AttributeError(name)


def _live(live: bool | LiveChecks) -> LiveChecks | None:
    from .live import LiveChecks

    if isinstance(live, LiveChecks):
        return live
    return LiveChecks() if live else None


def explain(exc_or_text: Any, *, live: bool | LiveChecks = False) -> Diagnosis:
    """Explain an exception, an error message or a whole log (str/bytes).

    live=True also confirms the causes on this machine (environment doctor, check_conv on the parsed
    shapes); pass a `LiveChecks(env=..., check_conv=...)` to inject the providers.
    """
    from .engine import analyze
    from .scan import scan_bytes

    if isinstance(exc_or_text, (bytes, bytearray, memoryview)):
        data = bytes(exc_or_text)
    else:
        data = _text_of(exc_or_text).encode("utf-8", errors="replace")
    res = scan_bytes(data)
    looked = {"source": "exception" if isinstance(exc_or_text, BaseException) else "text",
              "bytes": res.total_bytes, "total_lines": res.total_lines,
              "binary_fraction": round(res.binary_fraction, 3)}
    return analyze(res.lines, looked_at=looked, live=_live(live))


def explain_file(path: str | os.PathLike[str], *, live: bool | LiveChecks = False,
                 progress: Any = None) -> Diagnosis:
    """Explain a log file of any size (streamed; two processes for large files).

    progress: an optional callable(done_bytes, total_bytes).
    """
    import time

    from .engine import analyze
    from .scan import scan_file

    t0 = time.perf_counter()
    res = scan_file(os.fspath(path), progress=progress)
    looked = {"source": os.fspath(path), "bytes": res.total_bytes, "total_lines": res.total_lines,
              "dropped_lines": res.dropped, "binary_fraction": round(res.binary_fraction, 3),
              "scan_s": round(time.perf_counter() - t0, 3)}
    return analyze(res.lines, looked_at=looked, live=_live(live))


def install_excepthook(*, live: bool = False, stream: Any = None) -> None:
    """Chain a sys.excepthook that prints convdoctor's diagnosis under the normal traceback."""
    previous = sys.excepthook

    def hook(etype: type[BaseException], value: BaseException, tb: Any) -> None:
        previous(etype, value, tb)
        out = stream or sys.stderr
        try:
            if value.__traceback__ is None:
                value = value.with_traceback(tb)
            diag = explain(value, live=live)
            if diag.cause_id != "unknown":
                print("\n--- convdoctor explain ---", file=out)
                print(diag.render(), file=out)
        except Exception as exc:  # noqa: BLE001 - never hide the user's traceback
            print(f"(convdoctor explain failed: {type(exc).__name__}: {exc})", file=out)

    hook.__convdoctor__ = True  # type: ignore[attr-defined]
    sys.excepthook = hook


class _CallableModule(types.ModuleType):
    """`convdoctor.explain` is both this package and the function: once the package is imported,
    Python binds the name on `convdoctor` to the module, so the module itself must be callable."""

    def __call__(self, exc_or_text: Any, *, live: bool | LiveChecks = False) -> Diagnosis:
        return explain(exc_or_text, live=live)


sys.modules[__name__].__class__ = _CallableModule
