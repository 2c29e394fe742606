"""From recorded calls to routes on the CPU: calls deduplicated into problems, database lookups and
tuning with their notes and time limit, executors built once per problem and per kind of layer (a
transposed layer whose problem equals a plain layer's gets no engine that cannot run it)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

from convdoctor.problem import ConvProblem
from convdoctor.runtime import optimizer as O
from convdoctor.runtime import site as S
from convdoctor.runtime import tuning as T
from convdoctor.runtime.options import OptimizeOptions
from convdoctor.runtime.record import distinct_calls, problems_for, record_calls
from convdoctor.runtime.report import OptimizeReport
from convdoctor.runtime.routes import ExecutorCache
from convdoctor.tune.backend import Candidate
from convdoctor.tune.result import CandidateStats, TuneResult


def _result(p: ConvProblem, *keys_us: tuple[str, float], backend: str = "cpu") -> TuneResult:
    stats = [CandidateStats(candidate=Candidate(k, backend), samples=[us * 1e-6] * 5)
             for k, us in keys_us]
    return TuneResult(problem=p, env={}, backend=backend, winner=stats[0].candidate,
                      candidates=stats)


# ---------------------------------------------------------------------- record
def test_calls_are_deduplicated_per_signature_and_problems_overall() -> None:
    m = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1))
    sites = {n: S.install(mod, n, "cpu") for n, mod in m.named_modules() if S.routable(mod)}
    x = torch.randn(2, 4, 8, 8)
    recs = record_calls(m, x, True, sites)
    recs["0"] = recs["0"] * 2  # the same signature twice
    notes: list[str] = []
    calls = distinct_calls(recs, True, notes)
    assert [len(v) for v in calls.per_site.values()] == [1, 1]
    # both layers pose the same wgrad and fprop; the first has no dgrad (its input needs none)
    assert sorted(p.direction for p in calls.problems.values()) == ["dgrad", "fprop", "wgrad"]
    # fprop and wgrad run in three calls (layer 0 twice, layer 1 once), dgrad in layer 1's
    assert sorted((p.direction, calls.uses[k]) for k, p in calls.problems.items()) == [
        ("dgrad", 1), ("fprop", 3), ("wgrad", 3)]
    assert not notes
    for mod in m.modules():
        S.uninstall(mod)


def test_a_call_that_cannot_be_modelled_is_a_note() -> None:
    m = nn.Conv2d(4, 4, 3, padding=1)
    site = S.install(m, "c", "cpu")
    rec = record_calls(m, torch.randn(1, 4, 8, 8), False, {"c": site})["c"][0]
    bad = dict(rec, key="other", x_shape=(1, 4, 8, 8, 8, 8))  # no 4D conv problem
    notes: list[str] = []
    calls = distinct_calls({"c": [rec, bad]}, False, notes)
    assert calls.per_site["c"]["other"][1] == {} and len(calls.problems) == 1
    assert len(notes) == 1 and notes[0].startswith("c: not tunable")
    S.uninstall(m)


# ---------------------------------------------------------------------- tuning
class FakeTuning:
    """Stands in for `tuning.Tuning`: a database of `stored`, tuning that returns `tuned`."""

    stored: dict[str, Any] = {}
    tuned: dict[str, Any] = {}
    tuned_keys: list[str] = []

    def __init__(self, *a: Any) -> None:
        self.available, self.why = True, ""

    @classmethod
    def of(cls, opts: OptimizeOptions) -> FakeTuning:
        return cls()

    def lookup(self, p: ConvProblem) -> Any:
        return self.stored.get(p.key())

    def tune(self, p: ConvProblem, progress: Any = None) -> Any:
        self.tuned_keys.append(p.key())
        r = self.tuned[p.key()]
        if isinstance(r, Exception):
            raise r
        return r

    def close(self) -> None:
        pass


class QuietProgress:
    def update(self, n: int = 1, note: str = "") -> None:
        pass

    def close(self) -> None:
        pass


def _problems(*texts: str) -> dict[str, ConvProblem]:
    ps = [ConvProblem.parse(t) for t in texts]
    return {p.key(): p for p in ps}


def test_find_results_counts_sources_and_notes_failures(monkeypatch) -> None:
    probs = _problems("fprop n=1 c=8 h=8 w=8 k=8 r=3 s=3 pad=1",
                      "fprop n=1 c=8 h=16 w=16 k=8 r=3 s=3 pad=1",
                      "fprop n=1 c=8 h=32 w=32 k=8 r=3 s=3 pad=1",
                      "fprop n=1 c=8 h=64 w=64 k=8 r=3 s=3 pad=1")
    a, b, c, d = probs.values()
    lost = TuneResult(problem=c, env={}, backend="cpu", winner=None, candidates=[],
                      notes=["timings not trusted"])
    monkeypatch.setattr(FakeTuning, "stored", {a.key(): _result(a, ("cpu:mkldnn-off", 9.0))})
    monkeypatch.setattr(FakeTuning, "tuned", {b.key(): _result(b, ("cpu:mkldnn-on", 5.0)),
                                              c.key(): lost, d.key(): RuntimeError("worker died")})
    monkeypatch.setattr(FakeTuning, "tuned_keys", [])
    monkeypatch.setattr(T, "Tuning", FakeTuning)
    report = OptimizeReport(device="cpu", train=False)
    res = T.find_results(probs, OptimizeOptions(progress=QuietProgress()), report)
    assert {k: src for k, (_, src) in res.items()} == {a.key(): "db", b.key(): "tuned"}
    assert (report.from_db, report.tuned, report.untuned) == (1, 1, 2)
    assert any("not tuned (timings not trusted)" in n for n in report.notes), report.notes
    assert any("failed: RuntimeError: worker died" in n for n in report.notes), report.notes

    report = OptimizeReport(device="cpu", train=False)
    FakeTuning.tuned_keys.clear()
    res = T.find_results(probs, OptimizeOptions(tune_missing=False), report)
    assert list(res) == [a.key()] and not FakeTuning.tuned_keys and report.untuned == 3

    report = OptimizeReport(device="cpu", train=False)
    res = T.find_results(probs, OptimizeOptions(progress=QuietProgress(), tune_time_limit_s=0.0,
                                                budget_s=1.0), report)
    assert not FakeTuning.tuned_keys and list(res) == [a.key()]
    assert any("time limit (0 s) reached: 3 problems not tuned" in n for n in report.notes)


def test_without_a_backend_every_convolution_runs_pytorch(monkeypatch) -> None:
    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("no device")

    monkeypatch.setattr("convdoctor.tune.backend.get_backend", broken)
    report = OptimizeReport(device="cpu", train=False)
    probs = _problems("fprop n=1 c=8 h=8 w=8 k=8 r=3 s=3 pad=1")
    assert T.find_results(probs, OptimizeOptions(db=False), report) == {}
    assert report.untuned == 1
    assert report.notes == ["tuning backend unavailable (RuntimeError: no device); every "
                            "convolution runs PyTorch's path"]


def test_open_db() -> None:
    class Mem:
        def get(self, *a: Any) -> None:
            return None

    mem = Mem()
    assert T.open_db(False) is None and T.open_db(mem) is mem


# ---------------------------------------------------------------------- routes
def test_executors_are_built_once_per_problem_and_kind_of_layer() -> None:
    p = ConvProblem.parse("dgrad n=2 c=4 h=8 w=8 k=8 r=3 s=3 pad=1")
    res = _result(p, ("torch:gemm", 50.0), ("torch:heuristic", 80.0), backend="cuda")
    notes: list[str] = []
    cache = ExecutorCache("cpu", True, True, notes)
    plain = cache.eager(p, res, False)
    assert [ex.key for ex in plain] == ["torch:gemm", "torch:heuristic"]
    assert cache.eager(p, res, False) is plain
    assert [ex.key for ex in cache.eager(p, res, True)] == ["torch:heuristic"]
    # the ranking without host cost is the same here: no second set of executors
    assert cache.graphed(p, res, False) == []
    assert not notes


class AutoEncoder(nn.Module):
    """A plain 1x1 layer 4 -> 8 and a transposed 1x1 layer 8 -> 4 at the same resolution: the
    plain layer's dgrad and the transposed layer's fprop are the same problem."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Conv2d(4, 8, 1)
        self.dec = nn.ConvTranspose2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(torch.relu(self.enc(x)))


