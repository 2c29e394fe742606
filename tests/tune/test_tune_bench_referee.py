"""The bench referee compares within one process: the winner is also timed in PyTorch's
heuristic child (`twin:<key>`), and "vs heuristic" is the ratio there."""

from __future__ import annotations

import pytest

from convdoctor.problem import ConvProblem
from convdoctor.tune.backend import Candidate
from convdoctor.tune.cmd_bench import TWIN_PREFIX, _Restricted, referee_ratios

US = 1e-6


def test_vs_heuristic_uses_the_twin_in_the_heuristic_process() -> None:
    # session 7, ResNet-50 layer4.x.conv1 fp16: the referee's own process read eng58 at 10.64 us,
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
    be = _Restricted(_Inner(), keys)
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
    be = _Restricted(_Inner(), keys)
    cands = {c.key: c for c in be.candidates(p)}
    assert set(cands) == {"torch:heuristic", "cudnn:eng67_k2=3", "twin:cudnn:eng67_k2=3"}
    assert "built by its name" in cands["cudnn:eng67_k2=3"].notes[0]
    assert be.prepare(p, cands["twin:cudnn:eng67_k2=3"]) == "twin:cudnn:eng67_k2=3"


def test_restricted_backend_short_list_keeps_the_restriction() -> None:
    p = ConvProblem.parse("fprop n=1 c=8 h=8 w=8 k=8 r=1 s=1")
    keys = {"torch:heuristic", "cudnn:e1", "cudnn:eng67_k2=3"}
    be = _Restricted(_Inner(), keys)
    with pytest.raises(RuntimeError, match="no short candidate list"):
        be.lean_candidates(p)

    class _LeanInner(_Inner):
        def lean_candidates(self, problem: ConvProblem) -> list[Candidate]:
            return [Candidate("torch:heuristic", "cuda"), Candidate("cudnn:e2", "cuda")]

    cands = {c.key: c for c in _Restricted(_LeanInner(), keys).lean_candidates(p)}
    # e1 is missing from the short list: offered by name like any plan outside the listing
    assert set(cands) == {"torch:heuristic", "cudnn:e1", "cudnn:eng67_k2=3"}
    assert "built by its name" in cands["cudnn:e1"].notes[0]
