"""convdoctor: make GPU convolutions work and run fast.

The public API is loaded lazily so `import convdoctor` (and `convdoctor --help`) never imports torch:
- `check_conv`, `check_model`, `validate`, `ConvConfigError`  (convdoctor.check)
- `explain`, `install_excepthook`                            (convdoctor.explain)
- `optimize`, `restore`                                      (convdoctor.runtime)
- `diagnose`                                                 (convdoctor.env)
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "check_conv": "convdoctor.check",
    "check_model": "convdoctor.check",
    "validate": "convdoctor.check",
    "ConvConfigError": "convdoctor.check",
    "explain": "convdoctor.explain",
    "install_excepthook": "convdoctor.explain",
    "optimize": "convdoctor.runtime",
    "restore": "convdoctor.runtime",
    "diagnose": "convdoctor.env",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'convdoctor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