def test_a_transposed_layer_sharing_a_problem_gets_no_engine_it_cannot_run(tmp_path: Path
                                                                           ) -> None:
    from convdoctor.db.store import TuningDB
    from convdoctor.tune.backend import get_backend
    from convdoctor.tune.harness import environment_of

    torch.manual_seed(0)
    m = AutoEncoder()
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    sites = {n: S.install(mod, n, "cpu") for n, mod in m.named_modules() if S.routable(mod)}
    recs = record_calls(m, x, True, sites)
    for mod in m.modules():
        S.uninstall(mod)
    enc, dec = (problems_for(recs[n][0], True) for n in ("enc", "dec"))
    assert enc["dgrad"].key() == dec["fprop"].key()
    env = environment_of(get_backend("cpu"))
    with TuningDB(tmp_path / "db.sqlite3") as db:
        for p in O.model_problems(m, x, train=True):
            r = _result(p, ("torch:gemm", 50.0), ("torch:heuristic", 80.0))
            db.put(TuneResult(problem=p, env=env, backend="cpu", winner=r.winner,
                              candidates=r.candidates))
    O.optimize(m, x, db=tmp_path / "db.sqlite3", tune_missing=False, channels_last=False,
               verify=False, backend="cpu")
    rep = O.report_of(m)
    assert rep is not None
    by_layer = {lay.layer: lay for lay in rep.layers}
    assert {d.direction: d.key for d in by_layer["enc"].directions} == {
        "fprop": "torch:gemm", "dgrad": "torch:gemm", "wgrad": "torch:gemm"}
    assert all("torch:gemm" not in d.chain for d in by_layer["dec"].directions)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no route fails and falls back
        m(x).sum().backward()
    O.restore(m)


