"""The tuning database keeps the user's data: hostile imports, files that are not databases,
special files, read-only directories, migration in place, imported rows never served as measured."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from db_helpers import ENV, problem, result

from convdoctor.cli import main
from convdoctor.db import FILE_SCHEMA_VERSION, TuningDB
from convdoctor.db.sqlfile import is_corruption
from convdoctor.errors import UsageError

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _quiet(_: str) -> None:
    pass


def _fill(path: Path, n: int = 3) -> None:
    db = TuningDB(path, warn=_quiet)
    for i in range(n):
        db.put(result(i))
    db.close()


def _export_doc(tmp_path: Path, n: int = 3) -> dict[str, Any]:
    src = tmp_path / "src.sqlite3"
    _fill(src, n)
    out = tmp_path / "e.json"
    TuningDB(src).export(out)
    return json.loads(out.read_text())


def _rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as c:
        return c.execute("SELECT problem_key, versions_key, created, imported, result_json "
                         "FROM results ORDER BY problem_key").fetchall()


def _winner(rec: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in rec["candidates"] if c["candidate"]["key"] == rec["winner"]["key"])


def _set(path: str, value: Any) -> Any:
    """A mutation of records[0]: the field at a dotted path set to `value`."""
    def mutate(rec: dict[str, Any]) -> None:
        *head, last = path.split(".")
        d = rec
        for k in head:
            d = _winner(d) if k == "WINNER" else d[k]
        d[last] = value
    return mutate


def _winner_status(status: str) -> Any:
    def mutate(rec: dict[str, Any]) -> None:
        _winner(rec)["status"] = status
    return mutate


def _negative_samples(rec: dict[str, Any]) -> None:
    w = _winner(rec)
    w["samples"] = [-abs(v) for v in w["samples"]]


def _failed_check(rec: dict[str, Any]) -> None:
    _winner(rec)["correctness"]["ok"] = False


BAD_RECORDS = {
    "winner_time_s is a list": _set("winner_time_s", [1]),
    "winner_time_s is text": _set("winner_time_s", "fast"),
    "winner_time_s not the samples' median": _set("winner_time_s", 1e-9),
    "created is NaN": _set("created", float("nan")),
    "created is 1e308": _set("created", 1e308),
    "created is text": _set("created", "yesterday"),
    "deterministic is a string": _set("problem.deterministic", "false"),
    "spatial is a string": _set("problem.spatial", "16"),
    "n is 10**30": _set("problem.n", 10**30),
    "n is a float": _set("problem.n", 2.0),
    "n is true": _set("problem.n", True),
    "problem_key disagrees": _set("problem_key", "fprop n=1 c=1 k=1 w=1"),
    "unknown engine key": _set("winner.key", "evil:engine"),
    "engine key with an escape": _set("winner.key", "cudnn:eng0\x1b[2J"),
    "winner null": _set("winner", None),
    "winner not a candidate": _set("winner.key", "cudnn:eng999"),
    "winner disqualified": _winner_status("disqualified"),
    "winner failed its check": _failed_check,
    "negative times": _negative_samples,
    "degraded": _set("degraded", True),
    "noise_band is inf": _set("noise_band", float("inf")),
    "env value not text": _set("env.driver", 580),
    "backend unknown": _set("backend", "evil"),
    "candidates not a list": _set("candidates", {"a": 1}),
}


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_a_bad_record_is_refused_whole_and_nothing_is_written(tmp_path: Path, name: str) -> None:
    doc = _export_doc(tmp_path)
    target = tmp_path / "t.sqlite3"
    _fill(target, 1)
    before = _rows(target)
    bad = copy.deepcopy(doc)
    BAD_RECORDS[name](bad["records"][-1])          # the last of three: the first two are fine
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    db = TuningDB(target, warn=_quiet)
    with pytest.raises(UsageError, match=r"records\[2\].*nothing was imported"):
        db.import_(path)
    db.close()
    assert _rows(target) == before
    assert sorted(p.name for p in tmp_path.iterdir() if "corrupt" in p.name) == []


def test_import_of_a_bad_value_by_the_cli_keeps_the_database(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    doc = _export_doc(tmp_path)
    target = tmp_path / "t.sqlite3"
    _fill(target, 1)
    before = target.read_bytes()
    for mutate in (_set("winner_time_s", [1]), _set("created", float("nan"))):
        bad = copy.deepcopy(doc)
        mutate(bad["records"][0])
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        assert main(["db", "import", str(tmp_path / "bad.json"), "--db", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("convdoctor: error:") and "records[0]" in err
    assert target.read_bytes() == before
    assert not list(tmp_path.glob("*.corrupt-*"))


@pytest.mark.parametrize("content", ["binary", "utf16", "deep", "huge-number", "not-export",
                                     "empty"])
def test_malformed_import_files_are_one_line_errors(tmp_path: Path, content: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.json"
    data = {"binary": bytes(range(256)) * 8,
            "utf16": '{"format": "convdoctor-tuning-db", "records": []}'.encode("utf-16"),
            "deep": b"[" * 100000 + b"]" * 100000,
            "huge-number": b'{"format": "convdoctor-tuning-db", "schema": '
                           + str(10**30).encode() + b', "records": []}',
            "not-export": b'{"records": []}', "empty": b""}[content]
    path.write_bytes(data)
    db_path = tmp_path / "t.sqlite3"
    assert main(["db", "--db", str(db_path), "import", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convdoctor: error:") and "internal error" not in err
    assert not db_path.exists()                     # checked before the database is opened


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_endless_import_file_is_refused_at_its_bound(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import convdoctor.jsonfile as jf

    assert main(["db", "--db", str(tmp_path / "t.sqlite3"), "import", "/dev/zero"]) == 2
    assert f"larger than {jf.MAX_BYTES >> 20} MiB" in capsys.readouterr().err


def test_import_is_all_or_nothing_in_one_transaction(tmp_path: Path, monkeypatch) -> None:
    doc = _export_doc(tmp_path, 3)
    target = tmp_path / "t.sqlite3"
    db = TuningDB(target, warn=_quiet)
    from convdoctor.db import sharing

    calls = []
    real = sharing.put_row

    def failing(conn: sqlite3.Connection, payload: dict[str, Any], *, imported: bool) -> str:
        calls.append(1)
        if len(calls) == 3:
            raise sqlite3.IntegrityError("NOT NULL constraint failed: results.created")
        return real(conn, payload, imported=imported)

    monkeypatch.setattr(sharing, "put_row", failing)
    with pytest.raises(sqlite3.IntegrityError):
        db.import_records(doc["records"])
    assert db.count() == 0 and db.set_aside is None      # a constraint is not corruption
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_only_damage_counts_as_corruption() -> None:
    assert not is_corruption(sqlite3.IntegrityError("NOT NULL constraint failed"))
    assert not is_corruption(sqlite3.ProgrammingError("Error binding parameter 6"))
    assert not is_corruption(sqlite3.OperationalError("database is locked"))
    assert is_corruption(sqlite3.DatabaseError("database disk image is malformed"))


# ---------------------------------------------------------------------- imported rows
def test_imported_rows_are_never_served_as_measured_here(tmp_path: Path) -> None:
    doc = _export_doc(tmp_path, 2)
    (tmp_path / "share.json").write_text(json.dumps(doc))
    db = TuningDB(tmp_path / "t.sqlite3", warn=_quiet)
    assert db.import_(tmp_path / "share.json") == {"added": 2, "replaced": 0, "kept": 0,
                                                   "invalid": 0}
    lk = db.lookup(problem(0), ENV)
    assert lk.status == "imported" and lk.result is not None
    assert db.get(problem(0), ENV) is None          # the tuner measures it here first
    assert [r.imported for r in db.list()] == [True, True]
    db.put(result(0))                                # measured here: replaces the imported row
    assert db.lookup(problem(0), ENV).status == "hit"
    assert db.import_(tmp_path / "share.json")["kept"] == 2   # never replaced by an import again
    assert db.lookup(problem(0), ENV).status == "hit"


def test_tune_measures_an_imported_problem_here(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("CONVDOCTOR_CPU_MIN_SHARE", "0")
    p = "fprop n=1 c=8 h=16 w=16 k=8 r=3 s=3 pad=1"
    a, b = tmp_path / "a.sqlite3", tmp_path / "b.sqlite3"
    assert main(["tune", "--problem", p, "--db", str(a), "--budget", "0.3", "--backend",
                 "cpu"]) == 0
    assert main(["db", "export", str(tmp_path / "e.json"), "--db", str(a)]) == 0
    doc = json.loads((tmp_path / "e.json").read_text())
    rec = doc["records"][0]                         # a winner 33903x faster than measured
    _winner(rec)["samples"] = [1e-9] * len(_winner(rec)["samples"])
    rec["winner_time_s"] = 1e-9
    (tmp_path / "e.json").write_text(json.dumps(doc))
    assert main(["db", "import", str(tmp_path / "e.json"), "--db", str(b)]) == 0
    capsys.readouterr()
    assert main(["tune", "--problem", p, "--db", str(b), "--budget", "0.3", "--backend",
                 "cpu"]) == 0
    out = capsys.readouterr().out
    assert "(db)" not in out and "0.0 us" not in out
    assert "imported, not measured here; measured here now" in out
    ((_, _, _, imported, rjson),) = _rows(b)
    assert imported == 0 and json.loads(rjson)["winner_time_s"] > 1e-6


# ---------------------------------------------------------------------- what the path holds
def test_a_file_that_is_not_a_database_is_refused_even_by_list(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("notes\n")
    assert main(["db", "--db", str(notes), "list"]) == 2
    assert "is not a SQLite database; convdoctor left it as it is" in capsys.readouterr().err
    assert notes.read_text() == "notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_another_programs_sqlite_database_is_left_alone(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite3"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE users (name TEXT)")
    before = other.read_bytes()
    for read_only in (False, True):
        with pytest.raises(UsageError, match="another program"):
            TuningDB(other, read_only=read_only)
    assert other.read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))


def test_list_creates_no_file_or_directory(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nosuch" / "dir" / "x.sqlite3"
    assert main(["db", "--db", str(path), "list"]) == 0
    assert "0 results, no file yet" in capsys.readouterr().out
    assert main(["db", "export", str(tmp_path / "e.json"), "--db", str(path)]) == 0
    assert not (tmp_path / "nosuch").exists()


def test_db_option_goes_before_or_after_the_action(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.sqlite3"
    _fill(path, 2)
    for argv in (["db", "--db", str(path), "list", "--json"],
                 ["db", "list", "--db", str(path), "--json"]):
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out)["count"] == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_export_to_a_device_node_writes_it_as_a_stream(tmp_path: Path) -> None:
    _fill(tmp_path / "t.sqlite3", 1)
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))    # /dev/null's numbers
    assert main(["db", "--db", str(tmp_path / "t.sqlite3"), "export", str(node)]) == 0
    assert stat.S_ISCHR(os.stat(node).st_mode)


def test_export_through_a_symlink_writes_the_target(tmp_path: Path) -> None:
    _fill(tmp_path / "t.sqlite3", 2)
    target = tmp_path / "shared" / "export.json"
    target.parent.mkdir()
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert main(["db", "--db", str(tmp_path / "t.sqlite3"), "export", str(link)]) == 0
    assert link.is_symlink() and len(json.loads(target.read_text())["records"]) == 2
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["export.json"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_export_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(tmp_path / "t.sqlite3", 1)
    for path, words in (("", "empty"), ("/dev/full", "No space left"),
                        (str(tmp_path), "is a directory")):
        assert main(["db", "--db", str(tmp_path / "t.sqlite3"), "export", path]) == 2
        err = capsys.readouterr().err
        assert err.startswith("convdoctor: error:") and words in err, err


# ---------------------------------------------------------------------- prune and list
@pytest.mark.parametrize("days", ["-1", "nan", "inf", "-inf", "1e400"])
def test_prune_refuses_a_bad_age_and_deletes_nothing(tmp_path: Path, days: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.sqlite3"
    _fill(path, 3)
    assert main(["db", "--db", str(path), "prune", "--older-than", days]) == 2
    assert "--older-than" in capsys.readouterr().err
    assert len(_rows(path)) == 3
    with pytest.raises(UsageError):
        TuningDB(path).prune(older_than_days=float(days))


def test_rows_an_older_version_let_in_neither_break_list_nor_escape_prune(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.sqlite3"
    _fill(path, 2)
    with sqlite3.connect(path) as c:      # what an import without checks could store
        c.execute("UPDATE results SET created = 1e308, winner_time_s = 'fast', "
                  "winner = 'x\x1b]0;pwned\x07'")
    assert main(["db", "--db", str(path), "list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b]0;pwned" in out
    assert main(["db", "--db", str(path), "prune", "--older-than", "3650"]) == 0
    assert _rows(path) == []


# ---------------------------------------------------------------------- schema migration
_V1_RESULTS = """CREATE TABLE results (problem_key TEXT NOT NULL, device_key TEXT NOT NULL,
    versions_key TEXT NOT NULL, backend TEXT NOT NULL, winner TEXT, winner_time_s REAL,
    created REAL NOT NULL, tuning_s REAL, env_json TEXT NOT NULL, result_json TEXT NOT NULL,
    PRIMARY KEY (problem_key, device_key, versions_key))"""


def _v1_copy(tmp_path: Path) -> Path:
    """A schema-1 file (before `imported`) holding the rows of a current one."""
    new = tmp_path / "new.sqlite3"
    _fill(new, 3)
    old = tmp_path / "old.sqlite3"
    with sqlite3.connect(old) as c:
        c.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        c.execute("INSERT INTO meta VALUES ('schema', '1')")
        c.execute(_V1_RESULTS)
        c.execute("CREATE TABLE left_out (kind TEXT NOT NULL, unit TEXT NOT NULL, device_key "
                  "TEXT NOT NULL, versions_key TEXT NOT NULL, why TEXT NOT NULL, created REAL "
                  "NOT NULL, PRIMARY KEY (kind, unit, device_key, versions_key))")
        c.execute(f"ATTACH DATABASE '{new}' AS n")
        c.execute("INSERT INTO results SELECT problem_key, device_key, versions_key, backend, "
                  "winner, winner_time_s, created, tuning_s, env_json, result_json FROM n.results")
    return old


def test_a_schema_1_file_is_migrated_in_place_keeping_every_row(tmp_path: Path) -> None:
    old = _v1_copy(tmp_path)
    before = {r[0]: r[4] for r in sqlite3.connect(old).execute(
        "SELECT problem_key, 0, 0, 0, result_json FROM results")}
    ino = os.stat(old).st_ino
    db = TuningDB(old, warn=_quiet)
    for i in range(3):
        assert db.lookup(problem(i), ENV).status == "hit"
    db.close()
    assert os.stat(old).st_ino == ino and not list(tmp_path.glob("*.corrupt-*"))
    with sqlite3.connect(old) as c:
        assert c.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == str(
            FILE_SCHEMA_VERSION)
    assert {r[0]: r[4] for r in _rows(old)} == before and {r[3] for r in _rows(old)} == {0}


def test_a_schema_1_file_reads_read_only_without_migration(tmp_path: Path) -> None:
    old = _v1_copy(tmp_path)
    before = old.read_bytes()
    db = TuningDB(old, read_only=True)
    assert db.lookup(problem(1), ENV).status == "hit" and len(db.list()) == 3
    db.close()
    assert old.read_bytes() == before


# ---------------------------------------------------------------------- read-only directories
_AS_OTHER_USER = """
import json, sys
from convdoctor.db import TuningDB
sys.path.insert(0, {tests!r})
from db_helpers import ENV, problem, result
warnings = []
db = TuningDB({path!r}, warn=warnings.append)
out = {{"read_only": db.read_only, "hit": db.get(problem(1), ENV) is not None,
        "rows": len(db.list())}}
