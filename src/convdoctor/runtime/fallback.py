"""Which convolution errors a retry on another engine can survive, and the warning/diagnosis text.

Recoverable: a cuDNN status (engine not supported, bad plan, internal error), a workspace that could
not be allocated, a plan that failed to build or run. The route moves to the next executor of its
chain (next-best tuned candidate, PyTorch heuristics, cuDNN deterministic, cuDNN disabled) and the
same call is retried, so no step is lost. Unrecoverable: sticky CUDA errors (illegal memory access,
launch failure, device assert): the context is unusable, so we raise `UnrecoverableConvError` with the
diagnosis instead of retrying. Patterns are data (data/routes.json) with their sources.

Fault injection (tests): `set_fault_hook(fn)`; `fn(site_name, direction, exec_key)` is called before
every executor runs and may raise, e.g. a RuntimeError carrying a real cuDNN status text.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from ..engines.flag_exec import route_table

FaultHook = Callable[[str, str, str], None]
_fault_hook: FaultHook | None = None


class ConvRouteWarning(UserWarning):
    """A routed convolution failed and moved down its fallback chain (the step still ran)."""


class UnrecoverableConvError(RuntimeError):
    """A sticky CUDA error inside a routed convolution; carries convdoctor's diagnosis."""


def set_fault_hook(fn: FaultHook | None) -> FaultHook | None:
    """Install (or with None remove) the fault-injection hook; returns the previous one."""
    global _fault_hook
    prev, _fault_hook = _fault_hook, fn
    return prev


def get_fault_hook() -> FaultHook | None:
    return _fault_hook


def _patterns(name: str) -> list[str]:
    return [p.lower() for p in route_table()[name]["patterns"]]


def classify(exc: BaseException) -> str:
    """'unrecoverable', 'recoverable' or 'other' (not a backend error: the user's own error)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    if any(p in text for p in _patterns("unrecoverable_patterns")):
        return "unrecoverable"
    if any(p in text for p in _patterns("recoverable_patterns")):
        return "recoverable"
    if type(exc).__name__ in ("OutOfMemoryError", "CudnnError", "cudnnGraphNotSupportedError",
                              "RouteNotBuilt"):
        return "recoverable"
    return "other"


def diagnose(exc: BaseException) -> str:
    """convdoctor's `explain` diagnosis of an error when that module is available, else ''."""
    try:
        from ..explain import explain  # type: ignore[attr-defined]
    except Exception:
        return ""
    try:
        result = explain(exc)
    except Exception:
        try:
            result = explain(str(exc))
        except Exception:
            return ""
    return _summarize(result)


def _summarize(result: object) -> str:
    if result is None:
        return ""
    causes = getattr(result, "causes", None)  # convdoctor.explain.Diagnosis
    if causes:
        top = causes[0]
        title = getattr(top, "title", "") or str(top)
        cid = getattr(top, "id", "")
        fix = getattr(top, "fix", "")
        return (f"[{cid}] " if cid else "") + title + (f" (fix: {fix})" if fix else "")
    for attr in ("summary", "title", "cause"):
        val = getattr(result, attr, None)
        if isinstance(val, str) and val:
            fix = getattr(result, "fix", "")
            return f"{val}" + (f" (fix: {fix})" if isinstance(fix, str) and fix else "")
    findings = getattr(result, "findings", None)
    if findings:
        f = findings[0]
        title = getattr(f, "title", "") or str(f)
        fix = getattr(f, "fix", "")
        return f"{title}" + (f" (fix: {fix})" if fix else "")
    if isinstance(result, (list, tuple)) and result:
        return _summarize(result[0])
    text = str(result)
    return text.splitlines()[0][:300] if text else ""


_warned: set[tuple[str, str, str]] = set()


def warn_once(site: str, direction: str, failed_key: str, next_key: str,
              exc: BaseException) -> None:
    tag = (site, direction, failed_key)
    if tag in _warned:
        return
    _warned.add(tag)
    diag = diagnose(exc)
    first = str(exc).strip().splitlines()[0][:240] if str(exc).strip() else type(exc).__name__
    msg = (f"convdoctor: {direction} of {site} failed on {failed_key}: {first}; "
           f"retried on {next_key} (this layer stays on it)")
    if diag:
        msg += f". Diagnosis: {diag}"
    warnings.warn(msg, ConvRouteWarning, stacklevel=4)


def reset_warnings() -> None:
    _warned.clear()
