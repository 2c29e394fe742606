"""Convolution kernels of convdoctor's own, in Triton, offered beside cuDNN's engines.

- `depthwise`: depthwise convolutions (groups == C == K, 1D/2D), forward and data gradient;
- `dwgrad`: split-reduction direct weight gradient of depthwise layers (kernels up to 7, strides
  1 and 2), one output column per lane or, in `dwgrad_cols`, several;
- `wgrad`: split-reduction implicit-GEMM weight gradient of ungrouped layers with a small weight;
- `smallc`: data gradient of ungrouped layers with at most 4 input channels;
- `fprop`: forward implicit GEMM of ungrouped fp32 1D/2D layers, reading NCHW in place.

Each module declares its engine (`ENGINE`, `convdoctor.engines.triton.TritonEngine`) and imports
Triton lazily: without Triton (CPU builds, or a torch build that does not ship it) the candidates
are not offered. `source_hash()` and `triton_version()` are part of the tuning database's version
key, so a result tuned with other kernel code or another Triton is stale, never served.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

_SOURCES = ("depthwise.py", "dwgrad.py", "dwgrad_cols.py", "wgrad.py", "smallc.py", "fprop.py")


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """The first 12 hex digits of the SHA-256 of the kernels' sources and their launch adapter
    (`convdoctor.engines.triton`)."""
    h = hashlib.sha256()
    for pkg, name in [("convdoctor.kernels", n) for n in _SOURCES] + [("convdoctor.engines",
                                                                       "triton.py")]:
        h.update(name.encode())
        h.update(resources.files(pkg).joinpath(name).read_bytes())
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def triton_version() -> str:
    """Triton's version, or "absent" where it does not import."""
    try:
        import triton
    except Exception:  # noqa: BLE001 - any import failure means no Triton here
        return "absent"
    return str(getattr(triton, "__version__", "unknown"))
