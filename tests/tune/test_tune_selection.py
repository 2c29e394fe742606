"""The harness picks the truly fastest candidate under the traps of real devices, where a one-sample
screen (PyTorch's cudnn.benchmark way: one warm-up, one timed run each) does not.

Each scenario is run for many seeds on the same simulated candidates with both selectors.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from tune_fakes import SimBackend, SimCandidate, SimWorld

from convdoctor.problem import ConvProblem
from convdoctor.tune.backend import Candidate
from convdoctor.tune.harness import Harness, HarnessConfig, one_sample_select

PROBLEM = ConvProblem.parse("fprop n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1")
SEEDS = 60
BEST = "eng:best"


def _candidates(rng: random.Random, scenario: str) -> list[SimCandidate]:
    base = 1e-3
    cands = [SimCandidate(BEST, base), SimCandidate("eng:second", base * 1.05)]
    for i in range(6):
        cands.append(SimCandidate(f"eng:other{i}", base * rng.uniform(1.08, 1.8)))
    if scenario in ("first-run", "all"):
        # Lazy loading: the best engine's first runs are several times its steady state.
        cands[0].first_run_penalty = rng.uniform(2.0, 4.0)
        for c in cands[2:]:
            if rng.random() < 0.3:
                c.first_run_penalty = rng.uniform(1.5, 3.0)
    rng.shuffle(cands)
    return cands


def _world(seed: int, scenario: str) -> SimWorld:
    rng = random.Random(seed * 7919 + sum(map(ord, scenario)))
    cands = _candidates(rng, scenario)
    w = SimWorld(seed=seed, candidates=cands)
    if scenario in ("drift", "all"):
        w.drift_per_s = rng.uniform(3.0, 8.0)       # +3..8% per 10 ms: a GPU heating up fast
    if scenario in ("throttle", "all", "throttle-unreported"):
        start = rng.uniform(0.0, 0.012)
        w.throttle = (start, start + rng.uniform(0.005, 0.02))
        w.report_throttle = scenario != "throttle-unreported"
    if scenario == "noise":
        w.noise_sigma = 0.08
        w.outlier_p = 0.08
    return w


def _harness_pick(seed: int, scenario: str) -> str | None:
    w = _world(seed, scenario)
    cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep, throttle_pause_s=0.05)
    result = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
    return None if result.winner is None else result.winner.key


def _one_sample_pick(seed: int, scenario: str) -> str | None:
    w = _world(seed, scenario)
    c = one_sample_select(PROBLEM, SimBackend(w), limit=10)
    return None if c is None else c.key


def _rates(scenario: str) -> tuple[float, float]:
    h = sum(_harness_pick(s, scenario) == BEST for s in range(SEEDS)) / SEEDS
    o = sum(_one_sample_pick(s, scenario) == BEST for s in range(SEEDS)) / SEEDS
    return h, o


@pytest.mark.parametrize("scenario,one_sample_max", [
    ("noise", 0.75),
    ("first-run", 0.70),
    ("drift", 0.75),
    ("throttle", 0.80),
    ("throttle-unreported", 0.80),
    ("all", 0.50),
])
def test_harness_finds_the_fastest_where_one_sample_does_not(scenario: str,
                                                             one_sample_max: float) -> None:
    h, o = _rates(scenario)
    print(f"{scenario}: harness {h:.2f}, one-sample {o:.2f}")
    assert h >= 0.95, f"harness picked the true best in only {h:.0%} of {SEEDS} seeds"
    assert o <= one_sample_max, f"one-sample screen unexpectedly good ({o:.0%}): trap too weak"
    assert h - o >= 0.15


def test_slowdown_samples_are_discarded_and_recorded() -> None:
    w = _world(3, "throttle")
    w.throttle = (0.0, 0.2)          # throttled from the start: harness pauses until it clears
    cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep, throttle_pause_s=0.05)
    r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
    assert r.winner is not None and r.winner.key == BEST
    assert sum(s.discarded for s in r.candidates) > 0
    assert not r.degraded
    ws = r.winner_stats
    assert ws is not None and ws.clock_mhz == 1980.0


def test_persistent_slowdown_marks_result_degraded() -> None:
    w = _world(4, "throttle")
    w.throttle = (0.0, 1e9)
    cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep, throttle_pause_s=0.05,
                        max_throttle_retries=3)
    r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
    assert r.degraded and r.winner is None
    assert {s.status for s in r.candidates} == {"not-measured"}
    assert any("slowdown" in n for n in r.notes)


def test_wrong_engine_is_disqualified_even_when_fastest() -> None:
    w = _world(5, "noise")
    w.noise_sigma, w.outlier_p = 0.02, 0.0
    w.candidates.append(SimCandidate("eng:wrong-but-fast", 0.5e-3, wrong=True))
    cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep)
    r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
    st = r.stats_for("eng:wrong-but-fast")
    assert st is not None and st.status == "disqualified" and "wrong output" in st.reason
    assert r.winner is not None and r.winner.key == BEST


def test_a_path_timed_outside_the_tolerance_is_measured_but_never_chosen() -> None:
    # on an H100, benchmark=True's pick missed the fp32 TF32 tolerance (2.09e-3 > 2e-3): dropped,
    # the bench would have no time for it, so the bench's arms time PyTorch's paths anyway
    import math

    w = _world(5, "noise")
    w.noise_sigma, w.outlier_p = 0.02, 0.0
    w.candidates.append(SimCandidate("torch:heuristic", 0.5e-3, wrong=True, wrong_err=2.1e-3))
    w.candidates.append(SimCandidate("torch:benchmark", 0.4e-3, wrong=True, wrong_err=math.inf))
    cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep,
                        time_outside_tolerance=("torch:heuristic", "torch:benchmark"))
    r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
    heur = r.stats_for("torch:heuristic")
    assert heur is not None and heur.status == "ok" and heur.median_s
    assert heur.median_s == pytest.approx(0.5e-3, rel=0.1)
    assert heur.correctness is not None and not heur.correctness.ok   # the failure is kept
    assert r.stats_for("torch:benchmark").status == "disqualified"    # type: ignore[union-attr]
    assert r.winner is not None and r.winner.key == BEST              # 2x faster, never chosen
    # without the option the same path is disqualified, as every wrong candidate
    w2 = _world(5, "noise")
    w2.candidates.append(SimCandidate("torch:heuristic", 0.5e-3, wrong=True, wrong_err=2.1e-3))
    r2 = Harness(SimBackend(w2), HarnessConfig(budget_s=3.0, now=w2.now, sleep=w2.sleep)).run(
        PROBLEM, {"backend": "sim"})
    assert r2.stats_for("torch:heuristic").status == "disqualified"   # type: ignore[union-attr]


def test_a_path_outside_the_tolerance_bounds_no_tie() -> None:
    # PyTorch's measured paths bound a tie; one that misses the tolerance is no alternative a
    # user could take, so it must not take a tie away from a plan
    for seed in range(5):
        w = SimWorld(seed=seed, candidates=[
            SimCandidate("eng:a", 1.0e-3, workspace=1000), SimCandidate("eng:b", 1.003e-3),
            SimCandidate("torch:heuristic", 0.99e-3, wrong=True, wrong_err=2.1e-3,
                         pinned=False)], noise_sigma=0.002, outlier_p=0.0)
        cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep,
                            time_outside_tolerance=("torch:heuristic",))
        r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
        assert r.winner is not None and r.winner.key == "eng:b"   # the tie, on its workspace


def test_a_path_outside_the_tolerance_leads_no_sampling_or_hopeless_drop() -> None:
    # the sampling drops candidates that cannot tie with the leader: the leader is one that may
    # be chosen, so a plan 1% behind the best stays sampled as long as the best
    for seed in range(5):
        w = SimWorld(seed=seed, candidates=[
            SimCandidate("eng:best", 1e-3), SimCandidate("eng:second", 1.01e-3),
            SimCandidate("torch:heuristic", 0.97e-3, wrong=True, wrong_err=2.1e-3,
                         pinned=False)], noise_sigma=0.03, outlier_p=0.0)
        cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep,
                            time_outside_tolerance=("torch:heuristic",))
        r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
        n = {s.candidate.key: s.n for s in r.candidates}
        assert n["eng:second"] == n["eng:best"], (seed, n)
    # the hopeless drop compares with the fastest second run of a choosable candidate: a 25 ms
    # plan is 2.5x the 10 ms one, not 25x the 1 ms path outside the tolerance
    w = SimWorld(seed=1, candidates=[
        SimCandidate("torch:heuristic", 1e-3, wrong=True, wrong_err=2.1e-3, pinned=False),
        SimCandidate("eng:mid", 10e-3), SimCandidate("eng:slow", 25e-3)],
        noise_sigma=0.01, outlier_p=0.0)
    cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep,
                        time_outside_tolerance=("torch:heuristic",))
    r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
    slow = r.stats_for("eng:slow")
    assert slow is not None and not slow.reason.startswith("hopeless"), slow.reason
    assert r.winner is not None and r.winner.key == "eng:mid"


def test_paths_outside_the_tolerance_take_no_finalist_places() -> None:
    # six faster plans timed outside the tolerance must not fill the six finalist places and
    # screen out the only choosable plans (no winner)
    cands = [SimCandidate(f"eng:near{i}", 0.8e-3, wrong=True, wrong_err=2.1e-3)
             for i in range(6)] + [SimCandidate("eng:x", 1.0e-3), SimCandidate("eng:y", 1.05e-3)]
    w = SimWorld(seed=2, candidates=cands, noise_sigma=0.01, outlier_p=0.0)
    keys = tuple(c.key for c in cands)
    cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep, time_outside_tolerance=keys)
    r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
    assert r.winner is not None and r.winner.key == "eng:x"
    assert r.stats_for("eng:y").status == "ok"                     # type: ignore[union-attr]
    assert all(r.stats_for(f"eng:near{i}").median_s for i in range(6))  # type: ignore[union-attr]


def test_deterministic_problem_excludes_nondeterministic_candidates() -> None:
    w = _world(6, "noise")
    w.noise_sigma, w.outlier_p = 0.02, 0.0
    w.candidates.append(SimCandidate("eng:atomic-fast", 0.5e-3, deterministic=False))
    cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep)
    from dataclasses import replace

    r = Harness(SimBackend(w), cfg).run(replace(PROBLEM, deterministic=True), {"backend": "sim"})
    assert r.stats_for("eng:atomic-fast").status == "unsupported"  # type: ignore[union-attr]
    assert r.winner is not None and r.winner.key == BEST


def test_ties_break_by_workspace_then_determinism_then_key_and_runs_agree() -> None:
    picks = set()
    for seed in range(20):
        cands = [SimCandidate("eng:b-big-ws", 1e-3, workspace=1 << 20),
                 SimCandidate("eng:a-nondet", 1e-3, workspace=0, deterministic=False),
                 SimCandidate("eng:c-small-ws", 1e-3, workspace=0),
                 SimCandidate("eng:d-small-ws", 1e-3, workspace=0),
                 SimCandidate("eng:slow", 1.5e-3)]
        random.Random(seed).shuffle(cands)
        w = SimWorld(seed=seed, candidates=cands, noise_sigma=0.02, outlier_p=0.0)
        cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep)
        r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
        assert r.winner is not None
        picks.add(r.winner.key)
    # equal speed: no workspace, deterministic, then the smallest key
    assert picks == {"eng:c-small-ws"}


def _shuffled_picks(make: Callable[[], list[SimCandidate]], seeds: int = 20, noise: float = 0.004) -> list[str]:
    """The winner per seed, candidates in a seeded random order (GPU-like 0.4% sample noise)."""
    picks = []
    for seed in range(seeds):
        cands = make()
        random.Random(seed).shuffle(cands)
        w = SimWorld(seed=seed, candidates=cands, noise_sigma=noise, outlier_p=0.0)
        r = Harness(SimBackend(w), HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep)).run(
            PROBLEM, {"backend": "sim"})
        assert r.winner is not None
        picks.append(r.winner.key)
    return picks


def test_ties_prefer_a_pinned_kernel_over_a_per_process_pick() -> None:
    # On an H100, PyTorch's heuristic path ran a 19-20% slower kernel in one fresh process than
    # in five others. A cuDNN plan tied with it (within the noise band) is the same kernel in
    # every process, so it wins the tie even with a workspace; a clearly faster per-process pick
    # still wins on speed. Per-sample noise 0.4% (GPU ratio half-widths measure 0.1-0.8%): the
    # plan must measure within the 0.5% tie floor to win on pinning.
    picks = _shuffled_picks(lambda: [SimCandidate("torch:heuristic", 1e-3, workspace=0, pinned=False),
                                     SimCandidate("cudnn:eng67", 1e-3, workspace=1 << 20),
                                     SimCandidate("eng:slow", 1.5e-3)])
    assert set(picks) == {"cudnn:eng67"}
    fast = 0
    for seed in range(20):
        w = SimWorld(seed=seed, candidates=[SimCandidate("torch:heuristic", 1e-3, pinned=False),
                                            SimCandidate("cudnn:eng67", 1.05e-3)],
                     noise_sigma=0.005, outlier_p=0.0)
        r = Harness(SimBackend(w), HarnessConfig(budget_s=1.0, now=w.now, sleep=w.sleep)).run(
            PROBLEM, {"backend": "sim"})
        fast += r.winner is not None and r.winner.key == "torch:heuristic"
    assert fast >= 19, f"{fast}/20"


def test_a_pinned_kernel_past_the_tie_floor_does_not_beat_the_leader_on_pinning() -> None:
    # On an H100 (Inception Conv2d_2a_3x3), a cuDNN plan 0.85% behind PyTorch's heuristic path
    # in two tuning runs was inside the noise band, and preferred as pinned it measured 2.3%
    # slower in the bench's referee. Past the 0.5% floor pinning does not decide: the leader (no
    # workspace) wins.
    picks = _shuffled_picks(lambda: [SimCandidate("torch:heuristic", 1e-3, workspace=0, pinned=False),
                                     SimCandidate("cudnn:eng67", 1.0085e-3, workspace=1 << 20)])
    assert picks.count("torch:heuristic") >= 18, picks


def test_candidate_pinned_round_trips_and_old_records_read_as_pinned() -> None:
    c = Candidate("torch:heuristic", "cuda", 0, True, ("n",), pinned=False)
    assert Candidate.from_dict(c.to_dict()) == c
    old = {k: v for k, v in c.to_dict().items() if k != "pinned"}   # a record from before
    assert Candidate.from_dict(old).pinned is True


def test_budget_caps_sampling() -> None:
    w = _world(7, "noise")
    w.noise_sigma = 0.5            # so noisy the CI never reaches 1%
    cfg = HarnessConfig(budget_s=0.5, now=w.now, sleep=w.sleep)
    r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
    assert r.winner is not None
    assert w.t < 0.5 + 0.3         # sampling stopped near the cap (plus warm-up and screen)


def test_a_backend_that_cannot_list_candidates_costs_only_this_problem() -> None:
    w = _world(8, "noise")

    class Broken(SimBackend):
        def candidates(self, problem: ConvProblem) -> list:
            raise RuntimeError("cudnn graph not supported")

    r = Harness(Broken(w), HarnessConfig(now=w.now, sleep=w.sleep)).run(PROBLEM, {})
    assert r.winner is None and "could not list candidates" in r.notes[0]


def test_noise_never_turns_a_clearly_slower_candidate_into_a_tie() -> None:
    # "eng:a-slower" wins every tie-break (same workspace, deterministic, first key), so a tie band
    # widened by noise would choose it; capped at 2% (the default), the 5% faster one is chosen.
    def picks(max_band: float) -> int:
        fast = 0
        for seed in range(30):
            w = SimWorld(seed=seed, candidates=[SimCandidate("eng:a-slower", 1.05e-3),
                                                SimCandidate("eng:z-fast", 1e-3)],
                         noise_sigma=0.10, outlier_p=0.05)
            cfg = HarnessConfig(budget_s=0.3, now=w.now, sleep=w.sleep, max_tie_band=max_band)
            r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
            fast += r.winner is not None and r.winner.key == "eng:z-fast"
        return fast

    capped, uncapped = picks(0.02), picks(1.0)
    assert capped >= 26, f"{capped}/30"
    assert uncapped <= 20, f"uncapped band picked the faster one {uncapped}/30: trap too weak"


def test_benchmark_true_is_measured_but_never_chosen() -> None:
    # Even when it measures fastest: a later process would search again and may pick otherwise.
    w = SimWorld(seed=1, candidates=[SimCandidate("torch:benchmark", 0.9e-3),
                                     SimCandidate("cudnn:eng0", 1e-3),
                                     SimCandidate("torch:heuristic", 1.2e-3)],
                 noise_sigma=0.02, outlier_p=0.0)
    r = Harness(SimBackend(w), HarnessConfig(now=w.now, sleep=w.sleep)).run(PROBLEM, {})
    assert r.stats_for("torch:benchmark").status == "ok"  # type: ignore[union-attr]
    assert r.winner is not None and r.winner.key == "cudnn:eng0"
    assert r.baselines["torch:benchmark"] < r.winner_time_s  # type: ignore[operator]


def test_a_measurably_slower_candidate_is_not_a_tie_for_its_smaller_workspace() -> None:
    # H100 decision traces: a 1% tie floor broke ties toward a workspace-free path measured
    # 1.0-1.4% slower with half-widths of 0.2-0.5%. Tight noise (0.5% per sample): 1.5% slower is
    # measurably slower.
    fast = 0
    for seed in range(20):
        w = SimWorld(seed=seed, candidates=[SimCandidate("eng:ws-free", 1.015e-3, workspace=0),
                                            SimCandidate("eng:with-ws", 1e-3, workspace=1 << 20)],
                     noise_sigma=0.005, outlier_p=0.0)
        r = Harness(SimBackend(w), HarnessConfig(budget_s=1.0, now=w.now, sleep=w.sleep)).run(
            PROBLEM, {"backend": "sim"})
        fast += r.winner is not None and r.winner.key == "eng:with-ws"
    assert fast >= 19, f"{fast}/20"
    # with a 1% floor it is a tie, and the faster one wins only about half of them (31 of 60
    # seeds here)
    old = 0
    for seed in range(60):
        w = SimWorld(seed=seed, candidates=[SimCandidate("eng:ws-free", 1.015e-3, workspace=0),
                                            SimCandidate("eng:with-ws", 1e-3, workspace=1 << 20)],
                     noise_sigma=0.005, outlier_p=0.0)
        cfg = HarnessConfig(budget_s=1.0, now=w.now, sleep=w.sleep, tie_floor=0.01)
        r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
        old += r.winner is not None and r.winner.key == "eng:with-ws"
    assert old <= 40, f"trap too weak: the 1% floor chose the faster one {old}/60"


def _with_a_crawler(crawl_s: float, **cfg: Any) -> tuple[Any, SimWorld]:
    """A fast, a crawling and a second-fastest candidate, tuned once (simulated time)."""
    w = SimWorld(seed=3, candidates=[SimCandidate("eng:fast", 1e-3),
                                     SimCandidate("eng:crawl", crawl_s),
                                     SimCandidate("eng:second", 1.1e-3)],
                 noise_sigma=0.01, outlier_p=0.0)
    config = HarnessConfig(budget_s=0.5, now=w.now, sleep=w.sleep, **cfg)
    return Harness(SimBackend(w), config).run(PROBLEM, {"backend": "sim"}), w


def test_a_hopelessly_slow_candidate_is_dropped_after_its_second_run() -> None:
    # on an H100, a cuDNN knob setting ran ~1-2 s per call next to sub-millisecond engines; its
    # warm-up and screen samples would cost 50 s of a 66 s tuning run. Under a second a call,
    # the second run decides (a first run may carry one-time work)
    r, w = _with_a_crawler(0.5)
    crawl = r.stats_for("eng:crawl")
    assert crawl is not None and crawl.status == "screened-out" and "hopeless" in crawl.reason
    assert "second run" in crawl.reason
    assert crawl.second_run_s is not None and crawl.second_run_s > 0.4
    assert not crawl.samples and not crawl.screen_samples
    # its first and second runs only (the check comes after the second run): not the ~15 runs
    # of check, warm-up and screen
    assert next(c for c in w.candidates if c.key == "eng:crawl").runs == 2
    assert crawl.correctness is None
    assert r.winner is not None and r.winner.key == "eng:fast"
    # a candidate merely 10x slower is left to the screen (it may still be a baseline worth
    # reporting), and PyTorch's own paths are never dropped this way
    w2 = SimWorld(seed=3, candidates=[SimCandidate("eng:fast", 30e-3),
                                      SimCandidate("torch:heuristic", 1.5),
                                      SimCandidate("eng:ten", 0.3)],
                  noise_sigma=0.01, outlier_p=0.0)
    r2 = Harness(SimBackend(w2), HarnessConfig(budget_s=0.5, now=w2.now, sleep=w2.sleep)).run(
        PROBLEM, {"backend": "sim"})
    assert "hopeless" not in r2.stats_for("torch:heuristic").reason  # type: ignore[union-attr]
    assert "hopeless" not in r2.stats_for("eng:ten").reason  # type: ignore[union-attr]


def test_a_first_run_over_a_second_drops_a_hopeless_candidate_without_a_second() -> None:
    # on an H100 (ConvNeXt-tiny fp32 depthwise 7x7 wgrad) one cuDNN setting ran 0.7-3.7 s per
    # call, its first run included; its second runs cost 8 s of a 41.8 s tuning run
    r, w = _with_a_crawler(1.5)
    crawl = r.stats_for("eng:crawl")
    assert crawl is not None and crawl.status == "screened-out"
    assert "hopeless: its first run took" in crawl.reason
    assert crawl.first_run_s is not None and crawl.first_run_s > 1.0
    assert crawl.second_run_s is None
    assert next(c for c in w.candidates if c.key == "eng:crawl").runs == 1
    # a first run over a second is not hopeless by itself: a candidate that is slow everywhere
    # (no faster one seen) is measured as usual
    w2 = SimWorld(seed=3, candidates=[SimCandidate("eng:crawl", 1.5),
                                      SimCandidate("eng:crawl2", 1.6)],
                  noise_sigma=0.01, outlier_p=0.0)
    r2 = Harness(SimBackend(w2), HarnessConfig(budget_s=5.0, now=w2.now, sleep=w2.sleep)).run(
        PROBLEM, {"backend": "sim"})
    assert r2.winner is not None and r2.winner.key == "eng:crawl"
    assert "hopeless" not in (r2.stats_for("eng:crawl2").reason or "")  # type: ignore[union-attr]


def test_later_problems_of_the_class_skip_a_candidate_found_hopeless() -> None:
    from convdoctor.tune.hopeless import HopelessMemory, problem_class

    memory = HopelessMemory()
    same = ConvProblem.parse(PROBLEM.key().replace("n=", "n=1", 1))    # other sizes, one class
    other = PROBLEM.with_direction("dgrad" if PROBLEM.direction != "dgrad" else "wgrad")
    assert problem_class(same) == problem_class(PROBLEM) != problem_class(other)

    def world() -> SimWorld:
        return SimWorld(seed=3, candidates=[SimCandidate("eng:fast", 1e-3),
                                            SimCandidate("eng:crawl", 1.5),
                                            SimCandidate("eng:ten", 0.3)],
                        noise_sigma=0.01, outlier_p=0.0)

    def tune(p: ConvProblem) -> tuple[object, SimWorld]:
        w = world()
        cfg = HarnessConfig(budget_s=0.5, now=w.now, sleep=w.sleep, hopeless_memory=memory)
        return Harness(SimBackend(w), cfg).run(p, {"backend": "sim"}), w

    def runs(w: SimWorld, key: str) -> int:
        return next(c.runs for c in w.candidates if c.key == key)

    tune(PROBLEM)       # 1500x the fastest: remembered (`recall_factor` 100)
    r, w = tune(same)
    crawl = r.stats_for("eng:crawl")  # type: ignore[attr-defined]
    assert runs(w, "eng:crawl") == 0 and crawl.status == "screened-out"
    assert "earlier in this run" in crawl.reason and PROBLEM.short() in crawl.reason
    assert r.winner.key == "eng:fast"  # type: ignore[attr-defined]
    # another class measures it again
    r, w = tune(other)
    assert runs(w, "eng:crawl") == 1
    # PyTorch's own paths are never skipped, and without a memory nothing is
    memory.remember(PROBLEM, "torch:heuristic", 1e4, 100.0)
    memory.remember(PROBLEM, "eng:fast", 50.0, 100.0)            # under the recall factor
    assert memory.recall(same, "eng:fast") is None
    w = SimWorld(seed=3, candidates=[SimCandidate("torch:heuristic", 1e-3),
                                     SimCandidate("eng:crawl", 1.5)], noise_sigma=0.01,
                 outlier_p=0.0)
    Harness(SimBackend(w), HarnessConfig(budget_s=0.5, now=w.now, sleep=w.sleep,
                                         hopeless_memory=memory)).run(same, {"backend": "sim"})
    assert runs(w, "torch:heuristic") > 2 and runs(w, "eng:crawl") == 0
    w = world()
    Harness(SimBackend(w), HarnessConfig(budget_s=0.5, now=w.now, sleep=w.sleep)).run(
        same, {"backend": "sim"})
    assert runs(w, "eng:crawl") == 1


def test_a_wrong_fast_candidate_does_not_make_the_correct_ones_hopeless() -> None:
    w = SimWorld(seed=5, candidates=[SimCandidate("eng:wrong-fast", 1e-3, wrong=True),
                                     SimCandidate("eng:slow-ok", 0.3)],
                 noise_sigma=0.01, outlier_p=0.0)
    r = Harness(SimBackend(w), HarnessConfig(budget_s=2.0, now=w.now, sleep=w.sleep)).run(
        PROBLEM, {"backend": "sim"})
    assert r.stats_for("eng:wrong-fast").status == "disqualified"  # type: ignore[union-attr]
    assert r.winner is not None and r.winner.key == "eng:slow-ok"


def test_every_candidates_cost_is_recorded_and_they_add_up_to_the_run() -> None:
    # depthwise layers can tune 40-50 s per run (H100): each candidate's host time is kept, to
    # tell which candidates cost it (simulated time here: only runs advance it)
    w = SimWorld(seed=4, candidates=[SimCandidate("eng:fast", 1e-3),
                                     SimCandidate("eng:slow", 10e-3),
                                     SimCandidate("eng:crawl", 1.5),
                                     SimCandidate("eng:second", 1.05e-3)],
                 noise_sigma=0.01, outlier_p=0.0)
    r = Harness(SimBackend(w), HarnessConfig(budget_s=0.5, now=w.now, sleep=w.sleep)).run(
        PROBLEM, {"backend": "sim"})
    cost = {s.candidate.key: s.cost_s for s in r.candidates}
    assert all(c > 0 for c in cost.values()), cost
    # nothing counted twice, nothing left out: the run's simulated time is the candidates' sum
    assert sum(cost.values()) == pytest.approx(w.now(), rel=1e-9)
    # the hopeless one costs exactly its first run (1.5 s + overhead): over a second, that
    # run alone drops it
    assert cost["eng:crawl"] == pytest.approx(1.5, rel=0.05)
    # a 10x slower one left to the screen costs more than the finalists per run, and its record
    # round-trips
    assert r.stats_for("eng:slow").status == "screened-out"  # type: ignore[union-attr]
    assert "hopeless" not in (r.stats_for("eng:slow").reason or "")  # type: ignore[union-attr]
    from convdoctor.tune.result import TuneResult

    back = TuneResult.from_dict(r.to_dict())
    assert back.stats_for("eng:slow").cost_s == pytest.approx(cost["eng:slow"], abs=1e-4)  # type: ignore[union-attr]
    from convdoctor.bench.arms import costliest

    top = costliest(r, n=2)
    assert [k for k, _st, _c in top] == sorted(cost, key=lambda k: -cost[k])[:2]
    assert top[0][0] == "eng:crawl"


def test_the_hopeless_floor_can_be_set_for_experiments(monkeypatch: pytest.MonkeyPatch) -> None:
    from convdoctor.tune.harness import tune_problem

    def tuned(slow_s: float = 15e-3, **knobs: float) -> tuple[object, SimCandidate]:
        w = SimWorld(seed=3, candidates=[SimCandidate("eng:fast", 0.5e-3),
                                         SimCandidate("eng:slow", slow_s),
                                         SimCandidate("eng:second", 0.55e-3)],
                     noise_sigma=0.01, outlier_p=0.0)
        cfg = HarnessConfig(now=w.now, sleep=w.sleep, **knobs)  # type: ignore[arg-type]
        r = tune_problem(PROBLEM, backend=SimBackend(w), config=cfg, budget_s=0.5)
        return r, next(c for c in w.candidates if c.key == "eng:slow")

    r, slow = tuned()  # 30x slower but 15 ms a call: under the default 20 ms floor, screened
    assert "hopeless" not in r.stats_for("eng:slow").reason and slow.runs > 2  # type: ignore[attr-defined]
    r, slow = tuned(40e-3)  # 80x and 40 ms a call: over the default floor
    assert "hopeless" in r.stats_for("eng:slow").reason and slow.runs == 2  # type: ignore[attr-defined]
    # the knob is the config's: tune_problem keeps it (it copies the config); no environment
    # variable changes it
    monkeypatch.setenv("CONVDOCTOR_TUNE_HOPELESS_ABS_S", "1.0")
    r, slow = tuned(hopeless_abs_s=0.005)
    assert "hopeless" in r.stats_for("eng:slow").reason and slow.runs == 2  # type: ignore[attr-defined]
    assert r.winner.key == "eng:fast"  # type: ignore[attr-defined]
    r, slow = tuned(40e-3, hopeless_abs_s=0.05)  # 40 ms a call under a 50 ms floor: screened
    assert "hopeless" not in r.stats_for("eng:slow").reason and slow.runs > 2  # type: ignore[attr-defined]


def test_pytorch_paths_bound_a_tie() -> None:
    # On an H100 (Whisper encoder.conv2 fp32), without the bound a plan 1.75% behind the leader
    # won a tie on a smaller workspace while benchmark=True's pick (never chosen, but measured)
    # was 1.6% faster in the same run; the bench's referee measured the plan 2.3% slower than
    # PyTorch. A candidate more than the tie floor behind one of PyTorch's measured paths (other
    # than the leader) is no tie.
    def picks(rule: bool, torch_s: float = 1.002e-3, slower_s: float = 1.012e-3) -> list[str]:
        out = []
        for seed in range(20):
            cands = [SimCandidate("eng:fast-big-ws", 1e-3, workspace=1 << 20),
                     SimCandidate("eng:slower-small-ws", slower_s, workspace=0),
                     SimCandidate("torch:benchmark", torch_s, pinned=False),
                     SimCandidate("eng:slow", 1.5e-3)]
            random.Random(seed).shuffle(cands)
            w = SimWorld(seed=seed, candidates=cands, noise_sigma=0.01, outlier_p=0.0)
            cfg = HarnessConfig(budget_s=3.0, now=w.now, sleep=w.sleep, pytorch_bounds_ties=rule)
            r = Harness(SimBackend(w), cfg).run(PROBLEM, {"backend": "sim"})
            assert r.winner is not None
            out.append(r.winner.key)
        return out

    # without the bound the 1.2%-slower plan wins some of these ties on its workspace ...
    assert "eng:slower-small-ws" in picks(False)
    # ... with it, never (PyTorch's path measures faster than it), and never PyTorch's reference
    assert set(picks(True)) == {"eng:fast-big-ws"}
    # the bound is PyTorch's measured time, not a fixed narrowing: with PyTorch's path 3% behind
    # the leader the same tie goes to the smaller workspace as before
    assert picks(True, torch_s=1.03e-3) == picks(False, torch_s=1.03e-3)
    assert "eng:slower-small-ws" in picks(True, torch_s=1.03e-3)


def test_a_leading_pytorch_path_bounds_nothing() -> None:
    # PyTorch's per-process paths leading a tie of equal candidates: the pinned kernels keep their
    # preference and PyTorch's heuristic path never wins on being measured luckiest
    # (the bound applies only under a pinned leader; without that condition it won 2 of 40 here)
    def make() -> list[SimCandidate]:
        return [SimCandidate("eng:a-big-ws", 1e-3, workspace=1 << 20),
                SimCandidate("eng:b-small-ws", 1e-3, workspace=0),
                SimCandidate("torch:benchmark", 1e-3, pinned=False),
                SimCandidate("torch:heuristic", 1e-3, pinned=False),
                SimCandidate("eng:slow", 1.5e-3)]

    chosen = _shuffled_picks(make, seeds=40, noise=0.02)
    assert "torch:heuristic" not in chosen and "torch:benchmark" not in chosen, chosen
