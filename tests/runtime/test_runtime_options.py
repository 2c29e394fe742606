"""`optimize`'s parameters as one `OptimizeOptions` value: checked once with a one-line message,
the same names and defaults as `optimize`'s signature, and the process's `Settings` read once per
call and handed to every step (the route building and tuning on first sight alike)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

from convdoctor.errors import UsageError
from convdoctor.runtime import optimizer as O
from convdoctor.runtime import routes as R
from convdoctor.runtime import tuning as T
from convdoctor.runtime.options import OptimizeOptions
from convdoctor.settings import Settings


def test_fields_are_optimizes_keyword_parameters_with_its_defaults() -> None:
    params = inspect.signature(O.optimize).parameters
    assert len(params) == 20
    fields = {f.name: f for f in dataclasses.fields(OptimizeOptions)}
    derived = {"settings", "base_settings"}
    assert set(params) - {"model", "example_inputs"} == set(fields) - derived
    for name, f in fields.items():
        if name not in derived:
            assert f.default == params[name].default, name


@pytest.mark.parametrize("kwargs,msg", [
    ({"margin": 1.0}, "margin must be a number in [0, 1)"),
    ({"margin": -0.1}, "margin"),
    ({"margin": "3%"}, "margin"),
    ({"margin": float("nan")}, "margin"),
    ({"graphs": "yes"}, "graphs must be 'auto', True or False"),
    ({"channels_last": "maybe"}, "channels_last must be"),
    ({"steps": 0}, "steps must be a whole number >= 1"),
    ({"steps": 2.5}, "steps"),
    ({"steps": True}, "steps"),
    ({"budget_s": 0}, "budget_s must be a number of seconds > 0"),
    ({"budget_s": float("inf")}, "budget_s"),
    ({"tune_time_limit_s": -1}, "tune_time_limit_s"),
    ({"tune_time_limit_s": float("nan")}, "tune_time_limit_s"),
    ({"tune_time_limit_s": -float("inf")}, "tune_time_limit_s"),
])
def test_bad_values_are_one_line_usage_errors(kwargs: dict[str, Any], msg: str) -> None:
    with pytest.raises(UsageError) as e:
        OptimizeOptions(**kwargs)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_good_values_and_derived_switches() -> None:
    o = OptimizeOptions(margin=0, steps=1, budget_s=0.01, tune_time_limit_s=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.steps = 3  # type: ignore[misc]
    assert OptimizeOptions().tune_limit() == 40.0
    assert OptimizeOptions().tune_limit(12.5) == 27.5     # what is left after the layout decision
    assert OptimizeOptions().tune_limit(39.0) == 15.0     # never less than 15 s of tuning
    assert OptimizeOptions(tune_time_limit_s=5).tune_limit(39.0) == 5.0
    assert OptimizeOptions(tuning="thorough").tune_limit() is None
    assert OptimizeOptions(tune_time_limit_s=float("inf")).tune_limit() is None
    assert OptimizeOptions(tuning="thorough", tune_time_limit_s=5).tune_limit() == 5.0
    assert OptimizeOptions().graphs_possible("cuda")
    assert not OptimizeOptions().graphs_possible("cpu")
    assert not OptimizeOptions(graphs=False).graphs_possible("cuda")
    assert OptimizeOptions().graph_routes("cuda") and not OptimizeOptions().graph_routes("cpu")
    assert not OptimizeOptions(verify=False).graph_routes("cuda")


def test_optimize_reports_bad_values_before_touching_the_model() -> None:
    m = nn.Conv2d(3, 4, 3)
    with pytest.raises(UsageError, match="steps"):
        O.optimize(m, torch.randn(1, 3, 8, 8), steps=0)
    with pytest.raises(UsageError, match="input_shape"):
        O.optimize(m, input_shape=("a", 3))
    assert not O.is_optimized(m) and "forward" not in m.__dict__


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def _store(db_path: Path, problems: list[Any]) -> None:
    from convdoctor.db.store import TuningDB
    from convdoctor.tune.backend import Candidate, get_backend
    from convdoctor.tune.harness import environment_of
    from convdoctor.tune.result import CandidateStats, TuneResult

    env = environment_of(get_backend("cpu"))
    with TuningDB(db_path) as db:
        for p in problems:
            w, r = Candidate("cpu:mkldnn-off", "cpu"), Candidate("cpu:mkldnn-on", "cpu")
            db.put(TuneResult(problem=p, env=env, backend="cpu", winner=w, candidates=[
                CandidateStats(candidate=w, samples=[1e-4] * 5),
                CandidateStats(candidate=r, samples=[2e-4] * 5)]))


def test_settings_are_read_once_and_reach_every_step(tmp_path: Path, monkeypatch) -> None:
    """CONVDOCTOR_WS_GUARD=0 reaches the routes built by `optimize` and those built on first
    sight, and both tune with the very Settings object `optimize` read at its start."""
    torch.manual_seed(0)
    m = Small()
    x, x_new = torch.randn(2, 3, 8, 8), torch.randn(1, 3, 12, 12)
    db = tmp_path / "db.sqlite3"
    monkeypatch.setenv("CONVDOCTOR_WS_GUARD", "0")  # a result-changing setting: stored under it
    _store(db, O.model_problems(m, x, train=True) + O.model_problems(m, x_new, train=True))
    reads: list[Settings] = []

    def current() -> Settings:
        reads.append(Settings.from_env())
        return reads[-1]

    guards: list[bool] = []
    executors = R.executors

    def spy_executors(*a: Any, guard: bool = True, **k: Any) -> list[Any]:
        guards.append(guard)
        return executors(*a, guard=guard, **k)

    seen: list[Settings] = []
    init = T.Tuning.__init__

    def spy_init(self: T.Tuning, *a: Any) -> None:
        init(self, *a)
        seen.append(self.settings)

    monkeypatch.setattr(O, "current_settings", current)
    monkeypatch.setattr(R, "executors", spy_executors)
    monkeypatch.setattr(T.Tuning, "__init__", spy_init)
    O.optimize(m, x, db=db, tune_missing=False, channels_last=False, verify=False,
               tune_on_first_sight=True, isolate=False, backend="cpu", tuning="thorough")
    n_built = len(guards)
    m(x_new).sum().backward()  # a new shape: tuned (here: found) on first sight
    O.restore(m)
    assert len(reads) == 1 and reads[0].ws_guard is False
    assert n_built > 0 and len(guards) > n_built and not any(guards)
    # one Tuning for optimize's lookups, one per layer seeing the new shape
    assert len(seen) == 3 and all(s is reads[0] for s in seen)


def test_quick_tuning_reaches_every_tuning(tmp_path: Path,
                                           monkeypatch) -> None:
    """With tuning="quick" every Tuning gets the quick settings built from the one read."""
    m = Small()
    x = torch.randn(2, 3, 8, 8)
    seen: list[Settings] = []
    init = T.Tuning.__init__

    def spy_init(self: T.Tuning, *a: Any) -> None:
        init(self, *a)
        seen.append(self.settings)

    monkeypatch.setattr(T.Tuning, "__init__", spy_init)
    O.optimize(m, x, db=tmp_path / "q.sqlite3", tune_missing=False, channels_last=False,
               verify=False, isolate=False, backend="cpu")
    O.restore(m)
    from convdoctor.settings import QUICK

    assert seen and all(s.tune_prescreen == QUICK["tune_prescreen"]
                        and s.cudnn_refine_budget_s == QUICK["cudnn_refine_budget_s"]
                        for s in seen)


def test_tuning_mode_sets_the_tuning_settings_and_keeps_the_users() -> None:
    from convdoctor.runtime.optimizer import _tuning_settings
    from convdoctor.settings import QUICK

    quick = _tuning_settings("quick")
    assert quick["settings"].tune_prescreen == QUICK["tune_prescreen"]
    assert quick["base_settings"].tune_prescreen == 0
    thorough = _tuning_settings("thorough")
    assert thorough["settings"] == thorough["base_settings"]
    with pytest.raises(UsageError, match="tuning must be one of"):
        _tuning_settings("fast")


def test_a_quick_run_is_served_a_thorough_result() -> None:
    from convdoctor.runtime.tuning import Tuning
    from convdoctor.settings import Settings, for_tuning

    base = Settings()
    t = object.__new__(Tuning)
    t.settings, t.base_settings = for_tuning(base, "quick"), base
    t.env = {"gpu_name": "X", "settings": t.settings.result_key()}
    envs = t._lookup_envs()
    assert [e["settings"] for e in envs] == [t.settings.result_key(), "default"]
    t.settings = base
    t.env = {"gpu_name": "X", "settings": "default"}
    assert t._lookup_envs() == [t.env]