def test_quick_tuning_on_a_gpu_leaves_tiny_problems_on_pytorchs_path(monkeypatch) -> None:
    """A squeeze-excitation 1x1 convolution on a 1x1 map is launch-bound: quick tuning on a GPU
    does not tune it (nor counts it untuned); thorough tuning, and any CPU run, does."""
    probs = _problems("fprop n=64 c=1152 h=1 w=1 k=48 r=1 s=1",
                      "fprop n=64 c=240 h=28 w=28 k=240 r=3 s=3 stride=2 pad=1 groups=240")
    se, dw = probs.values()
    assert T.tiny(se) and not T.tiny(dw)
    monkeypatch.setattr(FakeTuning, "stored", {})
    monkeypatch.setattr(FakeTuning, "tuned", {se.key(): _result(se, ("cpu:mkldnn-on", 5.0)),
                                              dw.key(): _result(dw, ("cpu:mkldnn-on", 5.0))})
    monkeypatch.setattr(FakeTuning, "tuned_keys", [])
    monkeypatch.setattr(T, "Tuning", FakeTuning)
    report = OptimizeReport(device="cuda:0", train=True)   # as optimize names a model's device
    res = T.find_results(probs, OptimizeOptions(progress=QuietProgress()), report)
    assert list(res) == [dw.key()] and FakeTuning.tuned_keys == [dw.key()]
    assert (report.tuned, report.untuned, report.left_tiny) == (1, 0, 1)
    assert any("1 tiny problem(s)" in n for n in report.notes), report.notes
    for device, mode in (("cuda", "thorough"), ("cpu", "quick")):
        FakeTuning.tuned_keys.clear()
        report = OptimizeReport(device=device, train=True)
        res = T.find_results(probs, OptimizeOptions(progress=QuietProgress(), tuning=mode), report)
        assert set(res) == {se.key(), dw.key()} and report.left_tiny == 0, (device, mode)


