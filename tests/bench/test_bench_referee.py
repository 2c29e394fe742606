"""The bench referee compares within one process: the winner is also timed in PyTorch's
heuristic child (`twin:<key>`), and "vs heuristic" is the ratio there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convdoctor.bench.arms import Restricted
from convdoctor.bench.referee import referee_fields, referee_ratios
from convdoctor.engines.registry import TWIN_PREFIX
from convdoctor.problem import ConvProblem
from convdoctor.tune.backend import Candidate

US = 1e-6
# each arm's backend runs in this process (tests/bench/conftest.py)
pytestmark = pytest.mark.usefixtures("in_process_workers")


def test_vs_heuristic_uses_the_twin_in_the_heuristic_process() -> None:
    # H100, ResNet-50 layer4.x.conv1 fp16: the referee's own process read eng58 at 10.64 us,
    # its heuristic child read PyTorch at 10.18 us; the twin shows the process, not the engine.
    ref = {"torch:heuristic": 10.18 * US, "torch:benchmark": 10.89 * US,
           "cudnn:eng58": 10.64 * US, "twin:cudnn:eng58": 10.15 * US}
    r = referee_ratios(ref, "torch:heuristic", ["cudnn:eng58", "cudnn:eng58"],
                       ["torch:benchmark", "torch:benchmark"])
    assert r["th"] == pytest.approx(10.15 * US)
    assert r["vs_h"] == pytest.approx(10.18 / 10.15)
    assert r["vs_b"] == pytest.approx(10.89 / 10.64)
    assert r["vs_best"] == pytest.approx(min(10.18 / 10.15, 10.89 / 10.64))


def test_without_a_twin_the_parent_time_is_used_and_a_heuristic_winner_is_one() -> None:
    ref = {"torch:heuristic": 20 * US, "cudnn:a": 18 * US}
    r = referee_ratios(ref, "torch:heuristic", ["cudnn:a"], [None])
    assert r["th"] == r["t"] and r["vs_h"] == pytest.approx(20 / 18)
    assert r["b"] is None and r["vs_b"] is None and r["vs_best"] == pytest.approx(20 / 18)
    r = referee_ratios(ref, "torch:heuristic", ["torch:heuristic"], [None])
    assert r["vs_h"] == pytest.approx(1.0)
    r = referee_ratios({}, "torch:heuristic", [None], [None])
    assert r["vs_best"] is None


class _Inner:
    name = "cuda"

    def __init__(self) -> None:
        self.prepared: list[str] = []

    def environment(self) -> dict[str, str]:
        return {}

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        return [Candidate("torch:heuristic", "cuda"), Candidate("cudnn:e1", "cuda", 4096, False),
                Candidate("cudnn:e2", "cuda")]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> str:
        self.prepared.append(candidate.key)
        return candidate.key

    def clock(self) -> None:
        return None


def test_restricted_backend_offers_twins_of_known_candidates_only() -> None:
    p = ConvProblem.parse("fprop n=1 c=8 h=8 w=8 k=8 r=1 s=1")
    keys = {"torch:heuristic", "cudnn:e1", TWIN_PREFIX + "cudnn:e1", TWIN_PREFIX + "torch:gone"}
    be = Restricted(_Inner(), keys)
    cands = {c.key: c for c in be.candidates(p)}
    assert set(cands) == {"torch:heuristic", "cudnn:e1", "twin:cudnn:e1"}
    twin = cands["twin:cudnn:e1"]
    assert twin.workspace_bytes == 4096 and twin.deterministic is False
    assert be.prepare(p, twin) == "twin:cudnn:e1"


def test_restricted_backend_offers_a_tuned_cudnn_plan_missing_from_its_listing() -> None:
    """Knob refinement lists different neighbours in each process: the referee must still time
    the plan a tuning run chose (built by its name), and its twin."""
    p = ConvProblem.parse("fprop n=1 c=8 h=8 w=8 k=8 r=1 s=1")
    keys = {"torch:heuristic", "cudnn:eng67_k2=3", TWIN_PREFIX + "cudnn:eng67_k2=3",
            "torch:never-listed"}
    be = Restricted(_Inner(), keys)
    cands = {c.key: c for c in be.candidates(p)}
    assert set(cands) == {"torch:heuristic", "cudnn:eng67_k2=3", "twin:cudnn:eng67_k2=3"}
    assert "built by its name" in cands["cudnn:eng67_k2=3"].notes[0]
    assert be.prepare(p, cands["twin:cudnn:eng67_k2=3"]) == "twin:cudnn:eng67_k2=3"


def test_restricted_backend_short_list_keeps_the_restriction() -> None:
    p = ConvProblem.parse("fprop n=1 c=8 h=8 w=8 k=8 r=1 s=1")
    keys = {"torch:heuristic", "cudnn:e1", "cudnn:eng67_k2=3"}
    be = Restricted(_Inner(), keys)
    with pytest.raises(RuntimeError, match="no short candidate list"):
        be.lean_candidates(p)

    class _LeanInner(_Inner):
        def lean_candidates(self, problem: ConvProblem) -> list[Candidate]:
            return [Candidate("torch:heuristic", "cuda"), Candidate("cudnn:e2", "cuda")]

    cands = {c.key: c for c in Restricted(_LeanInner(), keys).lean_candidates(p)}
    # e1 is missing from the short list: offered by name like any plan outside the listing
    assert set(cands) == {"torch:heuristic", "cudnn:e1", "cudnn:eng67_k2=3"}
    assert "built by its name" in cands["cudnn:e1"].notes[0]


def _ref(h: float, b: float, t: float, th: float) -> dict[str, float]:
    return {"torch:heuristic": h * US, "torch:benchmark": b * US, "cudnn:w": t * US,
            "twin:cudnn:w": th * US}


def test_one_referee_process_cannot_decide_a_row_alone() -> None:
    # H100, UNet2D dec4a fp32 forward: one referee process read the winner at 160.6 us
    # where its twin, both tuning runs and the other processes read ~150 us (0.931x alone)
    refs = [_ref(160.5, 149.4, 160.6, 149.7), _ref(160.4, 159.8, 150.1, 150.0),
            _ref(160.7, 150.2, 150.3, 150.2)]
    r = referee_fields(refs, "torch:heuristic", ["cudnn:w", "cudnn:w"],
                       ["torch:benchmark", "torch:benchmark"])
    per = [x["vs_benchmark"] for x in r["referee_ratios"]]
    assert per[0] == pytest.approx(149.4 / 160.6)          # the outlier process, kept on record
    assert r["speedup_vs_benchmark"] == pytest.approx(sorted(per)[1])
    assert r["speedup_vs_heuristic"] == pytest.approx(sorted(
        [160.5 / 149.7, 160.4 / 150.0, 160.7 / 150.2])[1])
    assert r["speedup_vs_best"] == min(r["speedup_vs_benchmark"], r["speedup_vs_heuristic"])
    # each ratio is taken inside one process: never the median time of one path over the median
    # of another
    assert r["tuned_s"] == pytest.approx(150.3 * US)
    assert r["referee_s"]["cudnn:w"] == pytest.approx(150.3 * US)
    assert len(r["referee_runs_s"]) == 3 and r["stability"] == 0.0


def test_one_referee_process_gives_the_single_process_figures() -> None:
    ref = _ref(10.18, 10.89, 10.64, 10.15)
    one = referee_ratios(ref, "torch:heuristic", ["cudnn:w"], ["torch:benchmark"])
    r = referee_fields([ref], "torch:heuristic", ["cudnn:w"], ["torch:benchmark"])
    assert r["speedup_vs_best"] == pytest.approx(one["vs_best"])
    assert (r["heuristic_s"], r["benchmark_s"], r["tuned_s"]) == (one["h"], one["b"], one["t"])
    assert r["stability"] is None            # one tuning run: no stability
    # two winners: the gap between them per process, then the median
    refs = [{"cudnn:a": 10 * US, "cudnn:b": 10.5 * US}, {"cudnn:a": 10 * US, "cudnn:b": 10.1 * US},
            {"cudnn:a": 10 * US}]
    r = referee_fields(refs, "torch:heuristic", ["cudnn:a", "cudnn:b"], [None])
    assert r["stability"] == pytest.approx((0.05 + 0.01) / 2)
    assert referee_fields([{}], "torch:heuristic", [None], [None])["speedup_vs_best"] is None


def _first_result(tmp_path: Path, tune_runs: int) -> Path:
    """A CPU bench result of two tiny problems with one referee process: `r.json`."""
    from convdoctor.cli import main

    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"name": "tiny", "problems": [
        {"group": "g", "name": "a", "problem": "n=1 c=4 h=8 w=8 k=4 r=3 s=3 pad=1"},
        {"group": "g", "name": "b", "problem": "n=1 c=4 h=6 w=6 k=4 r=1 s=1"}]}))
    out = tmp_path / "r.json"
    assert main(["bench", str(suite), "--budget", "0.1", "--pytorch-runs", "1", "--tune-runs",
                 str(tune_runs), "--referees", "1", "--json", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_referee_only_retimes_a_results_choices(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from convdoctor.cli import main

    first, again = _first_result(tmp_path, tune_runs=2), tmp_path / "r2.json"
    capsys.readouterr()
    assert main(["bench", "--referee-only", str(first), "--referees", "2", "--json", "--out",
                 str(again)]) == 0
    doc, old = json.loads(again.read_text()), json.loads(first.read_text())
    assert doc["referees"] == 2 and doc["referee_only"]["referees"] == 2
    assert doc["referee_only"]["first_summary"] == old["summary"]
    for r, o in zip(doc["rows"], old["rows"], strict=True):
        assert len(r["referee_runs_s"]) == 2 and r["speedup_vs_best"]
        assert r["winners"] == o["winners"] and r["arm_tuned_s"] == o["arm_tuned_s"]  # kept
        assert r["first_referee"]["referee_s"] == o["referee_s"]
    assert doc["summary"]["tuning_s_total_per_run"] == old["summary"]["tuning_s_total_per_run"]
    capsys.readouterr()
    # the text report names where the figures come from
    assert main(["bench", "--referee-only", str(first), "--referees", "1"]) == 0
    assert "referee only: the choices of" in capsys.readouterr().out
    # another machine's choices are refused, as is a file that is no bench result
    old["env"] = {**old["env"], "cpu_model": "some other CPU"}
    other = tmp_path / "other.json"
    other.write_text(json.dumps(old))
    assert main(["bench", "--referee-only", str(other)]) == 2
    assert "another machine" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert main(["bench", "--referee-only", str(tmp_path / "bad.json")]) == 2
    assert "not a bench result" in capsys.readouterr().err
    assert main(["bench", "--referee-only", str(tmp_path / "missing.json")]) == 2


@pytest.mark.slow
def test_referee_only_stopped_resumes_at_the_next_problem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from typing import Any

    from convdoctor.cli import main
    from convdoctor.tune import harness

    first, again = _first_result(tmp_path, tune_runs=1), tmp_path / "r2.json"
    real = harness.Harness.run
    calls = {"n": 0, "die": True}

    def counted(self: Any, *a: Any, **k: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 4 and calls["die"]:     # the second process's second problem
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(harness.Harness, "run", counted)
    args = ["bench", "--referee-only", str(first), "--referees", "2", "--json", "--out",
            str(again)]
    assert main(args) != 0
    state = json.loads((tmp_path / "r2.json.partial").read_text())
    assert len(state["referee_runs"]) == 1 and len(state["current"]["done"]) == 1
    calls.update(n=0, die=False)
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    assert calls["n"] == 1                       # only the problem the stop cut off
    doc = json.loads(again.read_text())
    assert all(len(r["referee_runs_s"]) == 2 for r in doc["rows"])
    assert len(doc["referee_only"]["arm_wall_s"]) == 2
    assert not (tmp_path / "r2.json.partial").exists()
    # a state of other choices is refused, never mixed in
    capsys.readouterr()
    calls.update(n=0, die=True)
    assert main(args) != 0
    other = json.loads(first.read_text())
    other["rows"][0]["winners"] = ["cpu:mkldnn-off", "cpu:mkldnn-off"]
    first.write_text(json.dumps(other))
    assert main([*args, "--resume"]) == 2
    assert "belongs to another run" in capsys.readouterr().err
