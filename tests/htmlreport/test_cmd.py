"""`convdoctor report` on the command line: bad input is one line and exit 2, the page is written
atomically where the user named it, and never over a device, a directory or an input."""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from reportdata import BENCH_FP32_FPROP, BENCH_H200, OPT_RESNET, ROOT, optimize_payload

from convdoctor.cli import main
from convdoctor.errors import UsageError


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["report", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    assert err.startswith("convdoctor: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, err


@pytest.mark.parametrize("flag", ["--env", "--bench", "--optimize", "--db", "--peaks"])
def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str) -> None:
    rc, _, err = run(capsys, flag, str(tmp_path / "nope.json"), "--out", str(tmp_path / "r.html"))
    one_line_error(rc, err, "nope.json")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("content,needle", [
    (b"not json at all", "not JSON"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested"),
    (b'{"kind": "bench", "rows": []}', "not a convdoctor env report"),
    (b"[1, 2, 3]", "not a convdoctor env report"),
])
def test_bad_env_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes,
                      needle: str) -> None:
    p = tmp_path / "in.json"
    p.write_bytes(content)
    rc, _, err = run(capsys, "--env", str(p), "--out", str(tmp_path / "r.html"))
    one_line_error(rc, err, needle)


@pytest.mark.parametrize("flag,doc,needle", [
    ("--bench", {"kind": "bench", "rows": [{"problem": "x"}, 7]}, "row 1 is not an object"),
    ("--bench", {"kind": "env", "facts": {}}, "not a convdoctor bench result"),
    ("--optimize", {"kind": "bench", "rows": []}, "not an optimize result"),
    ("--db", {"records": []}, "not a tuning database"),
    ("--peaks", {"flops": "fast"}, "no peaks in it"),
])
def test_wrong_shape(capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, doc: object,
                     needle: str) -> None:
    p = tmp_path / "in.json"
    p.write_text(json.dumps(doc))
    rc, _, err = run(capsys, flag, str(p), "--out", str(tmp_path / "r.html"))
    one_line_error(rc, err, needle)


def test_db_that_is_not_a_database_is_left_alone(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    p = tmp_path / "tuning.sqlite3"
    p.write_bytes(b"SQLite format 3\x00" + b"\x01" * 200)
    before = p.read_bytes()
    rc, _, err = run(capsys, "--db", str(p), "--out", str(tmp_path / "r.html"))
    assert rc == 2 and "Traceback" not in err
    assert p.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["tuning.sqlite3"]


def test_writes_page_and_json_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    rc, stdout, err = run(capsys, "--bench", str(BENCH_H200), "--json", "--out", str(out))
    assert rc == 0, err
    info = json.loads(stdout)
    assert info["path"] == str(out) and info["bytes"] == out.stat().st_size
    assert info["sections"] == ["tuning", "roofline", "bench"]
    assert info["tuned_problems"] == 7 and info["bench_files"] == 1
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert os.listdir(tmp_path) == ["r.html"]          # no temporary file left behind


def test_out_never_replaces_a_device_a_directory_or_an_input(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    rc, _, err = run(capsys, "--bench", str(BENCH_H200), "--out", "/dev/null")
    one_line_error(rc, err, "/dev/null is a device")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    rc, _, err = run(capsys, "--bench", str(BENCH_H200), "--out", str(tmp_path))
    one_line_error(rc, err, "is a directory")
    mine = tmp_path / "bench.json.gz"
    mine.write_bytes(BENCH_H200.read_bytes())
    rc, _, err = run(capsys, "--bench", str(mine), "--out", str(mine))
    one_line_error(rc, err, "one of the report's inputs")
    assert mine.read_bytes() == BENCH_H200.read_bytes()
    link = tmp_path / "link.html"
    link.symlink_to(mine)
    rc, _, err = run(capsys, "--bench", str(mine), "--out", str(link))
    one_line_error(rc, err, "one of the report's inputs")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    rc, _, err = run(capsys, "--bench", str(BENCH_H200), "--out", str(fifo))
    one_line_error(rc, err, "is a pipe")


def test_named_out_is_replaced_atomically_keeping_its_mode_and_link(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "pages" / "report.html"
    target.parent.mkdir()
    target.write_text("old page")
    target.chmod(0o640)
    link = tmp_path / "latest.html"
    link.symlink_to(target)
    rc, _, err = run(capsys, "--bench", str(BENCH_H200), "--out", str(link))
    assert rc == 0, err
    assert link.is_symlink() and "<svg" in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert os.listdir(target.parent) == ["report.html"]


def test_default_out_replaces_only_its_own_page(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    notes = tmp_path / "convdoctor-report.html"
    notes.write_text("<html>my own notes</html>")
    rc, _, err = run(capsys, "--bench", str(BENCH_H200))
    one_line_error(rc, err, "not a page convdoctor report wrote")
    assert notes.read_text() == "<html>my own notes</html>"
    notes.unlink()
    assert run(capsys, "--bench", str(BENCH_H200))[0] == 0
    first = notes.read_text()
    assert run(capsys, "--bench", str(BENCH_FP32_FPROP))[0] == 0   # its own page: replaced
    assert notes.read_text() != first and "101 tuned problem" in notes.read_text()


def test_no_input_reports_this_machine_and_the_default_database(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVDOCTOR_DB", str(tmp_path / "none.sqlite3"))
    out = tmp_path / "r.html"
    rc, stdout, err = run(capsys, "--json", "--out", str(out))
    assert rc == 0, err
    info = json.loads(stdout)
    assert info["sections"][0] == "machine" and info["machines"] == 1
    assert any("holds no tuning result" in n for n in info["not_shown"])
    assert not (tmp_path / "none.sqlite3").exists()          # read-only: nothing created


def test_db_file_export_and_tune_json_are_read(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    from convdoctor.db import TuningDB

    spec = ROOT / "benchmarks" / "bench_report.py"
    import importlib.util

    s = importlib.util.spec_from_file_location("bench_report", spec)
    assert s and s.loader
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    export = mod.synthetic_tuning(5)
    db = tmp_path / "t.sqlite3"
    (tmp_path / "e.json").write_text(json.dumps(export))
    with TuningDB(db) as t:
        t.import_(tmp_path / "e.json")
    for src in (db, tmp_path / "e.json"):
        rc, stdout, err = run(capsys, "--db", str(src), "--json", "--out", str(tmp_path / "r.html"))
        assert rc == 0, err
        info = json.loads(stdout)
        assert info["tuned_problems"] == 5 and "roofline" in info["sections"]
    html = (tmp_path / "r.html").read_text()
    assert "imported from another machine" not in html      # the export file: measured there
    rc, _, _ = run(capsys, "--db", str(db), "--out", str(tmp_path / "r.html"))
    assert "imported from another machine" in (tmp_path / "r.html").read_text()


def test_bench_and_optimize_hooks_write_their_pages(tmp_path: Path) -> None:
    from convdoctor.htmlreport import check_report_path, report_for_bench, report_for_optimize

    with gzip.open(BENCH_H200, "rt") as fh:
        payload = json.load(fh)
    report_for_bench(str(tmp_path / "b.html"), payload)
    assert 'id="bench"' in (tmp_path / "b.html").read_text()
    samples = {"pytorch": [10.0 + i * 0.01 for i in range(20)],
               "convdoctor": [6.0 + i * 0.01 for i in range(20)]}
    report_for_optimize(str(tmp_path / "o.html"), optimize_payload(2), samples,
                        db=str(tmp_path / "none.sqlite3"))
    html = (tmp_path / "o.html").read_text()
    assert 'id="optimize"' in html and "95% CI" in html
    with pytest.raises(UsageError, match="--report"):
        check_report_path(str(tmp_path))


def test_report_imports_no_torch(tmp_path: Path) -> None:
    code = ("import sys; from convdoctor.cli import main; "
            f"rc = main(['report', '--bench', {str(BENCH_H200)!r}, '--optimize', "
            f"{str(OPT_RESNET)!r}, '--out', {str(tmp_path / 'r.html')!r}]); "
            "print(rc, 'torch' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                        timeout=120)
    assert cp.stdout.split()[-2:] == ["0", "False"], cp.stderr
    cp = subprocess.run([sys.executable, "-m", "convdoctor", "--help"], capture_output=True,
                        text=True, env=env, timeout=60)
    assert "report" in cp.stdout


def test_sections_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from convdoctor.htmlreport.cmd import SECTION_IDS
    from convdoctor.htmlreport.sections import SECTIONS

    assert SECTION_IDS == tuple(s.id for s in SECTIONS)
    out = tmp_path / "r.html"
    rc, stdout, err = run(capsys, "--bench", str(BENCH_H200), "--sections", "bench,roofline",
                          "--json", "--out", str(out))
    assert rc == 0, err
    assert json.loads(stdout)["sections"] == ["roofline", "bench"]     # page order
    rc, _, err = run(capsys, "--bench", str(BENCH_H200), "--sections", "plots", "--out", str(out))
    assert rc == 2 and "expected section names" in err and err.count("\n") == 1


def test_bench_report_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    page = tmp_path / "bench.html"
    rc = main(["bench", "--merge", str(BENCH_H200), "--report", str(page), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert json.loads(out)["kind"] == "bench"
    html = page.read_text()
    assert 'id="bench"' in html and 'id="tuning"' in html and 'id="roofline"' in html
    rc = main(["bench", "--merge", str(BENCH_H200), "--report", "/dev/null"])
    _, err = capsys.readouterr()
    one_line_error(rc, err, "--report /dev/null is a device")


def test_optimize_report_flag_refuses_a_bad_path_before_running(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["optimize", "zoo:resnet50", "--report", str(tmp_path)])
    _, err = capsys.readouterr()
    one_line_error(rc, err, "--report", "is a directory")


@pytest.mark.slow
def test_optimize_report_flag_writes_the_runs_page(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    model = tmp_path / "tiny.py"
    model.write_text("import torch\n\ndef model():\n    return torch.nn.Sequential("
                     "torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), "
                     "torch.nn.Conv2d(8, 8, 3, padding=1))\n")
    monkeypatch.setenv("CONVDOCTOR_DB", str(tmp_path / "db.sqlite3"))
    page = tmp_path / "run.html"
    # channels_last asked for: a change asked for is kept whatever it measures, so the run has
    # its end-to-end step samples however loaded the machine is (one that was not asked for is
    # kept, with its samples, only where measured faster)
    rc = main(["optimize", f"{model}:model", "--input-shape", "2,3,16,16", "--device", "cpu",
               "--steps", "6", "--budget", "0.2", "--channels-last", "on", "--report", str(page),
               "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    payload = json.loads(out)
    assert set(payload["step_samples_ms"]) == {"pytorch", "convdoctor"}
    html = page.read_text()
    assert 'id="optimize"' in html and 'id="tuning"' in html     # the run's problems, tuned
    assert "95% CI" in html


def test_unreadable_default_database_is_a_note_a_named_one_an_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other.sqlite3"
    import sqlite3

    with sqlite3.connect(other) as conn:        # another program's database
        conn.execute("CREATE TABLE songs (title TEXT)")
    before = other.read_bytes()
    monkeypatch.setenv("CONVDOCTOR_DB", str(other))
    rc, stdout, err = run(capsys, "--json", "--out", str(tmp_path / "r.html"))
    assert rc == 0, err
    assert any("default database cannot be read" in n for n in json.loads(stdout)["not_shown"])
    rc, _, err = run(capsys, "--db", str(other), "--out", str(tmp_path / "r.html"))
    assert rc == 2 and "Traceback" not in err and str(other) in err
    assert other.read_bytes() == before
