"""bench --merge keeps provenance: which file gave each row, which code measured it, one stack only.

A merge of 80 re-measured fp32 dgrad rows with 21 strided rows measured by other code must say
which rows are whose, and that two code versions measured them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_bench_shard import _doc, _row

from convdoctor.bench.merge import provenance_lines
from convdoctor.bench.resume import load_partial
from convdoctor.cli import main
from convdoctor.errors import UsageError
from convdoctor.tune.provenance import code_identity, code_label, same_code, source_hash

H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": "132", "compute_capability": "9.0",
        "driver": "580.159.04", "cuda_runtime": "13.0", "cudnn": "91900",
        "cudnn_frontend": "1.16.0", "torch": "2.11.0+cu130"}
CPU = {"cpu": "Xeon", "cpu_count": 16, "threads": 16, "torch": "2.13.0+cpu", "mkldnn": True}
NEW = {"version": "0.1.0", "source": "aaaaaaaaaaaa", "commit": "25fa246", "dirty": False}
OLD = {"version": "0.1.0", "source": "bbbbbbbbbbbb", "commit": "387b717", "dirty": False}


def _write(path: Path, rows: list[dict[str, Any]], env: dict[str, Any] | None = None,
           code: dict[str, Any] | None = None) -> str:
    doc = _doc(rows)
    if env is not None:
        doc["env"] = env
    if code is not None:
        doc["code"] = code
    path.write_text(json.dumps(doc))
    return str(path)


def _merge(capsys: pytest.CaptureFixture[str], *paths: str,
           out_name: str = "merged.json") -> tuple[dict[str, Any], str]:
    out = Path(paths[0]).with_name(out_name)
    assert main(["bench", "--merge", *paths, "--out", str(out)]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def _refused(capsys: pytest.CaptureFixture[str], *paths: str) -> str:
    assert main(["bench", "--merge", *paths]) == 2
    err = capsys.readouterr().err
    assert "convdoctor: error:" in err and "internal error" not in err
    return err


def test_each_row_names_its_file_and_code_and_each_file_its_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = _write(tmp_path / "new.json", [_row("p1", 2.0, 2.0, 1.0), _row("p2", 1.0, 1.0, 1.0)],
                 H100, NEW)
    old = _write(tmp_path / "old.json", [_row("p2", 9.0, 9.0, 1.0), _row("p3", 1.0, 1.0, 1.0)],
                 H100, OLD)
    doc, text = _merge(capsys, new, old)
    assert [(r["problem_key"], r["merged_source"], r["measured_by"]["source"])
            for r in doc["rows"]] == [("p1", [new], NEW["source"]), ("p2", [new], NEW["source"]),
                                      ("p3", [old], OLD["source"])]   # p2: the first file's row
    assert [(f["file"], f["rows"], f["duplicates_dropped"]) for f in doc["merged_rows"]] == [
        (new, 2, 0), (old, 1, 1)]
    assert [g["rows"] for g in doc["merged_codes"]] == [2, 1] and doc["code"] is None
    assert doc["summary"]["problems"] == 3
    assert f"rows per file: {new} 2; {old} 1 (1 already given by an earlier file)" in text
    assert "measured by different code" in text
    assert "source aaaaaaaaaaaa, commit 25fa246: 2 rows" in text and "387b717: 1 rows" in text


def test_one_code_version_gives_no_mixture_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path / "a.json", [_row("p1", 1.0, 1.0, 1.0)], H100, NEW)
    # same source, another commit (a docs-only commit between two calls): the same code
    b = _write(tmp_path / "b.json", [_row("p2", 1.0, 1.0, 1.0)], H100, dict(NEW, commit="abc"))
    doc, text = _merge(capsys, a, b)
    assert "rows per file" in text and "note:" not in text
    assert doc["code"]["source"] == NEW["source"]
    # a file that supplies no row does not count as a second version
    c = _write(tmp_path / "c.json", [_row("p1", 1.0, 1.0, 1.0)], H100, OLD)
    _, text = _merge(capsys, a, b, c)
    assert "note:" not in text


def test_a_mixture_survives_a_second_merge(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path / "a.json", [_row("p1", 1.0, 1.0, 1.0)], H100, NEW)
    b = _write(tmp_path / "b.json", [_row("p2", 1.0, 1.0, 1.0)], H100, OLD)
    ab, _ = _merge(capsys, a, b, out_name="ab.json")
    c = _write(tmp_path / "c.json", [_row("p3", 1.0, 1.0, 1.0)], H100, NEW)
    doc, text = _merge(capsys, str(tmp_path / "ab.json"), c)
    assert "measured by different code" in text      # b's row came from OLD
    assert [r["merged_source"] for r in doc["rows"]] == [
        [str(tmp_path / "ab.json"), a], [str(tmp_path / "ab.json"), b], [c]]
    assert [r["measured_by"]["source"] for r in doc["rows"]] == [
        NEW["source"], OLD["source"], NEW["source"]]
    assert ab["code"] is None


def test_files_without_a_code_record_are_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # shard files without `code` cannot be told apart, so the merge says so
    a = _write(tmp_path / "a.json", [_row("p1", 1.0, 1.0, 1.0)], H100)
    b = _write(tmp_path / "b.json", [_row("p2", 1.0, 1.0, 1.0)], H100, NEW)
    _, text = _merge(capsys, a, b)
    assert "1 rows come from files that do not record their code" in text
    c = _write(tmp_path / "c.json", [_row("p3", 1.0, 1.0, 1.0)])          # no env either
    _, text = _merge(capsys, a, c)
    assert "2 rows come from files that do not record their code" in text
    assert f"{c} record(s) no machine or software stack" in text


@pytest.mark.parametrize("field,value", [("cudnn", "90800"), ("gpu_name", "NVIDIA A100-SXM4-80GB"),
                                         ("torch", "2.10.0+cu128"),
                                         ("cudnn_frontend_backend", "90800")])
def test_results_of_another_stack_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str) -> None:
    env = dict(H100, cudnn_frontend_backend="91900")
    a = _write(tmp_path / "a.json", [_row("p1", 1.0, 1.0, 1.0)], env)
    b = _write(tmp_path / "b.json", [_row("p2", 1.0, 1.0, 1.0)], {**env, field: value})
    err = _refused(capsys, a, b)
    assert field in err and value in err


def test_cpu_results_of_another_machine_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path / "a.json", [_row("p1", 1.0, 1.0, 1.0)], CPU)
    b = _write(tmp_path / "b.json", [_row("p2", 1.0, 1.0, 1.0)], dict(CPU, threads=64))
    assert "threads" in _refused(capsys, a, b)


def test_a_first_file_without_env_does_not_open_the_door(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = _write(tmp_path / "n.json", [_row("p1", 1.0, 1.0, 1.0)])          # older file: no env
    h = _write(tmp_path / "h.json", [_row("p2", 1.0, 1.0, 1.0)], H100)
    doc, _ = _merge(capsys, n, h, out_name="nh.json")
    assert doc["summary"]["problems"] == 2 and doc["env"] == H100       # the recorded env kept
    x = _write(tmp_path / "x.json", [_row("p3", 1.0, 1.0, 1.0)],
               dict(H100, gpu_name="NVIDIA A100-SXM4-80GB"))
    assert "gpu_name" in _refused(capsys, str(tmp_path / "nh.json"), x)


@pytest.mark.parametrize("doc", [
    {"kind": "bench", "rows": None, "summary": {}},
    {"kind": "bench", "rows": [1, 2], "summary": {}},
    {"kind": "bench", "rows": [{"name": "no key"}], "summary": {}},
    {"kind": "bench", "rows": [{"problem_key": ["a"]}], "summary": {}},
    {"kind": "bench", "rows": [{"problem_key": "p1"}], "summary": {}},     # fields missing
    {"kind": "bench", "rows": []},                                          # no summary
    {"kind": "bench", "rows": [], "summary": None},
    {"kind": "bench", "rows": [], "summary": {}, "env": "H100"},
    [],
])
def test_malformed_results_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            doc: Any) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    err = _refused(capsys, str(bad))
    assert str(bad) in err or "a row cannot be summarized (KeyError" in err


def test_no_lines_for_a_single_run() -> None:
    assert provenance_lines({"rows": []}) == []


def test_a_stopped_run_is_not_resumed_by_other_code(tmp_path: Path) -> None:
    state = tmp_path / "b.json.partial"
    sig = {"suite": "s", "problems": ["p1"], "source": "aaaaaaaaaaaa"}
    state.write_text(json.dumps({"signature": sig, "torch_runs": [], "tune_runs": []}))
    assert load_partial(str(state), sig)["torch_runs"] == []
    with pytest.raises(UsageError, match="other convdoctor code .*aaaaaaaaaaaa, now bbbbbbbbbbbb"):
        load_partial(str(state), dict(sig, source="bbbbbbbbbbbb"))


def test_code_labels_and_sameness() -> None:
    assert code_label(None) == "code not recorded" == code_label({"version": "0.1.0"})
    assert code_label(NEW) == "convdoctor 0.1.0, source aaaaaaaaaaaa, commit 25fa246"
    assert "changes unknown" in code_label({"commit": "x", "dirty": None})
    assert same_code(NEW, dict(NEW, commit="other")) and not same_code(NEW, OLD)
    assert not same_code(None, None) and not same_code(NEW, None)
    # no source hash (a record of commits only): the same commit, both clean
    c1, c2 = {"commit": "x", "dirty": False}, {"commit": "x", "dirty": True}
    assert same_code(c1, dict(c1)) and not same_code(c1, c2)


def test_the_source_hash_follows_the_package_files(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("a = 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.json").write_text("{}")
    first = source_hash(str(tmp_path))
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (tmp_path / "notes.md").write_text("not code")
    assert source_hash(str(tmp_path)) == first                       # caches and docs: no change
    (tmp_path / "data" / "t.json").write_text('{"x": 1}')
    assert source_hash(str(tmp_path)) != first


def test_code_identity_outside_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVDOCTOR_CODE_COMMIT", raising=False)
    (tmp_path / "__init__.py").write_text("")
    ident = code_identity(str(tmp_path))
    assert ident["commit"] is None and ident["dirty"] is None and ident["version"]
    assert ident["source"] == source_hash(str(tmp_path))
    # a tree copied without .git (the GPU machine's) is named by the caller
    monkeypatch.setenv("CONVDOCTOR_CODE_COMMIT", "aeb4d0b")
    ident = code_identity(str(tmp_path))
    assert (ident["commit"], ident["commit_from"], ident["dirty"]) == ("aeb4d0b", "env", None)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_code_identity_in_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVDOCTOR_CODE_COMMIT", raising=False)

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t",
                        "-c", "commit.gpgsign=false", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (tmp_path / "outside.py").write_text("")
    git("add", "outside.py")
    git("commit", "-qm", "x")
    # a package the checkout does not track (a venv inside someone's project): not its commit
    (pkg / "__init__.py").write_text("")
    assert code_identity(str(pkg))["commit_from"] is None
    git("add", "pkg/__init__.py")
    git("commit", "-qm", "y")
    ident = code_identity(str(pkg))
    assert ident["commit"] and len(ident["commit"]) == 12 and ident["dirty"] is False
    assert ident["commit_from"] == "git"
    (tmp_path / "outside.py").write_text("x = 2\n")            # outside the package: still clean
    assert code_identity(str(pkg))["dirty"] is False
    (pkg / "__init__.py").write_text("x = 1\n")
    assert code_identity(str(pkg))["dirty"] is True
    # a copied tree with a stale .git: the caller's name wins, and what
    # git said is kept beside it
    git_commit = code_identity(str(pkg))["commit"]
    monkeypatch.setenv("CONVDOCTOR_CODE_COMMIT", "aeb4d0b")
    ident = code_identity(str(pkg))
    assert (ident["commit"], ident["commit_from"], ident["dirty"]) == ("aeb4d0b", "env", None)
    assert (ident["git_commit"], ident["git_dirty"]) == (git_commit, True)
    monkeypatch.setenv("CONVDOCTOR_CODE_COMMIT", git_commit[:7])   # the same commit, shorter
    ident = code_identity(str(pkg))
    assert "git_commit" not in ident and ident["dirty"] is True      # git's flag still holds
    monkeypatch.setenv("CONVDOCTOR_CODE_COMMIT", git_commit[:3])   # too short to be sure
    assert code_identity(str(pkg))["git_commit"] == git_commit
