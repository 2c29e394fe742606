"""The bench hands its worker processes settings, never environment variables of its own: the
tuning arms run under the user's settings, PyTorch's and the referee's arms under the same
settings without knob refinement (they only time paths chosen elsewhere)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from convdoctor.bench import arms
from convdoctor.cli import bench as command
from convdoctor.settings import Settings


class _Recorder:
    started: list[tuple[str, float, Settings]] = []

    def __init__(self, spec: str, *, timeout_s: float, settings: Settings) -> None:
        self.started.append((spec, timeout_s, settings))


def test_each_arm_kind_gets_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from convdoctor.tune import worker

    monkeypatch.setattr(worker, "WorkerBackend", _Recorder)
    _Recorder.started = []
    user = Settings(triton=False, cudnn_enum_extra=3)
    spec = arms.ArmSpec("cuda", 5.0, 120.0, user)
    spec.tune_worker()
    spec.measure_worker()
    (_, t1, tuning), (_, t2, measuring) = _Recorder.started
    assert (t1, t2) == (120.0, 120.0)
    assert tuning == user and tuning.cudnn_refine
    assert measuring == user.replace(cudnn_refine=False)
    assert measuring.triton is False and measuring.cudnn_enum_extra == 3   # the rest kept
    # what the measure-only worker's process is told: refinement off, the user's switches kept
    assert measuring.to_env() == {**user.to_env(), **Settings(cudnn_refine=False).to_env()}


def test_the_command_reads_the_settings_at_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from convdoctor.bench import rerun, run

    seen: list[Any] = []
    monkeypatch.setattr(run, "bench", lambda args, settings: seen.append(settings) or 0)
    monkeypatch.setattr(rerun, "referee_only", lambda args, settings: seen.append(settings) or 0)
    monkeypatch.setenv(Settings.__dataclass_fields__["triton"].metadata["env"], "0")
    ap = argparse.ArgumentParser()
    command.add_arguments(ap)
    assert command.run(ap.parse_args(["cnn-layers"])) == 0
    assert command.run(ap.parse_args(["--referee-only", "r.json"])) == 0
    assert [s.triton for s in seen] == [False, False]
