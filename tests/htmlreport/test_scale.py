"""Large reports stay small and quick to open: 1,000 tuned problems and a 150-layer model, from
the synthetic inputs of benchmarks/bench_report.py, under 5 MB each and (where Chromium is
installed) opened, parsed and laid out in under 2 s."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path
from types import ModuleType

import pytest
from reportdata import ROOT
from test_page import check_page

from convdoctor.cli import main


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report",
                                                  ROOT / "benchmarks" / "bench_report.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = _bench()


@pytest.mark.slow
@pytest.mark.parametrize("what", ["tuning", "optimize"])
def test_large_report_is_small_and_opens_fast(tmp_path: Path, what: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / f"{what}.json"
    if what == "tuning":
        src.write_text(json.dumps(BENCH.synthetic_tuning(1000)))
        flag, expect = "--db", "tuning"
    else:
        src.write_text(json.dumps(BENCH.synthetic_optimize(150)))
        flag, expect = "--optimize", "optimize"
    out = tmp_path / "page.html"
    assert main(["report", flag, str(src), "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert expect in info["sections"]
    assert info["bytes"] == out.stat().st_size < BENCH.SIZE_TARGET
    check_page(out.read_text(encoding="utf-8"))
    browser = BENCH.chromium()
    if browser is None:
        return
    loads = [BENCH.open_ms(out, browser)[0] for _ in range(3)]
    assert statistics.median(loads) < BENCH.OPEN_TARGET_MS, loads
