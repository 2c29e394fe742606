"""convdoctor.optimize / restore end to end on the CPU: database choices become routes, state_dict
is untouched, new shapes run PyTorch's path, channels_last is a measured model-level choice, the real
CPU tuner fills a database, and the CLI prints the plan and a measured speedup."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

import convdoctor
from convdoctor.runtime import fallback as fb
from convdoctor.runtime import optimizer as O


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.pw = nn.Conv2d(8, 6, 1)
        self.head = nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.stem(x)))
        x = self.pw(torch.relu(self.dw(x)))
        return self.head(x.mean(dim=(2, 3)))


def _env() -> dict[str, str]:
    from convdoctor.tune.backend import get_backend
    from convdoctor.tune.harness import environment_of

    return environment_of(get_backend("cpu"))


def _store(db_path: Path, problems: list, winner: str, runner_up: str = "cpu:mkldnn-on") -> None:
    from convdoctor.db.store import TuningDB
    from convdoctor.tune.backend import Candidate
    from convdoctor.tune.result import CandidateStats, TuneResult

    env = _env()
    with TuningDB(db_path) as db:
        for p in problems:
            w = Candidate(key=winner, backend="cpu")
            r = Candidate(key=runner_up, backend="cpu")
            db.put(TuneResult(problem=p, env=env, backend="cpu", winner=w, candidates=[
                CandidateStats(candidate=w, samples=[1e-4] * 5),
                CandidateStats(candidate=r, samples=[2e-4] * 5)]))


def test_state_dict_identical_and_loads_into_unmodified_model(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Small()
    x = torch.randn(2, 3, 8, 8)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    bn_before = m.bn.running_mean.clone()
    out = convdoctor.optimize(m, x, db=tmp_path / "db.sqlite3", tune_missing=False,
                              channels_last=True, verify=False)
    assert out is m
    after = m.state_dict()
    assert list(after) == list(before)
    for k in before:
        assert torch.equal(after[k], before[k]), k
    assert torch.equal(m.bn.running_mean, bn_before)  # recording did not move BN statistics
    fresh = Small()
    fresh.load_state_dict(after)
    m.eval()
    fresh.eval()
    torch.testing.assert_close(m(x), fresh(x), rtol=1e-5, atol=1e-5)
    # channels_last was applied to the parameters; restore puts everything back exactly.
    assert m.stem.weight.is_contiguous(memory_format=torch.channels_last)
    convdoctor.restore(m)
    assert "forward" not in m.stem.__dict__ and "_convdoctor_site" not in m.stem.__dict__
    assert m.stem.weight.is_contiguous()
    assert not m._forward_hooks and not m._forward_pre_hooks
    torch.testing.assert_close(m(x), fresh(x), rtol=1e-5, atol=1e-5)


def test_db_choices_become_routes_and_new_shapes_run_pytorch(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Small()
    x = torch.randn(2, 3, 8, 8)
    probs = O.model_problems(m, x, train=True)
    assert {p.direction for p in probs} == {"fprop", "dgrad", "wgrad"}
    assert not any(p.direction == "dgrad" and p.c == 3 for p in probs)  # the input needs no grad
    db = tmp_path / "db.sqlite3"
    _store(db, probs, "cpu:mkldnn-off")
    ref = Small()
    ref.load_state_dict(m.state_dict())
    O.optimize(m, x, db=db, tune_missing=False, channels_last=False, verify=False)
    rep = O.report_of(m)
    assert rep.from_db == rep.problems == len(probs) and rep.tuned == 0 and rep.untuned == 0
    keys = {d.key for lay in rep.layers for d in lay.directions}
    assert keys == {"cpu:mkldnn-off"}
    assert all(d.chain[1] == "cpu:mkldnn-on" for lay in rep.layers for d in lay.directions)
    seen: list[tuple[str, str, str]] = []
    fb.set_fault_hook(lambda s, d, k: seen.append((s, d, k)))
    try:
        y = m(x)
        y.sum().backward()
        n_known = len(seen)
        y2 = m(torch.randn(3, 3, 10, 12))  # a shape never seen
    finally:
        fb.set_fault_hook(None)
    # 3 fprops; backward: pw and dw dgrad+wgrad in one call each (same executor), stem wgrad only.
    assert n_known == 6
    assert {k for _, _, k in seen[:n_known]} == {"cpu:mkldnn-off"}
    assert {k for _, _, k in seen[n_known:]} == {"torch:default"}  # new shape: PyTorch's path
    assert y2.shape == (3, 5)
    ref_y = ref(x)
    torch.testing.assert_close(y, ref_y, rtol=1e-4, atol=1e-5)
    convdoctor.restore(m)


def test_optimize_with_real_cpu_tuner(tmp_path: Path) -> None:
    """No database entry: the real CPU tuner measures the candidates and the winner is routed."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
    x = torch.randn(2, 4, 12, 12)
    ref = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
    ref.load_state_dict(m.state_dict())
    db = tmp_path / "db.sqlite3"
    O.optimize(m, x, train=False, db=db, tune_missing=True, channels_last=False, verify=False,
               budget_s=0.05, isolate=False, tuning="thorough")
    rep = O.report_of(m)
    assert rep.problems == 2
    # The tuner refuses to trust timings taken while other processes steal the CPU (it says so);
    # those problems must then be on PyTorch's path with the reason in the report.
    untrusted = [n for n in rep.notes if "not tuned" in n]
    assert rep.tuned + len(untrusted) == 2, rep.notes
    from convdoctor.db.store import TuningDB

    with TuningDB(db) as tdb:
        stored = [tdb.get(p, _env()) for p in O.model_problems(ref, x, train=False)]
    for lay, r in zip(rep.layers, stored, strict=True):
        if r is None:
            assert lay.directions[0].key == "torch:default"
        else:
            chosen = lay.directions[0]
            assert chosen.source == "tuned"
            # The tuner's winner, unless another correct candidate measured faster beyond the
            # tuner's noise band (then the faster one).
            st = {c.candidate.key: c.median_s for c in r.candidates if c.status == "ok"}
            assert chosen.key == r.winner.key or (
                st[chosen.key] < st[r.winner.key] / (1.0 + r.noise_band))
    with torch.no_grad():
        torch.testing.assert_close(m(x), ref(x), rtol=1e-4, atol=1e-5)
    # The second time what was stored comes from the database.
    convdoctor.restore(m)
    O.optimize(m, x, train=False, db=db, tune_missing=False, channels_last=False, verify=False,
               isolate=False)
    assert O.report_of(m).from_db == sum(r is not None for r in stored)


