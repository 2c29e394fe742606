"""optimize's decisions in the tuning database: per device and versions, listed, forgotten,
pruned by the results' rules, absent from older files opened read-only."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from db_helpers import ENV

from convdoctor.db import TuningDB

D = {"format": 1, "problems": ["a", "b"], "channels_last": True, "routing": True,
     "graphs": False, "speedup": 1.5, "undone": False}


def test_decisions_are_kept_per_device_and_versions(tmp_path: Path) -> None:
    with TuningDB(tmp_path / "d.sqlite3") as db:
        db.remember_decision(ENV, "k1", D)
        assert db.decision(ENV, "k1") == D and db.decision(ENV, "k2") is None
        assert db.decision(dict(ENV, torch="0.0.1"), "k1") is None
        db.remember_decision(ENV, "k1", dict(D, speedup=1.2))          # replaced, not added
        (rec,) = db.decision_records()
        assert rec["model_key"] == "k1" and rec["speedup"] == 1.2 and rec["problems"] == 2


def test_prune_by_the_results_rules_and_forget_all(tmp_path: Path) -> None:
    with TuningDB(tmp_path / "d.sqlite3") as db:
        db.remember_decision(ENV, "k1", D)
        db.remember_decision(dict(ENV, torch="0.0.1"), "k2", D)
        db.prune(ENV, stale=True)
        assert [r["model_key"] for r in db.decision_records()] == ["k1"]
        assert db.forget_decisions(dry_run=True) == 1 and db.decision(ENV, "k1") == D
        assert db.forget_decisions() == 1 and db.decision_records() == []


def test_an_older_file_opened_read_only_holds_no_decisions(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with TuningDB(path) as db:
        db.remember_decision(ENV, "k1", D)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE decisions")
    con.commit()
    con.close()
    ro = TuningDB(path, read_only=True)
    assert ro.decision(ENV, "k1") is None and ro.decision_records() == []
    ro.remember_decision(ENV, "k1", D)                    # nothing on a read-only database
    assert ro.decision_records() == []
    ro.close()
    with TuningDB(path) as db:                            # a writable open adds the table back
        db.remember_decision(ENV, "k1", D)
        assert db.decision(ENV, "k1") == D


def test_db_cli_lists_and_forgets_decisions(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from convdoctor.cli import main

    path = tmp_path / "t.sqlite3"
    with TuningDB(path) as db:
        db.remember_decision(ENV, "0123456789abcdef", D)
    assert main(["db", "--db", str(path), "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["model_key"] for d in doc["decisions"]] == ["0123456789abcdef"]
    assert main(["db", "--db", str(path), "list"]) == 0
    out = capsys.readouterr().out
    assert "optimize decisions for model 0123456789ab on NVIDIA H100" in out
    assert "routing on" in out and "1.50x" in out
    with TuningDB(path) as db:
        db.remember_decision(ENV, "fedcba9876543210", {"format": 1, "problems": [],
                                                       "channels_last": True, "partial": True})
    assert main(["db", "--db", str(path), "list"]) == 0
    out = capsys.readouterr().out
    assert "model fedcba987654" in out and "layout only, channels_last on" in out
    assert main(["db", "--db", str(path), "prune", "--decisions", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decisions_forgotten"] == 2
    with TuningDB(path) as db:
        db.remember_decision(ENV, "0123456789abcdef", D)
    assert main(["db", "--db", str(path), "prune", "--decisions", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["decisions_forgotten"] == 1 and doc["deleted"] == 0
    with TuningDB(path) as db:
        assert db.decision_records() == []
