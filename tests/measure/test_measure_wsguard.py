"""The workspace guard (`convdoctor.measure.wsguard`): keep a cuDNN plan's workspace only where the
plan runs at its speed. Synthetic workspaces with known times stand in for GPU buffers here; the
GPU tests run the real thing (tests/engines/test_engines_gpu.py, tests/runtime)."""

from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from convdoctor.measure import wsguard
from convdoctor.problem import ConvProblem


class Buf:
    """A fake workspace whose plan time is fixed when it is allocated (as the memory behind a real
    one decides it)."""

    def __init__(self, t: float) -> None:
        self.t = t


class Alloc:
    """Hands out workspaces with the given times in turn; checks every earlier one is still held
    when the next is made (a freed buffer would come back from the caching allocator)."""

    def __init__(self, times: list[float]) -> None:
        self.times = list(times)
        self.made: list[weakref.ref[Buf]] = []

    def __call__(self) -> Buf:
        assert all(r() is not None for r in self.made), "a tried workspace was freed early"
        b = Buf(self.times.pop(0))
        self.made.append(weakref.ref(b))
        return b


def _time_of(b: Buf) -> float:
    return b.t


def test_a_workspace_within_the_tolerance_is_kept_without_trying_others() -> None:
    first = Buf(600e-6)
    alloc = Alloc([])
    ws, res = wsguard.choose(first, alloc, _time_of, reference_s=590e-6)
    assert ws is first and not res.replaced and res.times_s == [600e-6]
    assert alloc.made == []


def test_without_a_reference_the_first_is_kept() -> None:
    first = Buf(720e-6)
    ws, res = wsguard.choose(first, Alloc([]), _time_of)
    assert ws is first and res.times_s == [720e-6] and res.reference_s is None


def test_a_slow_workspace_is_replaced_by_the_first_fast_fresh_one() -> None:
    # Conv2d_4a_3x3's cuDNN plan: 720 us with a slow buffer, 592 us with a good one
    first = Buf(720e-6)
    alloc = Alloc([592e-6, 580e-6])
    ws, res = wsguard.choose(first, alloc, _time_of, reference_s=590e-6)
    assert ws.t == 592e-6 and res.replaced and res.kept == 1
    assert res.times_s == [720e-6, 592e-6]
    assert len(alloc.made) == 1                     # stopped at the first good one
    assert "720/592 us over 2 tries vs 590 us, kept try 2" in res.summary()


def test_when_every_try_is_slow_the_fastest_of_them_is_kept() -> None:
    first = Buf(730e-6)
    alloc = Alloc([700e-6, 715e-6, 500e-6])
    ws, res = wsguard.choose(first, alloc, _time_of, reference_s=590e-6, tries=3)
    assert ws.t == 700e-6 and res.kept == 1 and len(res.times_s) == 3
    assert len(alloc.made) == 2                     # tries counts the first workspace


def test_the_module_settings_are_read_per_call(monkeypatch) -> None:
    monkeypatch.setattr(wsguard, "TOLERANCE", -1.0)   # every workspace counts as slow
    monkeypatch.setattr(wsguard, "TRIES", 2)
    alloc = Alloc([580e-6, 570e-6])
    ws, res = wsguard.choose(Buf(590e-6), alloc, _time_of, reference_s=590e-6)
    assert len(res.times_s) == 2 and ws.t == 580e-6


def test_a_known_first_time_is_not_measured_again() -> None:
    first = Buf(1.0)                                # time_of would say 1 s
    ws, res = wsguard.choose(first, Alloc([]), _time_of, reference_s=590e-6, first_s=591e-6)
    assert ws is first and res.times_s == [591e-6]


def test_the_rejected_workspaces_are_released_after_the_choice() -> None:
    first = Buf(730e-6)
    alloc = Alloc([720e-6, 590e-6])
    ws, _ = wsguard.choose(first, alloc, _time_of, reference_s=590e-6)
    del first
    alive = [r() for r in alloc.made]
    assert alive[1] is ws and alive[0] is None      # the slow fresh one is gone


def test_only_large_workspaces_are_guarded_and_the_switch_turns_it_off(monkeypatch) -> None:
    assert wsguard.wanted(wsguard.GUARD_MIN_BYTES)
    assert not wsguard.wanted(wsguard.GUARD_MIN_BYTES - 1)
    assert not wsguard.wanted(0)
    assert not wsguard.wanted(1 << 30, enabled=False)


