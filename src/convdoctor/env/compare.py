"""`convdoctor env --compare A.json B.json ...`: the facts that differ between machines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UsageError

# the facts worth comparing across nodes, as (label, path into report["facts"])
KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("OS", ("host", "value", "os")),
    ("distribution", ("host", "value", "distro")),
    ("Python", ("host", "value", "python")),
    ("convdoctor", ("host", "value", "convdoctor")),
    ("driver", ("driver", "value", "version")),
    ("kernel module", ("driver", "value", "kernel_module")),
    ("CUDA (driver)", ("driver", "value", "cuda_driver")),
    ("GPU count", ("gpus", "value", "count")),
    ("CUDA_VISIBLE_DEVICES", ("gpus", "value", "cuda_visible_devices")),
    ("torch", ("torch", "value", "version")),
    ("torch CUDA", ("torch", "value", "cuda")),
    ("cuDNN compiled", ("torch", "value", "cudnn_compiled")),
    ("cuDNN runtime", ("torch", "value", "cudnn_runtime")),
    ("LD_LIBRARY_PATH", ("environ", "value", "LD_LIBRARY_PATH")),
    ("tensorflow", ("tensorflow", "value", "version")),
)


def load(path: str) -> dict[str, Any]:
    from ..jsonfile import read_json

    if not Path(path).exists():
        raise UsageError(f"--compare: {path}: no such file", hint="write one per machine with: convdoctor env --json > NODE.json")
    data = read_json(path, what="--compare: report", max_bytes=64 << 20)
    if not isinstance(data, dict) or data.get("kind") != "env" or "facts" not in data:
        raise UsageError(f"--compare: {path}: not a convdoctor env report", hint="use the output of: convdoctor env --json")
    return data


def _dicts(items: Any) -> list[dict[str, Any]]:
    """The objects of a list read from a report file (anything else in it is skipped)."""
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def _get(d: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def rows(reports: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per fact that differs: {"fact": label, "values": {machine: value}}."""
    table: dict[str, dict[str, Any]] = {}
    for name, rep in reports.items():
        facts = rep["facts"]
        for label, path in KEYS:
            table.setdefault(label, {})[name] = _get(facts, path)
        for dev in _dicts(_get(facts, ("gpus", "value", "devices"))):
            table.setdefault(f"GPU {dev.get('index')}", {})[name] = f"{dev.get('name')} sm_{str(dev.get('cc', '')).replace('.', '')}"
        for c in _dicts(_get(facts, ("libraries", "value", "copies"))):
            if c.get("family") in ("cudnn", "cudart") and not c.get("same_file_as"):
                table.setdefault(f"{c.get('name')} @ {c.get('dir')}", {})[name] = f"{c.get('version') or '?'} cuda{c.get('cuda_major') or '?'}"
        table.setdefault("findings", {})[name] = ",".join(sorted({str(f.get("id")) for f in _dicts(rep.get("findings"))})) or "-"
    out = []
    for label, vals in table.items():
        full = {n: vals.get(n) for n in reports}
        if len({json.dumps(v, sort_keys=True) for v in full.values()}) > 1:
            out.append({"fact": label, "values": full})
    return out


def render(reports: dict[str, dict[str, Any]], diff: list[dict[str, Any]]) -> str:
    if not diff:
        return f"{len(reports)} machines: no differences in the compared facts."
    names = list(reports)
    w0 = max(len("fact"), *(len(r["fact"]) for r in diff))
    ws = [max(len(n), *(len(str(r["values"][n])) for r in diff)) for n in names]
    lines = ["  ".join(["fact".ljust(w0), *(n.ljust(w) for n, w in zip(names, ws, strict=True))])]
    lines.append("  ".join(["-" * w0, *("-" * w for w in ws)]))
    for r in diff:
        lines.append("  ".join([r["fact"].ljust(w0), *(str(r["values"][n]).ljust(w) for n, w in zip(names, ws, strict=True))]))
    return "\n".join(lines)
