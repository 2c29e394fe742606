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
    keys: tuple[str, ...] | None = None  # lower-case literals, one of which any match contains

    def may_match(self, low: str) -> bool:
        """Cheap gate on the lower-cased line before the regex runs."""
        return self.keys is None or any(k in low for k in self.keys)


def required_literals(pattern: str) -> tuple[str, ...] | None:
    """For each top-level alternative of `pattern`, its longest run of literal characters (>= 3).

    A line can only match if it contains one of them; None when some alternative has no such run.
    Derived from the regex parse tree, so it cannot drift from the pattern.
    """
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10
        import sre_parse  # type: ignore[no-redef]
    tree = list(sre_parse.parse(pattern))
    branches: list[list] = [tree]
    if len(tree) == 1:
        op, av = tree[0]
        if str(op) == "BRANCH":
            branches = [list(b) for b in av[1]]
        elif str(op) == "SUBPATTERN" and len(list(av[-1])) == 1 and str(list(av[-1])[0][0]) == "BRANCH":
            branches = [list(b) for b in list(av[-1])[0][1][1]]
    keys: list[str] = []
    for seq in branches:
        best, run = "", ""
        for op, av in seq:
            if str(op) == "LITERAL":
                run += chr(av)
            else:
                best = max(best, run, key=len)
                run = ""
        best = max(best, run, key=len)
        if len(best) < 3:
            return None
        keys.append(best.lower())
    return tuple(dict.fromkeys(keys))


def _load(name: str) -> Any:
    text = resources.files("convdoctor.explain").joinpath("data", name).read_text(encoding="utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def patterns() -> tuple[Pattern, ...]:
    out = []
    for p in _load("patterns.json")["patterns"]:
        out.append(Pattern(id=p["id"], regex=re.compile(p["regex"], re.IGNORECASE),
                           causes={k: float(v) for k, v in p["causes"].items()}, role=p["role"],
                           examples=tuple(p.get("examples", ())), note=p.get("note", ""),
                           keys=required_literals(p["regex"])))
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
