"""convdoctor check: find convolutions cuDNN will reject (or run slowly) before it sees them.

- `check_conv(x_shape, w_shape, ...)`: one convolution from shapes (no torch needed).
- `check_model(model, example_inputs or input_shape=...)`: traces with meta tensors, checks each conv.
- `validate(model)`: runtime guard raising `ConvConfigError` (layer, problem, fix) before dispatch.
- `trace_convs(model, ...)`, `load_model(spec)`, `parse_shape(text)`: shared with tune/optimize.

Import-light: nothing here imports torch until a function that needs it is called.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "check_conv": "convdoctor.check.checker",
    "check_call": "convdoctor.check.checker",
    "check_model": "convdoctor.check.api",
    "min_input_shape": "convdoctor.check.api",
    "validate": "convdoctor.check.guard",
    "unvalidate": "convdoctor.check.guard",
    "ConvConfigError": "convdoctor.check.guard",
    "check_onnx": "convdoctor.check.onnx_check",
    "trace_convs": "convdoctor.check.trace",
    "ConvCall": "convdoctor.check.trace",
    "load_model": "convdoctor.check.models",
    "parse_shape": "convdoctor.check.models",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'convdoctor.check' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
