"""The mined message templates: well-formed, valid causes, regexes that match and never backtrack
catastrophically."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "src/convdoctor/explain/data/templates"
CAUSES = Path(__file__).resolve().parents[2] / "src/convdoctor/explain/data/causes.json"
CAUSE_IDS = set(json.loads(CAUSES.read_text())["causes"])
ROLES = {"failure", "context", "noise"}
REQUIRED = {"id", "framework", "text", "regex", "example", "file", "condition", "role", "causes", "rationale"}
LONG_LINE = "a" * 100_000


def _template_files() -> list[Path]:
    return sorted(p for p in TEMPLATES.glob("*.json") if p.name != "cuda_errors.json")


def _templates() -> list[tuple[str, dict]]:
    rows = []
    for path in _template_files():
        for t in json.loads(path.read_text())["templates"]:
            rows.append((f"{path.stem}:{t.get('id')}", t))
    return rows


ALL = _templates()


def _check_causes(where: str, causes: dict, role: str) -> None:
    assert causes, f"{where}: no causes"
    assert set(causes) <= CAUSE_IDS, f"{where}: unknown cause ids {set(causes) - CAUSE_IDS}"
    assert all(isinstance(w, (int, float)) and 0 < w <= 1 for w in causes.values()), where
    assert role in ROLES, f"{where}: role {role!r}"
    if role == "noise":
        assert "harmless-warning" in causes, f"{where}: noise without harmless-warning"


def test_enough_templates_from_enough_sources() -> None:
    assert len(_template_files()) >= 7
    assert len(ALL) >= 250


def test_every_file_names_its_source() -> None:
    for path in _template_files():
        src = json.loads(path.read_text())["source"]
        assert src.get("repo") and src.get("version") and src.get("url"), path.name


def test_ids_are_unique() -> None:
    ids = [t["id"] for _, t in ALL]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("where,t", ALL, ids=[w for w, _ in ALL])
def test_template(where: str, t: dict) -> None:
    assert REQUIRED <= set(t), f"{where}: missing {REQUIRED - set(t)}"
    _check_causes(where, t["causes"], t["role"])
    rx = re.compile(t["regex"])
    assert rx.search(t["example"]), f"{where}: regex does not match its example"
    # The regex must not swallow a line that is not the message.
    assert not rx.search("nothing to see here\n" * 10), where
    # A guard against catastrophic backtracking, not a speed test: every template scans the
    # 100 kB line in about a millisecond; one that backtracks quadratically on it takes seconds
    # (5e9 steps) or never ends. The budget is a thousand times the scan, so load never fails it.
    t0 = time.perf_counter()
    rx.search(LONG_LINE)
    assert time.perf_counter() - t0 < 1.0, f"{where}: backtracks on a 100 kB line"


def test_examples_are_unique_to_few_templates() -> None:
    """An example should be claimed by its own template and only a handful of generic ones."""
    compiled = [(t["id"], re.compile(t["regex"])) for _, t in ALL]
    for where, t in ALL:
        hits = [tid for tid, rx in compiled if rx.search(t["example"])]
        assert t["id"] in hits
        assert len(hits) <= 6, f"{where}: example matched by {hits}"


def test_cuda_error_table() -> None:
    data = json.loads((TEMPLATES / "cuda_errors.json").read_text())
    runtime = {r["name"]: r for r in data["runtime"]}
    driver = {r["name"]: r for r in data["driver"]}
    assert len(runtime) >= 100 and len(driver) >= 90
    for where, row in [*runtime.items(), *driver.items()]:
        assert isinstance(row["number"], int)
        _check_causes(where, row["causes"], row["role"])
        assert row["rationale"]
    expect = {
        "cudaErrorNoDevice": (100, "no-driver"),
        "cudaErrorInsufficientDriver": (35, "driver-too-old"),
        "cudaErrorNoKernelImageForDevice": (209, "arch-unsupported"),
        "cudaErrorMemoryAllocation": (2, "gpu-out-of-memory"),
        "cudaErrorECCUncorrectable": (214, "hardware-fault"),
        "cudaErrorIllegalAddress": (700, "illegal-memory-access"),
        "cudaErrorSystemDriverMismatch": (803, "driver-library-mismatch"),
        "cudaErrorCompatNotSupportedOnDevice": (804, "forward-compat-unsupported"),
    }
    for name, (number, cause) in expect.items():
        row = runtime[name]
        assert row["number"] == number
        assert max(row["causes"], key=row["causes"].get) == cause
    assert runtime["cudaErrorNoDevice"]["description"] == "no CUDA-capable device is detected"
    assert runtime["cudaErrorNoKernelImageForDevice"]["legacy_number"] == 48
    assert driver["CUDA_ERROR_ILLEGAL_ADDRESS"]["number"] == 700
    assert max(driver["CUDA_ERROR_ILLEGAL_ADDRESS"]["causes"], key=driver["CUDA_ERROR_ILLEGAL_ADDRESS"]["causes"].get) == "illegal-memory-access"
