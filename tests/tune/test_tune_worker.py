"""Worker isolation: a candidate that aborts, segfaults, hangs or raises costs only itself.

A hang costs a test the wait that gives up on it: the waits are set short here (whole seconds,
as the worker's messages print them), and the step file is polled every 50 ms instead of every
second. Each wait that must run out is at least 0.4 s longer or shorter than the one it is told
apart from, so a busy machine does not change which wait ends first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tune_fakes import importable_in_workers

from convdoctor.errors import ConvdoctorError
from convdoctor.problem import ConvProblem
from convdoctor.tune import worker
from convdoctor.tune.harness import HarnessConfig, tune_problem
from convdoctor.tune.worker import WorkerBackend

PROBLEM = ConvProblem.parse("fprop n=1 c=8 h=8 w=8 k=8 r=3 s=3 pad=1")


def _cfg() -> HarnessConfig:
    return HarnessConfig(min_samples=5, min_rounds=3, budget_s=1.0, warmup_max_steps=2)


def _waits(mp: pytest.MonkeyPatch, *, step: float | None = None,
           listing: float | None = None) -> None:
    """Shorter worker waits for a test: a listing step's watchdog, the whole listing's wait."""
    if step is not None:
        mp.setattr(worker, "STEP_TIMEOUT_S", step)
    if listing is not None:
        mp.setattr(worker, "LIST_TIMEOUT_S", listing)


@pytest.fixture(autouse=True)
def _fakes_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    importable_in_workers(monkeypatch)
    monkeypatch.setattr(worker, "WATCH_POLL_S", 0.05)


def test_crash_hang_and_error_cost_only_their_candidate() -> None:
    cfg = _cfg()
    t0 = time.monotonic()
    with WorkerBackend("tune_fakes:make_crash_backend", timeout_s=1.0) as be:
        r = tune_problem(PROBLEM, backend=be, config=cfg, budget_s=1.0)
        restarts = be.restarts
    elapsed = time.monotonic() - t0
    st = {s.candidate.key: s for s in r.candidates}
    assert st["fake:abort"].status == "failed" and "SIGABRT" in st["fake:abort"].reason
    assert st["fake:segv"].status == "failed" and "SIGSEGV" in st["fake:segv"].reason
    assert st["fake:hang"].status == "failed" and "hung" in st["fake:hang"].reason
    assert st["fake:raise"].status == "failed" and "EXECUTION_FAILED" in st["fake:raise"].reason
    assert st["fake:unsupported"].status == "unsupported"
    assert st["fake:ok-fast"].status == "ok" and st["fake:ok-slow"].status in ("ok", "screened-out")
    assert r.winner is not None and r.winner.key == "fake:ok-fast"
    assert restarts >= 3                   # one fresh worker after each death
    assert elapsed < 30


def test_worker_that_cannot_start_is_a_clear_error() -> None:
    with pytest.raises(ConvdoctorError, match="did not start"):
        WorkerBackend("no_such_module_xyz:factory", timeout_s=5.0)


def test_a_hung_listing_falls_back_to_the_short_list(monkeypatch: pytest.MonkeyPatch) -> None:
    # on an H100, 5 depthwise layers' full listings outlasted the worker's wait in two tuning
    # runs: without the short list those layers get no result
    _waits(monkeypatch, listing=2.0)
    cfg = _cfg()
    with WorkerBackend("tune_fakes:make_hanging_list_backend", timeout_s=1.0) as be:
        t0 = time.monotonic()
        r = tune_problem(PROBLEM, backend=be, config=cfg, budget_s=1.0)
        elapsed = time.monotonic() - t0
        assert be.timeout_s == 1.0  # the listing's longer wait was given back
    assert r.winner is not None and r.winner.key == "fake:ok-fast" and r.short_list
    assert "could not list candidates: WorkerHung" in r.notes[0] and "hung" in r.notes[0]
    assert "short list" in r.notes[1]
    assert 2.0 <= elapsed < 12  # the listing waited LIST_TIMEOUT_S, not the 1 s candidate wait


def test_a_short_list_result_is_not_stored(tmp_path: Path, monkeypatch) -> None:
    from convdoctor.db import TuningDB

    _waits(monkeypatch, listing=1.0)
    cfg = _cfg()
    db = TuningDB(tmp_path / "t.sqlite")
    try:
        with WorkerBackend("tune_fakes:make_hanging_list_backend", timeout_s=1.0) as be:
            r = tune_problem(PROBLEM, backend=be, db=db, config=cfg, budget_s=1.0)
            assert r.winner is not None and r.short_list
            assert db.get(PROBLEM, be.environment()) is None
        # with the full list the same call stores its result
        with WorkerBackend("tune_fakes:make_crash_backend", timeout_s=1.0) as be:
            r = tune_problem(PROBLEM, backend=be, db=db, config=cfg, budget_s=1.0)
            assert r.winner is not None and not r.short_list
            assert db.get(PROBLEM, be.environment()) is not None
    finally:
        db.close()


def test_a_backend_without_a_short_list_reports_the_listing_failure() -> None:
    with WorkerBackend("tune_fakes:make_crash_backend", timeout_s=3.0) as be:
        with pytest.raises(RuntimeError, match="no short candidate list"):
            be.lean_candidates(PROBLEM)
        assert [c.key for c in be.candidates(PROBLEM)][:2] == ["fake:ok-slow", "fake:abort"]


def test_the_listing_record_crosses_the_worker_into_the_result() -> None:
    # on an H100, two tuning runs of one layer kept different plans because their knob walks
    # started from different seeds: the listing's record (with its seeds) travels to the result
    cfg = _cfg()
    with WorkerBackend("tune_fakes:make_recording_list_backend", timeout_s=3.0) as be:
        r = tune_problem(PROBLEM, backend=be, config=cfg, budget_s=1.0)
    assert r.winner is not None and r.winner.key == "fake:ok-fast"
    assert r.listing == {"refinement": {"seeds": [["fake:ok-fast", 1.5]], "kept": []}}
    from convdoctor.tune.result import TuneResult

    d = r.to_dict()
    assert d["listing"] == r.listing and TuneResult.from_dict(d).listing == r.listing
    del d["listing"]                       # a record stored before the field existed
    assert TuneResult.from_dict(d).listing == {}


@pytest.mark.parametrize("factory", ["make_raising_record_backend",
                                     "make_unserializable_record_backend"])
def test_a_failing_listing_record_never_costs_the_listing(factory: str) -> None:
    cfg = _cfg()
    with WorkerBackend(f"tune_fakes:{factory}", timeout_s=3.0) as be:
        r = tune_problem(PROBLEM, backend=be, config=cfg, budget_s=1.0)
    assert r.winner is not None and r.winner.key == "fake:ok-fast"
    assert set(r.listing) == {"record_error"}
    assert "listing record unavailable" in r.listing["record_error"]


def test_a_failed_listing_leaves_no_earlier_record() -> None:
    from convdoctor.tune.worker import WorkerDied

    with WorkerBackend("tune_fakes:make_recording_list_backend", timeout_s=3.0) as be:
        be.candidates(PROBLEM)
        assert be.listing_info()["refinement"]["seeds"]

        def die(msg: object, watch: object = None, grace: object = None) -> None:
            raise WorkerDied("no answer within 60 s (hung)")

        be.call = die  # type: ignore[method-assign]
        with pytest.raises(WorkerDied):
            be.candidates(PROBLEM)
        assert be.listing_info() == {}
        with pytest.raises(WorkerDied):
            be.lean_candidates(PROBLEM)
        assert be.listing_info() == {}


def test_an_in_process_backends_bad_record_never_costs_the_stored_result(tmp_path: Path) -> None:
    from tune_fakes import RecordingListBackend

    from convdoctor.db import TuningDB

    cfg = _cfg()
    db = TuningDB(tmp_path / "t.sqlite")
    try:
        r = tune_problem(PROBLEM, backend=RecordingListBackend("unserializable"), db=db,
                         config=cfg, budget_s=1.0)
        assert r.winner is not None and set(r.listing) == {"record_error"}
        assert db.get(PROBLEM, RecordingListBackend().environment()) is not None
    finally:
        db.close()


def test_the_short_list_brings_its_own_record(monkeypatch) -> None:
    _waits(monkeypatch, listing=1.0)
    cfg = _cfg()
    with WorkerBackend("tune_fakes:make_hanging_list_backend", timeout_s=1.0) as be:
        r = tune_problem(PROBLEM, backend=be, config=cfg, budget_s=1.0)
    assert r.short_list and r.listing == {"lean": True}


# ---------------------------------------------------------------------- hung listing steps
def test_a_quick_time_that_never_returns_is_left_out_and_the_listing_runs_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # on an H100, a quick time that never returned made the full listings of 7 of 8 3D fp16
    # wgrad problems outlast the 60 s wait: the step that hung is named, left out, listed again
    _waits(monkeypatch, step=1.0, listing=60.0)
    with WorkerBackend("tune_fakes:make_hanging_step_backend", timeout_s=3.0) as be:
        t0 = time.monotonic()
        r = tune_problem(PROBLEM, backend=be, config=_cfg(), budget_s=1.0)
        elapsed = time.monotonic() - t0
        assert be.restarts == 1
    assert r.winner is not None and r.winner.key == "fake:ok-fast"  # eng2 still listed
    assert not r.short_list
    assert r.listing["excluded"] == ["eng69"]
    assert len(r.notes) == 1 and r.notes[0].startswith("eng69 left out: the quick time of "
                                                       "eng69_k1=0 never returned")
    assert "did not return within 1 s" in r.notes[0] and PROBLEM.key() in r.notes[0]
    assert elapsed < 20  # the step's watchdog, not the listing's 60 s wait


def test_a_hung_unit_stays_out_of_later_listings_of_the_same_kind_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _waits(monkeypatch, step=1.0)
    other_size = ConvProblem.parse("fprop n=2 c=8 h=16 w=16 k=8 r=3 s=3 pad=1")
    other_kind = ConvProblem.parse("dgrad n=1 c=8 h=8 w=8 k=8 r=3 s=3 pad=1")
    with WorkerBackend("tune_fakes:make_hanging_step_backend", timeout_s=3.0) as be:
        be.candidates(PROBLEM)
        assert be.restarts == 1
        t0 = time.monotonic()
        keys = [c.key for c in be.candidates(other_size)]
        assert time.monotonic() - t0 < 5 and be.restarts == 1  # no second hang
        assert "fake:ok-fast" in keys and be.listing_info()["excluded"] == ["eng69"]
        assert PROBLEM.key() in be.listing_info()["left_out_notes"][0]
        be.candidates(other_kind)
        assert be.listing_info()["excluded"] == [] and "left_out_notes" not in be.listing_info()


def test_a_hung_unit_is_remembered_by_the_database_for_later_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # on an H100, eng69's hang costs every fresh tuning process 30-40 s unless remembered
    from convdoctor.db import TuningDB
    from convdoctor.tune.harness import environment_of

    _waits(monkeypatch, step=1.0)
    other_size = ConvProblem.parse("fprop n=2 c=8 h=16 w=16 k=8 r=3 s=3 pad=1")
    with TuningDB(tmp_path / "t.sqlite3") as db:
        with WorkerBackend("tune_fakes:make_hanging_step_backend", timeout_s=3.0) as be:
            r1 = tune_problem(PROBLEM, backend=be, db=db, config=_cfg(), budget_s=1.0)
            assert be.restarts == 1
            env = environment_of(be)
        assert r1.listing["excluded"] == ["eng69"]
        assert db.left_out(env) == {"fprop float32 tf32 nchw 2d": {
            "eng69": r1.notes[0][len("eng69 left out: "):]}}
        with WorkerBackend("tune_fakes:make_hanging_step_backend", timeout_s=3.0) as be:
            t0 = time.monotonic()
            r2 = tune_problem(other_size, backend=be, db=db, config=_cfg(), budget_s=1.0)
            assert time.monotonic() - t0 < 5 and be.restarts == 0    # no hang this time
        assert r2.listing["excluded"] == ["eng69"] and r2.winner is not None
        assert r2.notes[0].endswith("(remembered by the tuning database)")
        assert db.remember_left_out(env, {}) == 0
        # without a database nothing is recalled: the next process pays the hang again
        with WorkerBackend("tune_fakes:make_hanging_step_backend", timeout_s=3.0) as be:
            tune_problem(other_size, backend=be, db=None, config=_cfg(), budget_s=1.0)
            assert be.restarts == 1


def test_two_hung_units_are_both_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    _waits(monkeypatch, step=1.0)
    with WorkerBackend("tune_fakes:make_two_hanging_steps_backend", timeout_s=3.0) as be:
        keys = [c.key for c in be.candidates(PROBLEM)]
        assert be.restarts == 2 and be.listing_info()["excluded"] == ["eng69", "eng70"]
        assert "fake:ok-fast" in keys


def test_a_hung_build_waits_the_whole_listing_wait_then_is_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a build may take long (runtime-compiled engines): only the listing's wait applies to it
    _waits(monkeypatch, step=0.5, listing=2.0)
    with WorkerBackend("tune_fakes:make_hanging_build_backend", timeout_s=1.0) as be:
        t0 = time.monotonic()
        be.candidates(PROBLEM)
        elapsed = time.monotonic() - t0
        info = be.listing_info()
    assert 2.0 <= elapsed < 15
    assert info["excluded"] == ["eng69"]
    assert "the build of eng69_k1=0 never returned" in info["left_out_notes"][0]
    assert "no answer within 2 s" in info["left_out_notes"][0]


def test_a_unit_that_hangs_though_left_out_ends_in_the_short_list(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _waits(monkeypatch, step=1.0)
    with WorkerBackend("tune_fakes:make_stubborn_hanging_step_backend", timeout_s=3.0) as be:
        r = tune_problem(PROBLEM, backend=be, config=_cfg(), budget_s=1.0)
        assert be.restarts == 2  # one retry without eng69, no third listing
    assert r.short_list and r.winner is not None
    assert r.listing == {"excluded": ["eng69"], "lean": True,
                         "left_out_notes": [r.notes[2]]}  # the short list left it out too
    assert "could not list candidates: WorkerHung" in r.notes[0]
    assert "during the quick time of eng69_k1=0" in r.notes[0]
    assert any(n.startswith("eng69 left out") for n in r.notes)


def test_a_listing_gives_up_after_max_exclusions(monkeypatch: pytest.MonkeyPatch) -> None:
    _waits(monkeypatch, step=1.0)
    monkeypatch.setattr(worker, "MAX_LIST_EXCLUSIONS", 1)
    with WorkerBackend("tune_fakes:make_two_hanging_steps_backend", timeout_s=3.0) as be:
        with pytest.raises(worker.WorkerDied, match="during the quick time of eng70_k1=0"):
            be.candidates(PROBLEM)
        assert be.hung[worker.problem_kind(PROBLEM)].keys() == {"eng69"}


def test_the_step_watch_reads_only_complete_lines(tmp_path: Path) -> None:
    from convdoctor.tune.steps import ListingStep, StepWatch

    p = tmp_path / "steps"
    p.write_text("build\teng1\teng1_k2=0\ntime\teng3\teng3_k1=")  # the last line half-written
    w = StepWatch(str(p), 30.0)
    assert w.last() == ListingStep("build", "eng1", "eng1_k2=0")
    assert w.poll() is None  # a build is not under the quick-time watchdog
    p.write_text("time\teng3\teng3_k1=4\n")
    assert w.last() == ListingStep("time", "eng3", "eng3_k1=4")
    w.since -= 31.0
    assert "the quick time of eng3_k1=4 did not return within 30 s" in (w.poll() or "")


def test_a_listing_slow_as_a_whole_blames_no_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # its last step began moments before the wait ran out: no engine is left out for it
    _waits(monkeypatch, step=1.0, listing=1.0)
    with WorkerBackend("tune_fakes:make_slow_steps_backend", timeout_s=1.0) as be:
        with pytest.raises(worker.WorkerDied, match="no answer within 1 s.*during the quick time"):
            be.candidates(PROBLEM)
        assert be.restarts == 0 and not be.hung[worker.problem_kind(PROBLEM)]


def test_a_step_that_kills_the_worker_is_left_out_at_once() -> None:
    with WorkerBackend("tune_fakes:make_crashing_build_backend", timeout_s=3.0) as be:
        t0 = time.monotonic()
        keys = [c.key for c in be.candidates(PROBLEM)]
        assert time.monotonic() - t0 < 15 and be.restarts == 1
        info = be.listing_info()
    assert "fake:ok-fast" in keys and info["excluded"] == ["eng69"]
    assert "the build of eng69_k1=0 killed the worker" in info["left_out_notes"][0]
    assert "SIGSEGV" in info["left_out_notes"][0]


def test_a_quick_time_that_starts_hanging_late_in_the_listing_is_still_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # healthy builds take the first 0.6 s; the quick time that hangs begins after them, so the
    # listing's 1 s wait runs out before the step's 1 s: the wait is extended to name it
    _waits(monkeypatch, step=1.0, listing=1.0)
    with WorkerBackend("tune_fakes:make_late_hanging_step_backend", timeout_s=1.0) as be:
        keys = [c.key for c in be.candidates(PROBLEM)]
        info = be.listing_info()
    assert "fake:ok-fast" in keys and info["excluded"] == ["eng69"]
    assert "did not return within 1 s" in info["left_out_notes"][0]


def test_a_database_that_cannot_recall_or_remember_left_out_units_costs_nothing() -> None:
    import sqlite3

    from tune_fakes import SimBackend, SimCandidate, SimWorld

    from convdoctor.errors import UsageError

    class LockedDB:
        stored: list = []

        def get(self, problem: object, env: object) -> None:
            return None

        def left_out(self, env: object) -> dict:
            raise UsageError("database is locked")

        def remember_left_out(self, env: object, units: object) -> int:
            raise sqlite3.OperationalError("database is locked")

        def put(self, result: object) -> None:
            self.stored.append(result)

    be = SimBackend(SimWorld(seed=1, candidates=[SimCandidate("eng:a", 1e-3)]))
    be.hung = {"fprop float32 tf32 nchw 2d": {"eng69": "hung"}}  # type: ignore[attr-defined]
    db = LockedDB()
    r = tune_problem(PROBLEM, backend=be, db=db, config=_cfg(), budget_s=0.5)
    assert r.winner is not None and r.winner.key == "eng:a" and db.stored == [r]
    assert any("could not remember the engines left out" in n for n in r.notes)
