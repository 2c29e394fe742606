"""The database key of a tuning environment: the device identity and the versions, apart."""

from __future__ import annotations

import json

from .sqlfile import SCHEMA_VERSION

# Environment parts that, when they change, make a stored timing stale (not merely another device).
VERSION_KEYS = ("driver", "cuda_runtime", "cudnn", "cudnn_frontend", "cudnn_frontend_backend",
                "triton", "kernels", "settings",
                "torch", "mkldnn", "onednn", "schema")


def split_env(env: dict[str, str]) -> tuple[str, str]:
    """(device_key, versions_key): canonical JSON of the identity and of the version parts."""
    full = {str(k): str(v) for k, v in env.items()}
    full.setdefault("schema", str(SCHEMA_VERSION))
    ident = {k: v for k, v in sorted(full.items()) if k not in VERSION_KEYS}
    vers = {k: v for k, v in sorted(full.items()) if k in VERSION_KEYS}
    return (json.dumps(ident, sort_keys=True, separators=(",", ":")),
            json.dumps(vers, sort_keys=True, separators=(",", ":")))