# ------------------------------------------------------------------ the runtime's use of it
class FakePlan:
    """A stand-in for `ConvPlan` on the CPU: its time depends on which workspace it runs with."""

    def __init__(self, problem: ConvProblem, nbytes: int) -> None:
        self.problem = problem
        self.workspace_bytes = nbytes
        self.device = 0
        self.input_roles, self.output_role = ("x", "dy"), "dw"
        self._ws = torch.empty(nbytes, dtype=torch.uint8)
        self.runs: list[int] = []

    def workspace(self) -> torch.Tensor:
        return self._ws

    def adopt_workspace(self, ws: torch.Tensor) -> None:
        self._ws = ws

    def launch(self, a: Any, b: Any, out: Any, workspace: Any, stream_ptr: int) -> None:
        self.runs.append(workspace.data_ptr())


@pytest.fixture
def cpu_stream(monkeypatch):  # noqa: ANN001, ANN201
    """The executors ask for the current CUDA stream's pointer; on the CPU there is none."""
    from convdoctor.engines import cudnn_exec as plans

    monkeypatch.setattr(plans, "_raw_stream", lambda device: 0)


def test_the_runtime_replaces_a_slow_workspace_and_the_plan_adopts_it(monkeypatch,
                                                                     cpu_stream) -> None:
    from convdoctor.engines import cudnn_exec as plans

    p = ConvProblem.parse("wgrad n=2 c=8 h=9 w=9 k=16 r=3 s=3 dtype=float32 layout=nchw")
    plan = FakePlan(p, wsguard.GUARD_MIN_BYTES)
    slow = plan.workspace().data_ptr()

    def fake_time(run: Any, *, device: int, samples: int = 5) -> float:
        run()
        return 720e-6 if plan.runs[-1] == slow else 592e-6

    monkeypatch.setattr(wsguard, "time_with", fake_time)
    ex = plans.PlanExec("cudnn:eng68_k2=0", p, plan, reference_s=590e-6)
    assert ex.guard is not None and ex.guard.replaced and ex.guard.times_s == [720e-6, 592e-6]
    assert ex.workspace.data_ptr() != slow and plan.workspace() is ex.workspace
    ex2 = plans.PlanExec("cudnn:eng68_k2=0", p, plan, reference_s=590e-6)
    assert ex2.guard is not None and not ex2.guard.replaced  # the adopted one is kept


@pytest.mark.parametrize("ref, nbytes", [(None, 1 << 20), (590e-6, 1024)])
def test_the_runtime_leaves_a_plan_alone_without_a_reference_or_a_small_workspace(
        monkeypatch, cpu_stream, ref: float | None, nbytes: int) -> None:
    from convdoctor.engines import cudnn_exec as plans

    p = ConvProblem.parse("wgrad n=2 c=8 h=9 w=9 k=16 r=3 s=3 dtype=float32 layout=nchw")
    plan = FakePlan(p, nbytes)
    monkeypatch.setattr(wsguard, "time_with", lambda *a, **k: pytest.fail("timed"))
    ex = plans.PlanExec("cudnn:eng68_k2=0", p, plan, reference_s=ref)
    assert ex.guard is None and plan.runs == []


def test_a_failing_guard_keeps_the_plan_and_says_why(monkeypatch, cpu_stream) -> None:
    from convdoctor.engines import cudnn_exec as plans

    p = ConvProblem.parse("wgrad n=2 c=8 h=9 w=9 k=16 r=3 s=3 dtype=float32 layout=nchw")
    plan = FakePlan(p, wsguard.GUARD_MIN_BYTES)
    own = plan.workspace()

    def oom(*a: Any, **k: Any) -> float:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(wsguard, "time_with", oom)
    ex = plans.PlanExec("cudnn:eng68_k2=0", p, plan, reference_s=590e-6)
    assert ex.guard is None and ex.workspace is own and plan.workspace() is own
    assert "OutOfMemoryError" in ex.guard_error


def test_the_optimizer_hands_the_tuned_median_as_the_reference() -> None:
    from convdoctor.runtime.routes import tuned_s

    stats = {"cudnn:eng68_k2=0": SimpleNamespace(median_s=5.9e-4),
             "torch:heuristic": SimpleNamespace(median_s=None)}
    res = SimpleNamespace(stats_for=stats.get)
    assert tuned_s(res, "cudnn:eng68_k2=0") == 5.9e-4
    assert tuned_s(res, "torch:heuristic") is None
    assert tuned_s(res, "cudnn:other") is None
    assert tuned_s(None, "cudnn:eng68_k2=0") is None
