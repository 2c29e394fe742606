"""Large reports stay small: the page grows by a bounded number of bytes per tuned problem (per
layer of a model), so the 1,000 tuned problems and the 150-layer model of
benchmarks/bench_report.py stay under its 5 MB target; every page is well-formed and
self-contained. The pages are written from that benchmark's synthetic inputs, at 20 and 40
problems (layers). How long a page takes to write and to open is that benchmark's to print."""

from __future__ import annotations

import importlib.util
import json
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


@pytest.mark.parametrize("what, target", [("tuning", 1000), ("optimize", 150)])
def test_a_large_report_stays_under_the_size_target(tmp_path: Path, what: str, target: int,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    sizes = {}
    for n in (20, 40):
        src = tmp_path / f"{what}{n}.json"
        if what == "tuning":
            src.write_text(json.dumps(BENCH.synthetic_tuning(n)))
            flag = "--db"
        else:
            src.write_text(json.dumps(BENCH.synthetic_optimize(n)))
            flag = "--optimize"
        out = tmp_path / f"page{n}.html"
        assert main(["report", flag, str(src), "--out", str(out), "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert what in info["sections"]
        assert info["bytes"] == out.stat().st_size
        check_page(out.read_text(encoding="utf-8"))
        sizes[n] = info["bytes"]
    per_item = (sizes[40] - sizes[20]) / 20
    assert per_item > 0                                  # every problem (layer) is on the page
    projected = sizes[40] + (target - 40) * per_item
    assert projected < BENCH.SIZE_TARGET, (sizes, projected)
