"""optimize's measured decisions are stored with the tuning results and applied again without
timing when the same model, inputs, options and environment come back with every problem in the
database; anything else measures anew. Synthetic step costs (`rt_clock`), a real SQLite database
and the CPU tuner."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
from rt_clock import Costed, FakeClock, use_clock

from convdoctor.runtime import optimizer as O
from convdoctor.runtime import site as S
from convdoctor.runtime.decisions import REUSED, Decision, model_key
from convdoctor.runtime.options import OptimizeOptions
from convdoctor.runtime.report import OptimizeReport


def _run(clock: FakeClock, db: str, costs: dict[str, float], *, shape: tuple[int, ...] = (1, 3, 8, 8),
         ch: int = 4, **kw: Any) -> tuple[Costed, OptimizeReport]:
    m = Costed(clock, costs, ch)
    O.optimize(m, torch.randn(*shape), train=False, db=db, channels_last=False, steps=9,
               progress=False, isolate=False, backend="cpu", budget_s=0.05, **kw)
    rep = O.report_of(m)
    assert rep is not None
    return m, rep


WIN = {"given": 1.0, "unrouted": 1.0, "routed": 0.8}
LOSS = {"given": 1.0, "unrouted": 1.15, "routed": 1.035}


def test_a_second_optimize_applies_the_measured_decisions_without_timing(
        monkeypatch: Any, tmp_path: Path) -> None:
    clock = use_clock(monkeypatch, FakeClock())
    db = str(tmp_path / "t.sqlite3")
    _, first = _run(clock, db, WIN)
    assert first.decisions == "measured" and first.routing and "verify" in first.phase_s
    assert first.speedup is not None and first.speedup > 1.1
    m, again = _run(clock, db, WIN)
    assert again.decisions == "reused"
    assert again.from_db == again.problems and again.tuned == 0
    assert "verify" not in again.phase_s and "graphs" not in again.phase_s
    assert again.routing and S.site_of(m.conv) is not None and S.site_of(m.conv).enabled
    assert again.speedup == first.speedup and again.speedup_ci == first.speedup_ci
    assert again.routing_reason.endswith(REUSED) and "reused" in again.speedup_source
    assert again.channels_last_reason.endswith(REUSED)
    assert "routes" in again.phase_s and again.layers
    assert again.margins == first.margins and again.extensions == first.extensions
    assert again.verify_ms == first.verify_ms
    from convdoctor.runtime.feedback import summary_line

    assert "measured before for this model and environment (reused)" in summary_line(again)
    assert "(reused)" not in summary_line(first)


def test_remeasure_times_again_and_stores_the_new_decision(monkeypatch: Any,
                                                           tmp_path: Path) -> None:
    clock = use_clock(monkeypatch, FakeClock())
    db = str(tmp_path / "t.sqlite3")
    _run(clock, db, WIN)
    _, rep = _run(clock, db, LOSS, remeasure=True)
    assert rep.decisions == "measured" and not rep.routing
    m, rep2 = _run(clock, db, WIN)            # the stored decision is now the undone one
    assert rep2.decisions == "reused" and not rep2.routing and rep2.speedup is None
    assert "routes" not in rep2.phase_s and not rep2.layers   # none would be used
    assert any("routes not built" in n for n in rep2.notes)
    assert S.site_of(m.conv) is None and "forward" not in m.conv.__dict__
    assert any("undone" in n and REUSED in n for n in rep2.notes)


def test_when_routing_lost_the_reused_call_builds_no_route(monkeypatch: Any, tmp_path: Path) -> None:
    clock = use_clock(monkeypatch, FakeClock())
    db = str(tmp_path / "t.sqlite3")
    _, first = _run(clock, db, {"given": 1.0, "unrouted": 1.0, "routed": 2.0})
    assert first.decisions == "measured" and not first.routing and first.layers
    m, again = _run(clock, db, {"given": 1.0, "unrouted": 1.0, "routed": 2.0})
    assert again.decisions == "reused" and not again.routing and not again.layers
    assert S.site_of(m.conv) is None and again.speedup is None


def test_other_inputs_or_another_model_measure_anew(monkeypatch: Any, tmp_path: Path) -> None:
    clock = use_clock(monkeypatch, FakeClock())
    db = str(tmp_path / "t.sqlite3")
    _run(clock, db, WIN)
    _, wider = _run(clock, db, WIN, ch=6)
    assert wider.decisions == "measured"
    _, bigger = _run(clock, db, WIN, shape=(2, 3, 8, 8))
    assert bigger.decisions == "measured"
    _, same = _run(clock, db, WIN)
    assert same.decisions == "reused"
    assert len(sqlite3.connect(db).execute("SELECT * FROM decisions").fetchall()) == 3


def test_a_stored_decision_never_carries_the_reused_mark(monkeypatch: Any,
                                                         tmp_path: Path) -> None:
    clock = use_clock(monkeypatch, FakeClock())
    db = str(tmp_path / "t.sqlite3")
    _run(clock, db, WIN)
    _run(clock, db, WIN)
    _run(clock, db, WIN, remeasure=True)
    (raw,) = sqlite3.connect(db).execute("SELECT decision_json FROM decisions").fetchone()
    assert "reused" not in raw


def test_the_key_follows_what_decides_and_ignores_values() -> None:
    a, b = nn.Conv2d(3, 4, 3), nn.Conv2d(3, 4, 3)
    x = torch.randn(1, 3, 8, 8)
    o = OptimizeOptions()
    assert model_key(a, x, o, "cpu") == model_key(b, x, o, "cpu")         # other weights
    assert model_key(a, x, o, "cpu") != model_key(nn.Conv2d(3, 5, 3), x, o, "cpu")
    assert model_key(a, x, o, "cpu") != model_key(a, torch.randn(2, 3, 8, 8), o, "cpu")
    assert model_key(a, x, o, "cpu") != model_key(a, x.double(), o, "cpu")
    assert model_key(a, x, o, "cpu") != model_key(a, x, OptimizeOptions(train=False), "cpu")
    assert model_key(a, x, o, "cpu") != model_key(a, x, OptimizeOptions(steps=11), "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        amp = model_key(a, x, o, "cpu")
    assert amp != model_key(a, x, o, "cpu")


def test_the_key_follows_convdoctors_own_runtime_code(monkeypatch: Any) -> None:
    from convdoctor.runtime import decisions as D

    m, x, o = nn.Conv2d(3, 4, 3), torch.randn(1, 3, 8, 8), OptimizeOptions()
    before = model_key(m, x, o, "cpu")
    monkeypatch.setattr(D, "runtime_source_hash", lambda: "another-version")
    assert model_key(m, x, o, "cpu") != before


def test_the_key_follows_flags_forward_code_and_plain_inputs() -> None:
    class Flagged(nn.Module):
        def __init__(self, heavy: bool) -> None:
            super().__init__()
            self.conv, self.heavy = nn.Conv2d(3, 4, 3), heavy

        def forward(self, x: torch.Tensor, twice: bool = False) -> torch.Tensor:
            y = self.conv(x)
            return y.tanh() if self.heavy else y

    x, o = torch.randn(1, 3, 8, 8), OptimizeOptions()
    assert model_key(Flagged(False), x, o, "cpu") != model_key(Flagged(True), x, o, "cpu")
    assert model_key(Flagged(False), (x, True), o, "cpu") != \
        model_key(Flagged(False), (x, False), o, "cpu")
    assert model_key(Flagged(False), {"x": x}, o, "cpu") != \
        model_key(Flagged(False), {"y": x}, o, "cpu")
    assert model_key(Flagged(False), x, o, "cpu") != model_key(nn.Conv2d(3, 4, 3), x, o, "cpu")


def test_a_model_the_key_cannot_describe_is_optimized_without_stored_decisions(
        monkeypatch: Any, tmp_path: Path) -> None:
    use_clock(monkeypatch, FakeClock())
    m = nn.Sequential(nn.LazyConv2d(4, 3))
    O.optimize(m, torch.randn(1, 3, 8, 8), train=False, db=str(tmp_path / "t.sqlite3"),
               channels_last=False, steps=9, progress=False, isolate=False, backend="cpu",
               budget_s=0.05)
    rep = O.report_of(m)
    assert rep is not None and rep.decisions == "measured"
    assert sqlite3.connect(str(tmp_path / "t.sqlite3")).execute(
        "SELECT count(*) FROM decisions").fetchone()[0] == 0


def test_a_decision_fits_only_the_problems_and_winners_it_was_measured_with() -> None:
    rep = OptimizeReport(device="cpu", train=False)
    d = Decision.of(rep, {"p1": "cudnn:eng1", "p2": "triton:dw_a"}, undone=False)
    assert d.problems == ["p1", "p2"]
    assert d.fits({"p2": "triton:dw_a", "p1": "cudnn:eng1"})
    assert not d.fits({"p1": "cudnn:eng1", "p2": "cudnn:eng7"})       # re-tuned since
    assert not d.fits({"p1": "cudnn:eng1"})


def test_a_failed_step_is_not_stored_for_reuse(monkeypatch: Any, tmp_path: Path) -> None:
    from convdoctor.runtime import verify as V

    clock = use_clock(monkeypatch, FakeClock())
    db = str(tmp_path / "t.sqlite3")

    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("CUDA out of memory (a passing failure)")

    monkeypatch.setattr(V, "time_interleaved", broken)
    _, rep = _run(clock, db, WIN)
    assert "routing" in rep.failed_steps and not rep.routing
    assert sqlite3.connect(db).execute("SELECT count(*) FROM decisions").fetchone()[0] == 0
    assert any(n.startswith("decisions not stored (failed: routing)") for n in rep.notes), rep.notes


def test_a_damaged_or_foreign_record_reads_as_none() -> None:
    assert Decision.from_dict({"format": 99, "problems": []}) is None
    assert Decision.from_dict({"format": 1}) is None
    assert Decision.from_dict({"format": 1, "problems": [], "routing": True}) is not None
    assert Decision.from_dict({"format": 1, "problems": [], "nonsense": 3}) is not None


def test_prestart_starts_nothing_for_a_cpu_backend(tmp_path: Path) -> None:
    from convdoctor.runtime.tuning import Tuning
    from convdoctor.settings import Settings

    t = Tuning(str(tmp_path / "t.sqlite3"), "cpu", 0.05, True, Settings())
    t.prestart()
    assert t._worker is None and t._pre is None and t._starting is None
    t.close()


@pytest.mark.gpu
def test_on_a_gpu_prestart_starts_the_worker_and_the_compile_processes(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA torch (run on the device machine)")
    pytest.importorskip("cudnn")
    from convdoctor.problem import ConvProblem
    from convdoctor.runtime.tuning import Tuning, find_results
    from convdoctor.settings import Settings, for_tuning

    db = str(tmp_path / "t.sqlite3")
    opts = OptimizeOptions(db=db, budget_s=0.2, progress=False, backend="cuda", train=False)
    t = Tuning(db, "cuda", 0.2, True, for_tuning(Settings(), "quick"))
    t.prestart()
    assert t._pre is not None and t._starting is not None
    # large enough to be tuned (quick tuning on a GPU leaves tiny problems untuned)
    p = ConvProblem.parse("fprop n=32 c=64 k=64 h=28 w=28 r=7 s=7 pad=3 groups=64 "
                          "dtype=float32 layout=nchw")
    from convdoctor.runtime.tuning import tiny
    assert not tiny(p)
    rep = OptimizeReport(device="cuda", train=False)
    res = find_results({p.key(): p}, opts, rep, tuning=t)
    assert rep.tuned == 1 and p.key() in res
    assert rep.precompile["tasks"] > 0
    assert rep.precompile["compiled"] == rep.precompile["tasks"], rep.precompile


def test_a_call_with_untuned_problems_stores_only_its_layout(monkeypatch: Any,
                                                             tmp_path: Path) -> None:
    clock = use_clock(monkeypatch, FakeClock())
    db = str(tmp_path / "t.sqlite3")
    _, first = _run(clock, db, WIN, tune_missing=False)     # as the quick time limit leaves them
    assert first.untuned and first.decisions == "measured"
    assert not first.channels_last_reason.endswith(REUSED)
    assert any("the next call measures them again, all but the layout" in n for n in first.notes)
    _, second = _run(clock, db, WIN)
    assert second.decisions == "measured" and second.tuned == second.problems
    assert second.channels_last_reason.endswith(REUSED)        # the layout, reused
    assert not second.routing_reason.endswith(REUSED)
    _, third = _run(clock, db, WIN)
    assert third.decisions == "reused"                        # now complete
    (raw,) = sqlite3.connect(db).execute("SELECT decision_json FROM decisions").fetchone()
    assert '"partial": false' in raw


def test_a_layout_only_decision_fits_no_problems() -> None:
    rep = OptimizeReport(device="cpu", train=False)
    rep.channels_last, rep.channels_last_reason = True, "measured end to end" + REUSED
    d = Decision.layout_of(rep)
    assert d.partial and d.channels_last and d.channels_last_reason == "measured end to end"
    assert not d.fits({}) and not d.fits({"p1": "cudnn:eng1"})
    assert Decision.from_dict(d.to_dict()) == d
