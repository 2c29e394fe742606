"""The harness's stopping criteria (`HarnessConfig.stopping`), the sampler stopping by them, and
the choice's tie rules (`convdoctor.tune.select`). The criteria on their own are in
tests/measure/test_measure_stopping.py."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tune_fakes import SimBackend, SimCandidate, SimWorld

from convdoctor.measure.stopping import (
    RelativeCI,
    SampleCap,
    Separated,
    TimeBudget,
)
from convdoctor.problem import ConvProblem
from convdoctor.tune.backend import Candidate
from convdoctor.tune.harness import Harness, HarnessConfig
from convdoctor.tune.result import CandidateStats
from convdoctor.tune.select import (
    TieRules,
    placement_score,
    pytorch_bound,
    select_winner,
    tie_order,
    within_band,
)

PROBLEM = ConvProblem.parse("fprop n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1")


def test_harness_config_sets_the_criteria() -> None:
    cfg = HarnessConfig(budget_s=7.0, target_rel_ci=0.02, min_samples=8, min_rounds=4,
                        max_samples=50, max_tie_band=0.03)
    rule = cfg.stopping()
    assert rule.leader == RelativeCI(target=0.02, min_samples=8)
    assert rule.paired == RelativeCI(target=0.02, min_samples=4)
    assert rule.separated == Separated(band=0.03, min_rounds=4)
    assert rule.cap == SampleCap(max_samples=50) and rule.budget == TimeBudget(budget_s=7.0)
    assert cfg.tie_rules() == TieRules(tie_floor=0.005, max_tie_band=0.03,
                                       pytorch_bounds_ties=True,
                                       reference_only=("torch:benchmark",))


def _equal_world(sigma: float) -> SimWorld:
    return SimWorld(seed=1, candidates=[SimCandidate("eng:a", 1e-3), SimCandidate("eng:b", 1e-3)],
                    noise_sigma=sigma, outlier_p=0.0)


def test_sampling_stops_as_soon_as_every_criterion_is_met() -> None:
    # two equal candidates, a loose target: the leader has its 10 samples after 2 rounds of 5,
    # the other needs its 6 paired rounds: exactly 6 rounds
    w = _equal_world(0.001)
    events: list[dict] = []
    cfg = HarnessConfig(budget_s=100.0, target_rel_ci=0.5, now=w.now, sleep=w.sleep,
                        trace=events.append)
    Harness(SimBackend(w), cfg).run(PROBLEM, {})
    assert sum(e["phase"] == "sample" for e in events) == 6


def test_sampling_stops_at_the_time_budget_when_the_median_never_settles() -> None:
    w = _equal_world(0.5)
    notes: list[str] = []
    events: list[dict] = []
    cfg = HarnessConfig(budget_s=0.2, target_rel_ci=1e-6, now=w.now, sleep=w.sleep,
                        trace=events.append)
    r = Harness(SimBackend(w), cfg, notes.append).run(PROBLEM, {})
    assert "time cap reached before every median converged" in notes
    rounds = sum(e["phase"] == "sample" for e in events)
    # each round times 2 candidates x 5 runs of ~1 ms (x noise): the budget ends it after
    # about 0.2 s, well before the 300-sample cap
    assert 10 <= rounds <= 40, rounds
    assert all(s.n < 300 for s in r.candidates)


# ---------------------------------------------------------------------- the choice
@dataclass(eq=False)
class _Fin:
    stats: CandidateStats
    runner: None = None


def _fin(key: str, *, pinned: bool = True, workspace: int = 0) -> _Fin:
    stats = CandidateStats(candidate=Candidate(key=key, backend="sim", pinned=pinned,
                                               workspace_bytes=workspace))
    stats.samples = [1e-3]
    return _Fin(stats)


def _rounds(times: dict[_Fin, list[float]]) -> list[dict[int, float]]:
    n = len(next(iter(times.values())))
    return [{id(f): v[i] for f, v in times.items()} for i in range(n)]


def test_a_pinned_kernel_wins_a_tie_only_within_the_tie_floor() -> None:
    lead = _fin("eng:lead", pinned=False, workspace=1 << 20)
    near = _fin("eng:near", workspace=1 << 20)
    far = _fin("eng:far")
    rel = {id(lead): 1.0, id(near): 1.004, id(far): 1.009}
    assert [f.stats.candidate.key for f in tie_order([lead, near, far], lead, rel, 0.005)] == [
        "eng:near", "eng:far", "eng:lead"]   # far: beyond the floor, by workspace
    rel[id(near)] = 1.006
    assert tie_order([lead, near], lead, rel, 0.005)[0] is lead   # same workspace: the key


def test_the_noise_band_is_the_floor_plus_the_ratio_ci_but_capped() -> None:
    lead, tight, noisy = _fin("eng:lead"), _fin("eng:tight"), _fin("eng:noisy")
    scores = {id(tight): [1.008] * 10, id(noisy): [0.9, 1.1, 1.3, 0.95, 1.2, 1.015, 1.05] * 2}
    rel = {id(lead): 1.0, id(tight): 1.008, id(noisy): 1.015}
    rules = TieRules(tie_floor=0.005, max_tie_band=0.02)
    # tight: 0.8% behind with no spread is measurably slower; noisy: 1.5% behind, within the
    # capped band
    assert within_band([lead, tight, noisy], lead, rel, scores, rules) == [lead, noisy]
    rules = TieRules(tie_floor=0.005, max_tie_band=0.01)
    assert within_band([lead, tight, noisy], lead, rel, scores, rules) == [lead]


def test_a_measured_pytorch_path_bounds_the_ties() -> None:
    # the plan with the smaller workspace is 1.2% behind the leader, within its noise band (its
    # paired ratios spread +-2%), while PyTorch's own path measured only 0.2% behind
    lead = _fin("eng:lead", workspace=1 << 20)
    small = _fin("eng:small-ws")
    torch = _fin("torch:heuristic", workspace=1 << 20)
    noisy = [0.99, 1.03, 1.0, 1.025, 1.012, 1.012, 0.995, 1.03]
    rounds = _rounds({lead: [1.0] * 8, small: noisy, torch: [1.002] * 8})
    assert placement_score(rounds, small, lead) == pytest.approx(1.012)
    assert pytorch_bound([lead, small, torch], lead, rounds, 0.005) == pytest.approx(
        1.002 * 1.005)
    sel = select_winner([lead, small, torch], rounds, TieRules())
    assert sel is not None and sel.winner.key == "eng:lead" and sel.band == 0.005
    assert [f.stats.candidate.key for f in sel.ties] == ["eng:lead", "torch:heuristic"]
    # without the bound the smaller workspace wins the tie
    sel = select_winner([lead, small, torch], rounds, TieRules(pytorch_bounds_ties=False))
    assert sel is not None and sel.winner.key == "eng:small-ws"
    assert sel.event()["winner"] == "eng:small-ws" and sel.event()["pytorch_bound"] is None


def test_nothing_measured_chooses_nothing() -> None:
    f = _fin("eng:a")
    f.stats.samples = []
    assert select_winner([f], [], TieRules()) is None