def test_verify_and_layout_are_measured(monkeypatch) -> None:
    """Every step of every variant costs the same (a synthetic clock that ticks per reading): the
    layout and routing are measured, and a tie keeps nothing."""
    from rt_clock import FakeClock, use_clock

    use_clock(monkeypatch, FakeClock(tick=1e-4))
    torch.manual_seed(0)
    m = Small()
    x = torch.randn(2, 3, 16, 16)
    O.optimize(m, x, db=False, tune_missing=False, steps=4, progress=False)
    rep = O.report_of(m)
    assert set(rep.layout_ms) == {"as_given", "channels_last"}
    assert all(v > 0 for v in rep.layout_ms.values())
    assert set(rep.verify_ms) == {"routed", "unrouted", "chosen"}  # no graph routes on the CPU
    # the default margin comes from the measurement: at least 1%, at most 50%
    assert all(0.01 <= rep.margins[k] <= 0.5 for k in ("layout", "routing")), rep.margins
    assert not rep.routing and not rep.channels_last and rep.speedup is None
    assert "no database" in " ".join(rep.notes) or rep.problems > 0
    assert "forward" not in m.stem.__dict__ and not m._forward_pre_hooks
    convdoctor.restore(m)


def test_bad_inputs_are_clear_errors() -> None:
    from convdoctor.errors import UsageError

    with pytest.raises(UsageError, match="torch.nn.Module"):
        O.optimize("not a model", torch.randn(1))
    with pytest.raises(UsageError, match="example_inputs"):
        O.optimize(Small())
    with pytest.raises(UsageError, match="channels_last"):
        O.optimize(Small(), torch.randn(1, 3, 8, 8), channels_last="maybe")
    m = Small()
    with pytest.raises(RuntimeError):
        O.optimize(m, torch.randn(1, 5, 8, 8), db=False, verify=False, channels_last=False)
    assert not O.is_optimized(m) and "forward" not in m.stem.__dict__  # rolled back


def test_import_is_light() -> None:
    code = ("import sys, convdoctor.runtime, convdoctor.cli.optimize; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _cli(*args: str) -> _Result:
    """The CLI in-process (same code path as `convdoctor optimize ...`, without a torch import per
    test)."""
    import contextlib
    import io

    from convdoctor.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["optimize", *args])
    return _Result(rc, out.getvalue(), err.getvalue())


