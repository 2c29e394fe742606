"""The environment doctor: probe the driver, GPUs, CUDA/cuDNN libraries and frameworks, and find
what stops cuDNN convolutions from running (with the exact fix).

`diagnose(smoke=False, system=None) -> Report` is the entry point; nothing heavy is imported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..report import Report
    from .system import System

__all__ = ["diagnose"]


def diagnose(*, smoke: bool | None = False, system: System | None = None, **kw: Any) -> Report:
    """Probe the machine (or the injected `system`) and return a Report of kind "env".

    smoke: True runs the GPU smoke test, False skips it, None runs it when a GPU is visible.
    """
    from .engine import diagnose as _diagnose

    return _diagnose(smoke=smoke, system=system, **kw)
