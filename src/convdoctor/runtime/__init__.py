"""Run a PyTorch model on the tuned convolution engines: `optimize(model, ...)`, `restore(model)`.

Import-light: torch is imported only when one of these is called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["optimize", "restore", "report_of", "is_optimized"]


def optimize(model: Any, example_inputs: Any = None, train: bool = True, db: Any = None,
             tune_missing: bool = True, **kwargs: Any) -> Any:
    """Route each convolution of `model` to its tuned winner (see convdoctor.runtime.optimizer)."""
    from .optimizer import optimize as _optimize

    return _optimize(model, example_inputs, train, db, tune_missing, **kwargs)


def restore(model: Any) -> Any:
    """Undo `optimize` exactly: stock forwards, no hooks, parameters in their original layout."""
    from .optimizer import restore as _restore

    return _restore(model)


def report_of(model: Any) -> Any:
    """The `OptimizeReport` of an optimized model (plan per layer, measurements), or None."""
    from .optimizer import report_of as _report_of

    return _report_of(model)


def is_optimized(model: Any) -> bool:
    from .optimizer import is_optimized as _is_optimized

    return _is_optimized(model)