db.put(result(7))
out["warned"] = any("read-only" in w for w in warnings)
try:
    db.prune(older_than_days=0)
    out["prune"] = "ran"
except Exception as exc:
    out["prune"] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""


def _unprivileged() -> list[str]:
    """A command prefix that takes root's power to write anywhere away (its capabilities), so
    permissions apply; nothing for another user."""
    if os.geteuid() != 0:
        return []
    import shutil

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("as root, a read-only directory needs setpriv (util-linux) to drop "
                    "capabilities")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-all"]


def test_a_database_in_a_read_only_directory_is_served_read_only(tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="convdoctor-ro-"))
    try:
        path = shared / "tuning.sqlite3"
        _fill(path, 3)
        before = path.read_bytes()
        os.chmod(path, 0o444)
        os.chmod(shared, 0o555)
        env = dict(os.environ, PYTHONPATH=SRC)
        code = _AS_OTHER_USER.format(tests=str(Path(__file__).parent), path=str(path))
        p = subprocess.run([*_unprivileged(), sys.executable, "-c", code], capture_output=True,
                           text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["read_only"] and out["hit"] and out["rows"] == 3 and out["warned"]
        assert out["prune"].startswith("DatabaseReadOnly") and "read-only" in out["prune"]
        q = subprocess.run([*_unprivileged(), sys.executable, "-m", "convdoctor", "db", "--db",
                            str(path), "prune", "--older-than", "0"], capture_output=True,
                           text=True, env=env, timeout=120)
        assert q.returncode == 2 and "read-only" in q.stderr and "Traceback" not in q.stderr
        assert path.read_bytes() == before
        assert sorted(p.name for p in shared.iterdir()) == ["tuning.sqlite3"]
    finally:
        os.chmod(shared, 0o755)
        for p in shared.iterdir():
            p.unlink()
        shared.rmdir()