def test_missing_problems_are_tuned_largest_first_until_the_quick_limit(monkeypatch) -> None:
    small = "fprop n=1 c=8 h=8 w=8 k=8 r=3 s=3 pad=1"
    big = "fprop n=8 c=64 h=56 w=56 k=64 r=3 s=3 pad=1"
    mid = "wgrad n=4 c=32 h=28 w=28 k=32 r=3 s=3 pad=1"
    probs = _problems(small, big, mid)
    s, b, m = probs.values()
    monkeypatch.setattr(FakeTuning, "stored", {})
    monkeypatch.setattr(FakeTuning, "tuned", {p.key(): _result(p, ("cpu:mkldnn-on", 1.0))
                                              for p in probs.values()})
    monkeypatch.setattr(FakeTuning, "tuned_keys", [])
    monkeypatch.setattr(T, "Tuning", FakeTuning)
    T.find_results(probs, OptimizeOptions(progress=QuietProgress()), OptimizeReport(device="cpu", train=False))
    assert FakeTuning.tuned_keys == [b.key(), m.key(), s.key()]

    # a problem run by many calls outranks a larger one run once
    FakeTuning.tuned_keys.clear()
    T.find_results(probs, OptimizeOptions(progress=QuietProgress()), OptimizeReport(device="cpu", train=False),
                   uses={s.key(): 10_000})
    assert FakeTuning.tuned_keys[0] == s.key()

    # each problem takes 30 fake seconds: quick mode's 40 s default stops after the second
    now = [0.0]

    class SlowTuning(FakeTuning):
        def tune(self, problem, progress=None):  # type: ignore[no-untyped-def]
            now[0] += 30.0
            return super().tune(problem, progress)

    monkeypatch.setattr(T, "Tuning", SlowTuning)
    FakeTuning.tuned_keys.clear()
    report = OptimizeReport(device="cpu", train=False)
    res = T.find_results(probs, OptimizeOptions(progress=QuietProgress()), report,
                         clock=lambda: now[0])
    assert FakeTuning.tuned_keys == [b.key(), m.key()] and set(res) == {b.key(), m.key()}
    assert report.untuned == 1
    assert any("time limit (40 s) reached: 1 problems not tuned" in n and "next call" in n
               for n in report.notes), report.notes
    # 20 s already spent on the layout decision: 20 s of tuning, one problem
    FakeTuning.tuned_keys.clear()
    report = OptimizeReport(device="cpu", train=False)
    report.phase_s.update(setup=1.0, layout=19.0)
    T.find_results(probs, OptimizeOptions(progress=QuietProgress()), report, clock=lambda: now[0])
    assert FakeTuning.tuned_keys == [b.key()] and report.untuned == 2
    for opts in (OptimizeOptions(progress=QuietProgress(), tuning="thorough"),
                 OptimizeOptions(progress=QuietProgress(), tune_time_limit_s=float("inf"))):
        FakeTuning.tuned_keys.clear()
        T.find_results(probs, opts, OptimizeReport(device="cpu", train=False),
                       clock=lambda: now[0])
        assert len(FakeTuning.tuned_keys) == 3, opts


def test_importance_weighs_depthwise_gradients_above_dense_work_of_the_same_size() -> None:
    w = T._class_weights()
    assert set(w) == {f"{k}-{d}" for k in ("dense", "dw") for d in ("fprop", "dgrad", "wgrad")}
    assert w["dense-fprop"] == 1.0 and w["dw-dgrad"] > w["dw-fprop"] > w["dense-fprop"]
    dw = ConvProblem.parse("dgrad n=64 c=96 k=96 h=56 w=56 r=7 s=7 pad=3 groups=96")
    dense = ConvProblem.parse("dgrad n=64 c=96 k=96 h=56 w=56 r=1 s=1")
    assert T.importance_class(dw) == "dw-dgrad" and T.importance_class(dense) == "dense-dgrad"
    # the same memory traffic; tuning the depthwise one is expected to save far more
    assert dw.min_bytes() == pytest.approx(dense.min_bytes(), rel=0.01)
    assert T.importance(dw) > 5 * T.importance(dense)
    assert T.importance(dense, uses=3) == pytest.approx(3 * T.importance(dense))


