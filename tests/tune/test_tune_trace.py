"""The tuner's decision trace (`convdoctor tune --trace`)."""

from __future__ import annotations

import json
import subprocess
import sys

from tune_fakes import SimBackend, SimCandidate, SimWorld

from convdoctor.problem import ConvProblem
from convdoctor.tune.harness import Harness, HarnessConfig, file_trace, tune_problem

PROBLEM = ConvProblem.parse("fprop n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1")


def _world() -> SimWorld:
    cands = [SimCandidate("eng:best", 1e-3), SimCandidate("eng:slow", 2e-3),
             SimCandidate("eng:near", 1.004e-3, workspace=1 << 20)]
    return SimWorld(seed=3, candidates=cands)


def _cfg(world: SimWorld, events: list) -> HarnessConfig:
    return HarnessConfig(budget_s=2.0, now=world.now, sleep=world.sleep, keep_keys=(),
                         trace=events.append)


def test_trace_records_every_decision_and_the_winner() -> None:
    world = _world()
    events: list[dict] = []
    result = Harness(SimBackend(world), _cfg(world, events)).run(PROBLEM, {})
    phases = [e["phase"] for e in events]
    assert phases[0] == "problem" and events[0]["candidates"] == 3
    assert phases.count("screen") == HarnessConfig().screen_reps
    verdicts = [e for e in events if e["phase"] == "screen-verdict"]
    assert sorted(v["key"] for v in verdicts) == ["eng:best", "eng:near", "eng:slow"]
    assert "sample" in phases
    sel = [e for e in events if e["phase"] == "select"]
    assert len(sel) == 1 and result.winner is not None
    assert sel[0]["winner"] == result.winner.key
    assert sel[0]["winner"] in sel[0]["ties"]
    # the near-tie with a workspace loses the tie-break to the workspace-free best
    assert result.winner.key == "eng:best"
    json.dumps(events)  # every event is JSON-serializable


def test_a_failing_trace_sink_costs_nothing() -> None:
    world = _world()

    def broken(_: dict) -> None:
        raise OSError("disk full")

    cfg = HarnessConfig(budget_s=2.0, now=world.now, sleep=world.sleep, keep_keys=(), trace=broken)
    result = Harness(SimBackend(world), cfg).run(PROBLEM, {})
    assert result.winner is not None and result.winner.key == "eng:best"


def test_file_trace_via_environment(tmp_path, monkeypatch) -> None:
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv("CONVDOCTOR_TUNE_TRACE", str(path))
    world = _world()
    cfg = HarnessConfig(now=world.now, sleep=world.sleep, keep_keys=())
    r = tune_problem(PROBLEM, backend=SimBackend(world), budget_s=2.0, config=cfg)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["phase"] == "problem"
    assert lines[-1]["phase"] == "select" and lines[-1]["winner"] == r.winner.key
    file_trace(str(path))({"phase": "extra"})
    assert json.loads(path.read_text().splitlines()[-1]) == {"phase": "extra"}


def test_cli_trace_file_and_bad_path(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    cmd = [sys.executable, "-m", "convdoctor", "tune", "--backend", "cpu", "--no-db",
           "--problem", "fprop n=1 c=4 k=4 h=6 w=6 r=1 s=1 dtype=float32", "--budget", "0.2",
           "--json", "--trace", str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    events = [json.loads(x) for x in path.read_text().splitlines()]
    assert any(e["phase"] == "select" for e in events)
    bad = cmd[:-1] + [str(tmp_path / "missing" / "t.jsonl")]
    out = subprocess.run(bad, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "--trace" in out.stderr and "Traceback" not in out.stderr
