"""The prescreen of quick tuning: one timed sample per candidate after its first runs, and only the
fastest go on to the check, the warm-up and the screen."""

from __future__ import annotations

from tune_fakes import SimBackend, SimCandidate, SimRunner, SimWorld

from convdoctor.problem import ConvProblem
from convdoctor.settings import QUICK, Settings, for_tuning
from convdoctor.tune.harness import Harness, HarnessConfig

PROBLEM = ConvProblem.parse("fprop n=8 c=64 h=56 w=56 k=64 r=3 s=3 pad=1")


class CountingBackend(SimBackend):
    def __init__(self, world: SimWorld) -> None:
        super().__init__(world)
        self.checked: list[str] = []

    def prepare(self, problem: ConvProblem, candidate: object) -> SimRunner:
        runner = super().prepare(problem, candidate)  # type: ignore[arg-type]
        check = runner.check

        def counted() -> object:
            self.checked.append(runner.candidate.key)
            return check()

        runner.check = counted  # type: ignore[method-assign]
        return runner


def _world(seed: int) -> SimWorld:
    cands = [SimCandidate(f"eng:{i:02d}", 1e-3 * (1.0 + 0.07 * i)) for i in range(12)]
    cands.append(SimCandidate("torch:heuristic", 2.5e-3))       # slow, but a baseline
    cands.reverse()                                              # the best listed last
    return SimWorld(seed=seed, candidates=cands, noise_sigma=0.01, outlier_p=0.0)


def _run(prescreen: int, seed: int = 1) -> tuple[object, CountingBackend]:
    w = _world(seed)
    be = CountingBackend(w)
    cfg = HarnessConfig(budget_s=1.0, now=w.now, sleep=w.sleep, prescreen=prescreen)
    return Harness(be, cfg).run(PROBLEM, {"backend": "sim"}), be


def test_only_the_fastest_by_one_sample_are_checked_and_the_winner_is_the_same() -> None:
    full, be_full = _run(0)
    quick, be_quick = _run(3)
    assert len(be_full.checked) == 13
    # the 3 fastest by their first timed sample and the baseline, nothing else
    assert sorted(be_quick.checked) == ["eng:00", "eng:01", "eng:02", "torch:heuristic"]
    assert quick.winner is not None and full.winner is not None
    assert quick.winner.key == full.winner.key == "eng:00"
    out = {s.candidate.key: s for s in quick.candidates if s.status == "screened-out"}
    assert set(out) == {f"eng:{i:02d}" for i in range(3, 12)}
    assert all(s.reason.startswith("prescreen: ") and "x the fastest first sample" in s.reason
               for s in out.values())
    assert not out.get("torch:heuristic")


def test_a_wrong_but_fast_candidate_is_caught_after_the_prescreen() -> None:
    w = _world(2)
    w.candidates.append(SimCandidate("eng:wrong", 0.5e-3, wrong=True))
    be = CountingBackend(w)
    cfg = HarnessConfig(budget_s=1.0, now=w.now, sleep=w.sleep, prescreen=2)
    res = Harness(be, cfg).run(PROBLEM, {"backend": "sim"})
    stats = {s.candidate.key: s for s in res.candidates}
    assert stats["eng:wrong"].status == "disqualified"
    assert res.winner is not None and res.winner.key == "eng:00"


def test_quick_tuning_settings() -> None:
    s = for_tuning(Settings(), "quick")
    assert s.tune_prescreen == QUICK["tune_prescreen"] and s.cudnn_refine_budget_s == 0
    # a refinement budget the user chose is kept: knob refinement within it
    assert for_tuning(Settings(cudnn_refine_budget_s=1.0), "quick").cudnn_refine_budget_s == 1.0
    assert s.result_key() != "default"
    # a setting the user chose is kept
    mine = Settings(cudnn_refine_budget_s=1.0, cudnn_refine=True, tune_prescreen=3)
    assert for_tuning(mine, "quick").tune_prescreen == 3
    assert for_tuning(mine, "thorough") == mine


def test_quick_tuning_does_not_time_benchmarks_pick_thorough_does() -> None:
    from types import SimpleNamespace

    from convdoctor.engines.torch_paths import BENCHMARK, HEURISTIC, TorchPaths

    p = ConvProblem.parse("fprop n=8 c=16 k=16 h=14 w=14 r=3 s=3 pad=1 dtype=float32")

    def offered(settings: Settings) -> list[str]:
        return [c.key for c in TorchPaths().offers(p, SimpleNamespace(settings=settings))]

    assert BENCHMARK in offered(for_tuning(Settings(), "thorough"))
    quick = offered(for_tuning(Settings(), "quick"))
    assert BENCHMARK not in quick and HEURISTIC in quick