def test_quick_tuning_on_a_gpu_leaves_the_least_promising_problems(monkeypatch) -> None:
    """Past MINOR_SHARE of a large model's estimated saving, quick tuning on a GPU tunes nothing
    (nor counts it untuned, so the decisions are stored); thorough tuning and the CPU tune all."""
    big = [f"wgrad n=64 c={c} h=56 w=56 k={c} r=7 s=7 pad=3 groups={c}" for c in range(96, 96 + 20)]
    small = "fprop n=64 c=64 h=7 w=7 k=64 r=1 s=1"
    probs = _problems(*big, small)
    sm = ConvProblem.parse(small).key()
    assert len(probs) > T.MINOR_MIN_PROBLEMS
    assert T.minor_keys(probs) == {sm}
    assert T.minor_keys(dict(list(probs.items())[:T.MINOR_MIN_PROBLEMS])) == set()
    monkeypatch.setattr(FakeTuning, "stored", {})
    monkeypatch.setattr(FakeTuning, "tuned", {k: _result(p, ("cpu:mkldnn-on", 5.0))
                                              for k, p in probs.items()})
    monkeypatch.setattr(FakeTuning, "tuned_keys", [])
    monkeypatch.setattr(T, "Tuning", FakeTuning)
    report = OptimizeReport(device="cuda:0", train=True)
    res = T.find_results(probs, OptimizeOptions(progress=QuietProgress(), tune_time_limit_s=float(
        "inf")), report)
    assert sm not in res and len(res) == len(big)
    assert (report.untuned, report.left_minor) == (0, 1)
    assert any("past 98% of the model's estimated tuning saving" in n for n in report.notes)
    for device, mode in (("cuda", "thorough"), ("cpu", "quick")):
        report = OptimizeReport(device=device, train=True)
        res = T.find_results(probs, OptimizeOptions(progress=QuietProgress(), tuning=mode,
                                                    tune_time_limit_s=float("inf")), report)
        assert sm in res and report.left_minor == 0, (device, mode)


class _Engine:
    """An engine whose executor build is counted and can fail."""

    def __init__(self, fail: bool = False) -> None:
        self.builds, self.fail = 0, fail

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        self.builds += 1
        if self.fail:
            raise RuntimeError("no plan for this layout")
        from convdoctor.engines.flag_exec import default_exec
        return default_exec()


def test_fallback_executors_are_built_on_their_first_call_only() -> None:
    from convdoctor.runtime.routes import LazyExec, RouteNotBuilt

    p = ConvProblem.parse("fprop n=2 c=4 h=8 w=8 k=8 r=1 s=1")
    res = _result(p, ("torch:heuristic", 40.0), ("torch:gemm", 50.0), backend="cuda")
    builds: dict[str, list[float]] = {}
    chain = ExecutorCache("cpu", True, True, [], builds).eager(p, res, False)
    # the first is built; a non-PyTorch fallback behind it waits for its first call
    assert [type(ex).__name__ for ex in chain] == ["FlagExec", "LazyExec"]
    assert sum(n for n, _ in builds.values()) == 1  # the build step counts what it built
    assert chain[1].key == "torch:gemm" and "first use" in chain[1].describe()
    x, w = torch.randn(2, 4, 8, 8), torch.randn(8, 4, 1, 1)
    args = S.ConvArgs(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                      transposed=False, output_padding=(0, 0))
    torch.testing.assert_close(chain[1].fprop(x, w, None, args),
                               torch.nn.functional.conv2d(x, w))
    assert chain[1].built is not None and not chain[1].is_noop()

    eng = _Engine()
    lazy = LazyExec("cudnn:x", p, eng)
    assert eng.builds == 0
    lazy.fprop(x, w, None, args)
    lazy.fprop(x, w, None, args)
    assert eng.builds == 1
    bad_eng = _Engine(fail=True)
    bad = LazyExec("cudnn:y", p, bad_eng)
    for _ in range(2):  # a failed build is not retried on every call
        with pytest.raises(RouteNotBuilt, match="no plan for this layout"):
            bad.fprop(x, w, None, args)
    assert bad_eng.builds == 1
    from convdoctor.runtime import fallback as fb
    assert fb.classify(RouteNotBuilt("x")) == "recoverable"


