"""bench --merge keeps provenance: which file gave each row, which code measured it, one stack only.

Session 25 joined its 80 re-measured fp32 dgrad rows with session 22's 21 strided rows; the merged
file said neither which rows were whose nor that two code versions measured them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_tune_bench_shard import _doc, _row

from convdoctor.cli import main
from convdoctor.tune.bench_merge import provenance_lines
from convdoctor.tune.provenance import code_identity

H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": "132", "compute_capability": "9.0",
        "driver": "580.159.04", "cuda_runtime": "13.0", "cudnn": "91900",
        "cudnn_frontend": "1.16.0", "torch": "2.11.0+cu130"}


def _write(path: Path, rows: list[dict[str, Any]], env: dict[str, str] | None = None,
           code: dict[str, Any] | None = None) -> str:
    doc = _doc(rows)
    if env is not None:
        doc["env"] = env
    if code is not None:
        doc["code"] = code
    path.write_text(json.dumps(doc))
    return str(path)


def _merge(capsys: pytest.CaptureFixture[str], *paths: str) -> tuple[dict[str, Any], str]:
    out = Path(paths[0]).with_name("merged.json")
    assert main(["bench", "--merge", *paths, "--out", str(out)]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def test_each_row_names_its_file_and_each_file_its_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = _write(tmp_path / "new.json", [_row("p1", 2.0, 2.0, 1.0), _row("p2", 1.0, 1.0, 1.0)],
                 H100, {"version": "0.1.0", "commit": "25fa246", "dirty": False})
    old = _write(tmp_path / "old.json", [_row("p2", 9.0, 9.0, 1.0), _row("p3", 1.0, 1.0, 1.0)],
                 H100, {"version": "0.1.0", "commit": "387b717", "dirty": False})
    doc, text = _merge(capsys, new, old)
    assert [(r["problem_key"], r["merged_source"]) for r in doc["rows"]] == [
        ("p1", [new]), ("p2", [new]), ("p3", [old])]        # p2: the first file's row wins
    assert [(f["file"], f["rows"], f["duplicates_dropped"]) for f in doc["merged_rows"]] == [
        (new, 2, 0), (old, 1, 1)]
    assert doc["summary"]["problems"] == 3
    assert f"rows per file: {new} 2; {old} 1 (1 already given by an earlier file)" in text
    assert "measured by different code" in text and "25fa246" in text and "387b717" in text


def test_one_code_version_gives_no_mixture_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = {"version": "0.1.0", "commit": "25fa246", "dirty": False}
    a = _write(tmp_path / "a.json", [_row("p1", 1.0, 1.0, 1.0)], H100, code)
    b = _write(tmp_path / "b.json", [_row("p2", 1.0, 1.0, 1.0)], H100, code)
    _, text = _merge(capsys, a, b)
    assert "rows per file" in text and "different code" not in text
    # a file that supplies no row does not count as a second version
    c = _write(tmp_path / "c.json", [_row("p1", 1.0, 1.0, 1.0)], H100, {"version": "0.0.9"})
    _, text = _merge(capsys, a, b, c)
    assert "different code" not in text


def test_a_merged_file_merged_again_keeps_the_chain(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path / "a.json", [_row("p1", 1.0, 1.0, 1.0)], H100)
    first, _ = _merge(capsys, a)
    again = tmp_path / "again.json"
    again.write_text(json.dumps(first))
    b = _write(tmp_path / "b.json", [_row("p2", 1.0, 1.0, 1.0)], H100)
    doc, _ = _merge(capsys, str(again), b)
    assert doc["rows"][0]["merged_source"] == [str(again), a]
    assert doc["rows"][1]["merged_source"] == [b]


@pytest.mark.parametrize("field,value", [("cudnn", "90800"), ("gpu_name", "NVIDIA A100-SXM4-80GB"),
                                         ("torch", "2.10.0+cu128")])
def test_results_of_another_stack_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str) -> None:
    a = _write(tmp_path / "a.json", [_row("p1", 1.0, 1.0, 1.0)], H100)
    b = _write(tmp_path / "b.json", [_row("p2", 1.0, 1.0, 1.0)], dict(H100, **{field: value}))
    assert main(["bench", "--merge", a, b]) == 2
    err = capsys.readouterr().err
    assert field in err and value in err and "Traceback" not in err


def test_results_without_env_are_merged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path / "a.json", [_row("p1", 1.0, 1.0, 1.0)])        # older files: no env
    b = _write(tmp_path / "b.json", [_row("p2", 1.0, 1.0, 1.0)], H100)
    doc, _ = _merge(capsys, a, b)
    assert doc["summary"]["problems"] == 2


def test_no_lines_for_a_single_run() -> None:
    assert provenance_lines({"rows": []}) == []


def test_code_identity_outside_a_checkout_has_no_commit(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVDOCTOR_CODE_COMMIT", raising=False)
    (tmp_path / "__init__.py").write_text("")
    ident = code_identity(str(tmp_path))
    assert ident["commit"] is None and ident["dirty"] is None and ident["version"]
    # a tree copied without .git (the GPU machine's) is named by the caller
    monkeypatch.setenv("CONVDOCTOR_CODE_COMMIT", "aeb4d0b")
    assert code_identity(str(tmp_path))["commit"] == "aeb4d0b"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_code_identity_in_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVDOCTOR_CODE_COMMIT", raising=False)
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=tmp_path,
                       check=True, capture_output=True)

    git("init", "-q")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (tmp_path / "outside.py").write_text("")
    git("add", "outside.py")
    git("commit", "-qm", "x")
    # a package the checkout does not track (a venv inside someone's project): no commit
    (pkg / "__init__.py").write_text("")
    assert code_identity(str(pkg))["commit"] is None
    git("add", "pkg/__init__.py")
    git("commit", "-qm", "y")
    ident = code_identity(str(pkg))
    assert ident["commit"] and len(ident["commit"]) == 12 and ident["dirty"] is False
    (pkg / "__init__.py").write_text("x = 1\n")
    assert code_identity(str(pkg))["dirty"] is True
