"""The knowledge base: message patterns, causes and their fixes, cuDNN status codes and the map from
other convdoctor findings to cause ids, all loaded from the JSON files in data/ (cached)."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

CAUSE_IDS: tuple[str, ...] = (
    "driver-too-old", "driver-library-mismatch", "no-driver", "forward-compat-unsupported",
    "cudnn-not-found", "cudnn-version-mismatch", "arch-unsupported", "cpu-only-build",
    "missing-dependency-lib", "gpu-out-of-memory", "input-too-small", "unsupported-dtype",
    "dtype-mismatch", "device-mismatch", "channel-mismatch", "tensor-too-large",
    "non-contiguous-input", "empty-tensor", "unsupported-config", "illegal-memory-access",
    "hardware-fault", "harmless-warning", "unknown",
)


@dataclass(frozen=True)
class Pattern:
    id: str
    regex: re.Pattern[str]
    causes: dict[str, float]
    role: str
    examples: tuple[dict[str, str], ...]
    note: str = ""


def _load(name: str) -> Any:
    text = resources.files("convdoctor.explain").joinpath("data", name).read_text(encoding="utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def patterns() -> tuple[Pattern, ...]:
    out = []
    for p in _load("patterns.json")["patterns"]:
        out.append(Pattern(id=p["id"], regex=re.compile(p["regex"], re.IGNORECASE),
                           causes={k: float(v) for k, v in p["causes"].items()}, role=p["role"],
                           examples=tuple(p.get("examples", ())), note=p.get("note", "")))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def causes() -> dict[str, dict[str, Any]]:
    return dict(_load("causes.json")["causes"])


@functools.lru_cache(maxsize=1)
def status_table() -> dict[str, Any]:
    return dict(_load("cudnn_status.json"))


@functools.lru_cache(maxsize=1)
def live_map() -> dict[str, Any]:
    return dict(_load("live_map.json"))