def test_a_fallback_that_cannot_be_built_moves_the_chain_on_with_one_warning() -> None:
    from convdoctor.engines.flag_exec import default_exec
    from convdoctor.runtime import fallback as fb
    from convdoctor.runtime.routes import LazyExec

    class Failing:
        key = "cudnn:first"

        def fprop(self, *a: Any) -> Any:
            raise RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED")

    fb.reset_warnings()
    p = ConvProblem.parse("fprop n=2 c=4 h=8 w=8 k=8 r=1 s=1")
    conv = nn.Conv2d(4, 8, 1, bias=False)
    site = S.install(conv, "c", "cpu")
    try:
        lazy = LazyExec("cudnn:second", p, _Engine(fail=True))
        route = S.Route({d: [Failing(), lazy, default_exec()] for d in S.DIRS})
        x = torch.randn(2, 4, 8, 8)
        with pytest.warns(UserWarning) as caught:
            y = site._run(route, 0, lambda ex: ex.fprop(x, conv.weight, None, site.args))
        torch.testing.assert_close(y, conv._conv_forward(x, conv.weight, None))
        assert route.current(0).key == "torch:default" and len(caught) == 1
    finally:
        S.uninstall(conv)
        fb.reset_warnings()


def test_a_lazy_build_out_of_memory_is_tried_again_and_none_runs_inside_a_capture(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from convdoctor.runtime import routes as R

    class OomOnce(_Engine):
        def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
            if self.builds == 0:
                self.builds += 1
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return super().executor(key, problem, reference_s)

    p = ConvProblem.parse("fprop n=2 c=4 h=8 w=8 k=8 r=1 s=1")
    eng = OomOnce()
    lazy = R.LazyExec("cudnn:x", p, eng)
    monkeypatch.setattr(R, "_capturing", lambda: True)
    with pytest.raises(R.RouteNotBuilt, match="capture"):
        lazy.get()
    assert eng.builds == 0                       # nothing allocated inside a capture
    monkeypatch.setattr(R, "_capturing", lambda: False)
    with pytest.raises(R.RouteNotBuilt, match="out of memory"):
        lazy.get()
    assert lazy.get() is not None and eng.builds == 2   # memory may be free on a later call


def test_the_build_count_holds_only_what_was_built(monkeypatch: pytest.MonkeyPatch) -> None:
    from convdoctor.runtime import routes as R

    class Named(_Engine):
        device, name = "any", "fake"

    engines = {"fake:bad": Named(fail=True), "fake:good": Named()}
    monkeypatch.setattr(R, "engine_of", engines.get)
    monkeypatch.setattr(R, "flag_exec", lambda key: None)
    p = ConvProblem.parse("fprop n=2 c=4 h=8 w=8 k=8 r=1 s=1")
    builds: dict[str, list[float]] = {}
    notes: list[str] = []
    out = R.executors(["fake:bad", "fake:good", "fake:bad"], p, "cpu", notes, builds=builds)
    # the failed build is a note, the next one built, and the one behind it waits (lazy)
    assert [type(ex).__name__ for ex in out] == ["FlagExec", "LazyExec"]
    assert any("fake:bad" in n and "not used" in n for n in notes)
    assert builds == {"fake": [1, builds["fake"][1]]}
