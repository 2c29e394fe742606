"""`convdoctor tune`, `bench` and `db` end to end on the CPU backend (real torch, real SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convdoctor.cli import main

pytest.importorskip("torch")

PROBLEM = "fprop n=1 c=8 h=12 w=12 k=8 r=3 s=3 pad=1"


@pytest.fixture(autouse=True)
def _shared_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CONVDOCTOR_CPU_MIN_SHARE", "0")     # CI machines are shared
    monkeypatch.setenv("CONVDOCTOR_DB", str(tmp_path / "db.sqlite3"))


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_tune_problem_json_then_loaded_from_db(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["tune", "--problem", PROBLEM, "--backend", "cpu", "--budget", "0.3", "--json"])
    out = _json(capsys)
    assert rc == 0, out["notes"]
    row = out["rows"][0]
    assert row["engine"].startswith("cpu:") and row["tuned_s"] > 0
    assert row["torch_default_s"] > 0 and row["speedup"] is not None
    assert row["roofline_percent"] is not None and row["roofline_percent"] > 0
    assert not row["from_db"]
    cands = out["results"][0]["candidates"]
    assert {c["candidate"]["key"] for c in cands} >= {"cpu:mkldnn-on", "cpu:mkldnn-off"}
    # again, human output: loaded from the database, a table with the PyTorch default and speedup
    assert main(["tune", "--problem", PROBLEM, "--backend", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "PyTorch default" in text and "speedup" in text
    assert f"{row['engine']} (db)" in text
    # db list/export/import
    assert main(["db", "list", "--json"]) == 0
    assert _json(capsys)["count"] == 1


def test_bad_input_is_one_clear_line_and_exit_2(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    assert main(["tune", "--problem", "fprop n=1 c=3 k=8 r=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convdoctor: error:") and "lacks w=" in err and "Traceback" not in err
    assert main(["tune"]) == 2
    assert "nothing to tune" in capsys.readouterr().err
    assert main(["tune", "zoo:resnet50"]) == 2
    assert "--input-shape" in capsys.readouterr().err
    assert main(["bench", "no-such-suite"]) == 2
    assert "unknown suite" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"problems": [{"name": "x", "problem": "n=1 c=3 h=2 w=2 k=1 r=5 s=5"}]}')
    assert main(["bench", str(bad)]) == 2
    assert "entry 'x'" in capsys.readouterr().err
    assert main(["db", "import", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["db", "prune"]) == 2


@pytest.mark.slow
def test_tune_model_train_gives_fprop_dgrad_wgrad(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    model = tmp_path / "tiny.py"
    model.write_text(
        "import torch\n"
        "def make():\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),\n"
        "                               torch.nn.Conv2d(8, 8, 3, padding=1),\n"
        "                               torch.nn.Conv2d(8, 8, 3, padding=1))\n")
    rc = main(["tune", f"{model}:make", "--input-shape", "2,3,16,16", "--train", "--backend",
               "cpu", "--budget", "0.2", "--json", "--no-db"])
    out = _json(capsys)
    assert rc == 0
    keys = [r["problem_key"] for r in out["rows"]]
    dirs = [k.split()[0] for k in keys]
    # conv1: fprop + wgrad (its input is the data: no dgrad); conv2 == conv3: one of each
    assert dirs.count("fprop") == 2 and dirs.count("wgrad") == 2 and dirs.count("dgrad") == 1
    assert len(set(keys)) == len(keys)


@pytest.mark.slow
def test_bench_small_suite_side_by_side(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"name": "tiny", "problems": [
        {"group": "g", "name": "a", "problem": "n=1 c=8 h=16 w=16 k=8 r=3 s=3 pad=1"}]}))
    # one referee process: several are the resume and referee tests' (tests/bench)
    rc = main(["bench", str(suite), "--budget", "0.2", "--pytorch-runs", "1", "--referees", "1",
               "--json"])
    out = _json(capsys)
    assert rc == 0
    row = out["rows"][0]
    assert row["heuristic_s"] and row["tuned_s"] and row["speedup_vs_best"]
    assert len(row["winners"]) == 2 and row["stability"] is not None
    # the default path timed in the PyTorch arm, both tuning runs and the referee
    assert row["heuristic_process_spread"] is not None and row["heuristic_process_spread"] >= 0
    assert out["summary"]["problems"] == 1 and out["summary"]["wall_s"] > 0
    # which code measured it (bench --merge reports mixtures of versions from this)
    from convdoctor.tune.provenance import source_hash
    assert out["code"]["source"] == source_hash() and out["code"]["version"]


def test_listing_notes_name_a_refused_graph_and_a_spent_refinement_budget() -> None:
    from convdoctor.cli.tune import listing_notes

    assert listing_notes({}) == []
    assert listing_notes({"lean": False, "enumeration": {"plans": 9},
                          "refinement": {"notes": [], "seconds": 1.2}}) == []
    refused = listing_notes({"lean": False, "error": "RuntimeError: CUDNN_STATUS_NOT_SUPPORTED"})
    assert refused == ["cuDNN listed no plan (RuntimeError: CUDNN_STATUS_NOT_SUPPORTED); only "
                       "PyTorch's paths were tuned"]
    spent = listing_notes({"refinement": {"notes": [], "budget_spent": True,
                                          "seconds": 6.01, "built": 140}})
    assert len(spent) == 1 and "after 6.01 s (140 new plans built)" in spent[0]
    assert "CONVDOCTOR_CUDNN_REFINE_BUDGET_S" in spent[0]
    # the worker's own failure to carry the record is not a cuDNN refusal
    assert listing_notes({"record_error": "listing record unavailable: TypeError"}) == []


def test_a_stored_results_listing_notes_are_not_repeated(tmp_path: Path, monkeypatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # advice from the run that stored a result (e.g. "raise the refinement budget") would do
    # nothing for a result loaded from the database
    from convdoctor.tune import harness

    real = harness.Harness.run

    def run_with_record(self, problem, env):  # type: ignore[no-untyped-def]
        r = real(self, problem, env)
        r.listing = {"refinement": {"budget_spent": True, "seconds": 6.0, "built": 3}}
        return r

    monkeypatch.setattr(harness.Harness, "run", run_with_record)
    db = str(tmp_path / "t.sqlite")
    args = ["tune", "--problem", "fprop n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1", "--db", db,
            "--budget", "0.05", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert any("stopped at its time budget" in n for n in first["notes"])
    assert first["results"][0]["listing"]["refinement"]["budget_spent"] is True
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert "loaded from the tuning database" in again["results"][0]["notes"]
    assert not any("stopped at its time budget" in n for n in again["notes"])


def test_on_a_gpu_the_kernels_of_the_problems_to_tune_are_compiled_ahead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from convdoctor.cli.tune import start_precompiler
    from convdoctor.problem import ConvProblem
    from convdoctor.settings import current
    from convdoctor.tune import precompile as P

    started: list[tuple[list[str], int]] = []

    class FakePre:
        def __init__(self, tasks: list[P.Task], *, workers: int, settings: object) -> None:
            started.append(([t.problem for t in tasks], workers))

        def start(self) -> FakePre:
            return self

    class FakeDB:
        def lookup(self, p: ConvProblem, env: dict[str, str]) -> object:
            return type("L", (), {"status": "hit" if p.n == 1 else "miss"})()

    monkeypatch.setattr(P, "Precompiler", FakePre)
    monkeypatch.setattr(P, "triton_tasks", lambda ps, s, sm: [P.Task(p.key(), "triton:x")
                                                               for p in ps])
    monkeypatch.setattr(P, "free_gpu_bytes", lambda: 80 << 30)
    probs = [ConvProblem.parse(PROBLEM), ConvProblem.parse(PROBLEM.replace("n=1", "n=2"))]
    s = replace(current(), precompile=3)
    # the CPU backend, or no children asked for: nothing compiled ahead
    assert start_precompiler(probs, s, {"backend": "cpu"}, None, False) is None
    assert start_precompiler(probs, replace(s, precompile=0), {"backend": "cuda"}, None,
                             False) is None
    # a problem the database holds is not compiled for, unless --force tunes it again
    assert start_precompiler(probs, s, {"backend": "cuda", "sm_count": "132"}, FakeDB(),
                             False) is not None
    assert started[-1] == ([probs[1].key()], 3)
    start_precompiler(probs, s, {"backend": "cuda", "sm_count": "132"}, FakeDB(), True)
    assert started[-1] == ([probs[0].key(), probs[1].key()], 3)
    # -1: the machine decides (here the free GPU memory and 16 CPUs)
    monkeypatch.setattr(P.os, "cpu_count", lambda: 16)
    start_precompiler(probs, replace(s, precompile=-1), {"backend": "cuda"}, None, False)
    assert started[-1][1] == P.default_workers(80 << 30) == 12
