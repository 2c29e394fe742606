"""What a candidate listing is doing right now, for the worker that watches it.

A listing (the cuDNN enumeration, a knob refinement) says what it does next (`listing_step`): the
kind of step, the unit a hang would leave out (a cuDNN engine, "eng69") and the plan. A tuning
worker writes each step to a file its parent watches, so when a step never returns (a cuDNN plan
can hang in its first run) the parent names it, leaves its unit out and lists again
(`convdoctor.tune.worker`). Without a listener every call is a no-op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

# ---------------------------------------------------------------------- listing steps
_STEP_SINK: Callable[[str, str, str], None] | None = None


def set_step_sink(sink: Callable[[str, str, str], None] | None
                  ) -> Callable[[str, str, str], None] | None:
    """Install the function that hears `listing_step`s (None: nobody listens); returns the old one."""
    global _STEP_SINK
    old, _STEP_SINK = _STEP_SINK, sink
    return old


# A prefix for the units of the steps reported inside `unit_prefix(...)`: a listing of another
# problem (the GPU backend's dual problem) names its engines "dual:eng69", so what hangs there is
# left out of that listing only, never out of the problem's own (engine ids belong to one graph).
_UNIT_PREFIX = ""


@contextlib.contextmanager
def unit_prefix(prefix: str) -> Iterator[None]:
    """Inside the block, `listing_step` units are reported as `prefix + unit`."""
    global _UNIT_PREFIX
    old, _UNIT_PREFIX = _UNIT_PREFIX, prefix
    try:
        yield
    finally:
        _UNIT_PREFIX = old


def listing_step(kind: str, unit: str, name: str = "") -> None:
    """Say what a backend's listing does next: `kind` ("build" a plan, "time" a plan, "engine": list
    an engine's knob settings), `unit` (what to leave out if this step never returns: for cuDNN the
    engine, "eng69"; inside `unit_prefix(p)`, `p + unit`), `name` (the plan). A no-op unless a
    worker listens; never raises."""
    sink = _STEP_SINK
    if sink is None:
        return
    try:
        sink(kind, _UNIT_PREFIX + unit if unit else unit, name)
    except Exception:  # noqa: BLE001 - diagnosis only: it must not cost the listing
        pass


def listing_record(backend: Any) -> dict[str, Any]:
    """The backend's record of its last listing (its optional `listing_info()`), checked to be a
    JSON-safe dict, or {}; a record that fails becomes {"record_error": why}. Never raises: the
    record is diagnosis only and must not cost the listing or the result's storage."""
    import json

    info = getattr(backend, "listing_info", None)
    if info is None:
        return {}
    try:
        d = info()
        if not isinstance(d, dict):
            return {}
        json.dumps(d)
    except Exception as exc:  # noqa: BLE001
        return {"record_error": f"listing record unavailable: {type(exc).__name__}: {exc}"[:200]}
    return dict(d)

