"""`convdoctor bench --out F --resume`: an interrupted run keeps its finished arms in F.partial
and continues from there: a run stopped by a deadline keeps every arm it finished."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from convdoctor.bench import arms, resume
from convdoctor.cli import main
from convdoctor.errors import UsageError

# each arm's backend runs in this process (tests/bench/conftest.py)
pytestmark = pytest.mark.usefixtures("in_process_workers")


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"name": "tiny", "problems": [
        {"group": "g", "name": "a", "problem": "n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1"}]}))
    return suite


ARGS = ["--budget", "0.1", "--pytorch-runs", "1", "--tune-runs", "2", "--json"]


@pytest.mark.slow
def test_an_interrupted_bench_resumes_without_rerunning_finished_arms(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        in_process_workers: Any) -> None:
    in_process_workers.round_trip_s = 0.001    # the candidates' host costs are checked below
    suite, out = _suite(tmp_path), tmp_path / "r.json"
    real_tune = arms.tune_arm
    calls = {"tune": 0}

    def tune_then_die(*a: Any, **k: Any) -> Any:
        calls["tune"] += 1
        if calls["tune"] == 2:
            raise KeyboardInterrupt  # the deadline's kill, during the second tuning process
        return real_tune(*a, **k)

    monkeypatch.setattr(arms, "tune_arm", tune_then_die)
    assert main(["bench", str(suite), *ARGS, "--out", str(out)]) != 0   # "interrupted"
    state = json.loads((tmp_path / "r.json.partial").read_text())
    assert len(state["torch_runs"]) == 1 and len(state["tune_runs"]) == 1
    assert not out.exists()
    # the stop shut every worker it had started
    assert len(in_process_workers.started) == 2 and all(w.closed for w in in_process_workers.started)

    def pytorch_must_not_run(*a: Any, **k: Any) -> Any:
        raise AssertionError("a finished arm ran again")

    monkeypatch.setattr(arms, "pytorch_arm", pytorch_must_not_run)
    monkeypatch.setattr(arms, "tune_arm", real_tune)
    capsys.readouterr()
    assert main(["bench", str(suite), *ARGS, "--out", str(out), "--resume"]) == 0
    res = json.loads(out.read_text())
    assert res["summary"]["resumed_arms"] == 2
    row = res["rows"][0]
    assert len(row["winners"]) == 2 and row["heuristic_s"] and row["tuned_s"]
    assert row["tune_listing"] == [{}, {}]  # each run's listing record (the CPU backend has none)
    assert row["left_out_runs"] == 0  # no listing left an engine out
    # each run's costliest candidates, by host seconds spent on them
    assert len(row["tune_costliest"]) == 2
    assert all(run and all(c[2] > 0 for c in run) for run in row["tune_costliest"])
    assert not (tmp_path / "r.json.partial").exists()     # done: nothing left to resume


def test_a_state_file_of_another_run_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "x.partial"
    sig = {"suite": "tiny", "problems": ["a"], "budget_s": 0.1}
    resume.save_partial(str(p), {"signature": dict(sig, budget_s=0.5), "torch_runs": [],
                                 "tune_runs": []})
    with pytest.raises(UsageError, match="differs in: budget_s"):
        resume.load_partial(str(p), sig)
    p.write_text("{not json")
    with pytest.raises(UsageError, match="not a readable bench state file"):
        resume.load_partial(str(p), sig)
    assert resume.load_partial(str(tmp_path / "none.partial"), sig)["tune_runs"] == []


def test_resume_needs_out(tmp_path: Path) -> None:
    assert main(["bench", str(_suite(tmp_path)), "--resume", "--pytorch-runs", "1"]) == 2


@pytest.mark.slow
def test_a_bench_stopped_inside_an_arm_resumes_at_the_next_problem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # a stop inside an arm keeps the arm's finished problems (an arm of a 101-layer GPU shard
    # takes up to ~2 minutes)
    from convdoctor.tune import harness

    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"name": "tiny", "problems": [
        {"group": "g", "name": "a", "problem": "n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1"},
        {"group": "g", "name": "b", "problem": "n=1 c=4 h=6 w=6 k=4 r=1 s=1"}]}))
    out = tmp_path / "r.json"
    real = harness.tune_problem
    tuned: list[str] = []

    def die_on_fourth(p: Any, **k: Any) -> Any:
        tuned.append(p.key())
        if len(tuned) == 4:
            raise KeyboardInterrupt  # the deadline's kill: 2nd tuning arm, its 2nd problem
        return real(p, **k)

    monkeypatch.setattr(harness, "tune_problem", die_on_fourth)
    assert main(["bench", str(suite), *ARGS, "--out", str(out)]) != 0
    state = json.loads((tmp_path / "r.json.partial").read_text())
    assert len(state["tune_runs"]) == 1
    cur = state["current"]
    assert cur["kind"] == "tune" and list(k for k in cur["done"] if not k.startswith("_")) == [
        tuned[2]]
    assert cur["wall_s"] > 0 and cur["done"]["_process_s"] > 0
    # the stopped run's wall so far (its finished arms and the stopped arm's finished problems)
    assert state["wall_s_before"] >= sum(state["arm_wall_s"]["pytorch"]) + sum(
        state["arm_wall_s"]["tune"]) + cur["wall_s"] - 1e-6

    def pytorch_must_not_run(*a: Any, **k: Any) -> Any:
        raise AssertionError("a finished arm ran again")

    again: list[str] = []

    def record(p: Any, **k: Any) -> Any:
        again.append(p.key())
        return real(p, **k)

    monkeypatch.setattr(arms, "pytorch_arm", pytorch_must_not_run)
    monkeypatch.setattr(harness, "tune_problem", record)
    capsys.readouterr()
    assert main(["bench", str(suite), *ARGS, "--out", str(out), "--resume"]) == 0
    assert again == [tuned[3]]           # only the problem the stop cut off was tuned again
    res = json.loads(out.read_text())
    assert res["summary"]["resumed_arms"] == 2 and res["summary"]["resumed_problems"] == 1
    assert all(len(r["winners"]) == 2 and all(r["winners"]) for r in res["rows"])
    assert len(res["summary"]["arm_wall_s"]["tune"]) == 2
    # the stopped process's finished problem counts in the arm's process time and wall
    assert res["summary"]["tuning_s_total_per_run"][1] >= cur["done"]["_process_s"]
    assert res["summary"]["arm_wall_s"]["tune"][1] >= cur["wall_s"]
    # the bench's wall counts the stopped run's too
    s = res["summary"]
    assert s["wall_s"] == pytest.approx(state["wall_s_before"] + s["wall_s_this_process"])
    assert s["wall_s"] >= sum(sum(v) for v in s["arm_wall_s"].values()) - 1e-6
    assert not (tmp_path / "r.json.partial").exists()


@pytest.mark.slow
@pytest.mark.parametrize("stop_at, kind, referees_done", [
    (2, "pytorch", 0), (8, "referee", 0), (10, "referee", 1)])
def test_a_bench_stopped_in_a_pytorch_or_referee_arm_resumes_at_the_next_problem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        stop_at: int, kind: str, referees_done: int) -> None:
    # every arm runs one Harness per problem: 2 problems x (1 PyTorch + 2 tuning + 2 referee
    # arms) = 10 runs; stop at the PyTorch arm's, the first or the second referee's second problem
    from convdoctor.tune import harness

    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"name": "tiny", "problems": [
        {"group": "g", "name": "a", "problem": "n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1"},
        {"group": "g", "name": "b", "problem": "n=1 c=4 h=6 w=6 k=4 r=1 s=1"}]}))
    out = tmp_path / "r.json"
    real = harness.Harness.run
    calls = {"n": 0}

    def counted(self: Any, *a: Any, **k: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == stop_at and calls.get("die", True):
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(harness.Harness, "run", counted)
    args = [*ARGS, "--referees", "2"]
    assert main(["bench", str(suite), *args, "--out", str(out)]) != 0
    state = json.loads((tmp_path / "r.json.partial").read_text())
    assert state["current"]["kind"] == kind and len(state["current"]["done"]) == 1
    assert len(state["referee_runs"]) == referees_done
    calls.update(n=0, die=False)
    capsys.readouterr()
    assert main(["bench", str(suite), *args, "--out", str(out), "--resume"]) == 0
    assert calls["n"] == 10 - (stop_at - 1)    # nothing finished before the stop ran again
    res = json.loads(out.read_text())
    assert res["summary"]["resumed_problems"] == 1
    assert res["referees"] == 2 and len(res["summary"]["arm_wall_s"]["referee"]) == 2
    assert all(r["heuristic_s"] and r["tuned_s"] and len(r["referee_runs_s"]) == 2
               for r in res["rows"])


@pytest.mark.parametrize("state, expected", [
    # written by this version: the saved wall (it covers every earlier process)
    ({"wall_s_before": 30.0, "arm_wall_s": {"pytorch": [5.0], "tune": [10.0]},
      "current": {"kind": "tune", "done": {}, "wall_s": 4.0}}, 30.0),
    # a state file of an older version has no wall_s_before: the arms' walls still count
    ({"arm_wall_s": {"pytorch": [5.0], "tune": [10.0]},
      "current": {"kind": "tune", "done": {}, "wall_s": 4.0}}, 19.0),
    # a damaged value is never trusted below what the arms took
    ({"wall_s_before": float("nan"), "arm_wall_s": {"tune": [10.0, "x"]}, "current": None}, 10.0),
    ({"wall_s_before": True, "arm_wall_s": {}}, 0.0),
    ({"wall_s_before": -5.0}, 0.0),
])
def test_a_resumed_bench_counts_the_stopped_runs_wall(state: dict[str, Any],
                                                      expected: float) -> None:
    assert resume.resumed_wall(state) == pytest.approx(expected)