def test_cli_prints_plan_and_measured_speedup(tmp_path: Path) -> None:
    f = tmp_path / "net.py"
    f.write_text(textwrap.dedent("""
        import torch.nn as nn
        def make():
            return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(8, 8, 3, padding=2, dilation=2), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    """))
    db = tmp_path / "db.sqlite3"
    # channels_last asked for: the model changes, and the speedup is optimize's measurement
    p = _cli(f"{f}:make", "--input-shape", "2,3,16,16", "--db", str(db), "--no-tune",
             "--steps", "4", "--channels-last", "on", "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    rep = data["report"]
    assert rep["channels_last"] and data["speedup"] == rep["speedup"] > 0
    lo, hi = data["speedup_ci"]
    assert lo <= data["speedup"] <= hi and rep["speedup_level"] > 0.95
    assert data["step_ms"] == {"pytorch": rep["speedup_ms"]["as_given"],
                               "convdoctor": rep["speedup_ms"]["optimized"]}
    assert len(rep["layers"]) == 2
    assert rep["layers"][0]["directions"][0]["direction"] == "fprop"
    p = _cli(f"{f}:make", "--input-shape", "2,3,16,16", "--db", str(db), "--no-tune",
             "--steps", "4", "--inference", "--channels-last", "on", "--margin", "0.05")
    assert p.returncode == 0, p.stderr
    assert "layer" in p.stdout and "inference" in p.stdout
    assert "-> speedup " in p.stdout and "% interval " in p.stdout


def _plain_args(tmp_path: Path) -> tuple[str, ...]:
    """CLI arguments for a one-convolution model file, untuned, without layout or graphs."""
    f = tmp_path / "net.py"
    f.write_text("import torch.nn as nn\n"
                 "def make():\n"
                 "    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Flatten())\n")
    return (f"{f}:make", "--input-shape", "2,3,8,8", "--db", str(tmp_path / "db.sqlite3"),
            "--no-tune", "--steps", "4", "--channels-last", "off", "--graphs", "off",
            "--inference")


def test_cli_says_when_nothing_won(tmp_path: Path, monkeypatch) -> None:
    """No tuned choice, channels_last and graphs off, and every step costing the same (a
    synthetic clock): routing ties, so nothing is kept. The CLI prints no speedup: the model runs
    as PyTorch runs it."""
    from rt_clock import FakeClock, use_clock

    use_clock(monkeypatch, FakeClock(tick=1e-4))
    args = _plain_args(tmp_path)
    p = _cli(*args, "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert not data["report"]["routing"]
    assert data["speedup"] is None and data["step_ms"] == {} and data["speedup_ci"] == []
    assert data["report"]["speedup_source"].startswith("no layout, routing or graph variant")
    p = _cli(*args)
    assert p.returncode == 0, p.stderr
    assert "  routing: off (" in p.stdout and "speedup" not in p.stdout
    assert p.stdout.rstrip().endswith(
        "  end to end: no layout, routing or graph variant was measured faster: optimize "
        "leaves the model as PyTorch runs it")


@pytest.mark.parametrize("args,msg", [
    (["zoo:nope"], "unknown zoo model"),
    (["missing.py:make", "--input-shape", "1,3,8,8"], "not found"),
    (["zoo:resnet50", "--input-shape", "1,3,x,8"], "input-shape"),
    (["zoo:resnet50", "--input-shape", "1,5,32,32", "--no-tune", "--db", "/tmp/none.sqlite3"],
     "does not run"),
    (["zoo:resnet50", "--dtype", "int8"], "dtype"),
    (["zoo:resnet50", "--margin", "3%"], "--margin"),
])
def test_cli_bad_input_exit_2(args: list[str], msg: str) -> None:
    p = _cli(*args)
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr and "Traceback" not in p.stderr


def test_tune_on_first_sight_uses_database_for_a_new_shape(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Small()
    x = torch.randn(2, 3, 8, 8)
    x_new = torch.randn(1, 3, 12, 12)
    db = tmp_path / "db.sqlite3"
    _store(db, O.model_problems(m, x_new, train=True), "cpu:mkldnn-off")
    O.optimize(m, x, db=db, tune_missing=False, channels_last=False, verify=False,
               tune_on_first_sight=True, isolate=False)
    seen: list[str] = []
    fb.set_fault_hook(lambda s, d, k: seen.append(k))
    try:
        m(x_new).sum().backward()
    finally:
        fb.set_fault_hook(None)
    assert seen and set(seen) == {"cpu:mkldnn-off"}
    convdoctor.restore(m)


def test_cli_time_limit_reaches_optimize(tmp_path: Path, monkeypatch) -> None:
    from convdoctor.cli.optimize import _time_limit

    assert _time_limit("auto") is None and _time_limit("none") == float("inf")
    assert _time_limit(" 12.5 ") == 12.5
    seen: list[Any] = []
    import convdoctor.runtime.optimizer as O

    real = O.optimize

    def spy(*a: Any, **kw: Any) -> Any:
        seen.append(kw.get("tune_time_limit_s", "missing"))
        return real(*a, **kw)

    monkeypatch.setattr(O, "optimize", spy)
    base = _plain_args(tmp_path)
    for arg, want in (([], None), (["--time-limit", "none"], float("inf")),
                      (["--time-limit", "7"], 7.0)):
        p = _cli(*base, *arg, "--json")
        assert p.returncode == 0, p.stderr
        assert seen[-1] == want, (arg, seen)
