"""The bench's resume and referee tests are about which arms and problems run and what is kept,
not about process isolation: `in_process_workers` runs each arm's backend in the test's process
(a real worker process costs a second or two to start torch; the end-to-end bench in real worker
processes is tests/cli/test_cli_tune.py's and tests/bench/test_bench_shard.py's)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from convdoctor.bench import arms
from convdoctor.settings import Settings
from convdoctor.tune.backend import load


@dataclass
class InProcessArms:
    """The stand-ins started, in order. `round_trip_s`: a request to a worker process takes at
    least a pipe's round trip; with this set, each call to a runner waits that long, so that no
    candidate's host cost (`CandidateStats.cost_s`, kept to the millisecond in a bench row) is
    below a real worker's."""

    started: list[InProcessWorker] = field(default_factory=list)
    round_trip_s: float = 0.0


class _RoundTripRunner:
    def __init__(self, inner: Any, arms: InProcessArms) -> None:
        self.inner = inner
        self.arms = arms

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*a: Any, **k: Any) -> Any:
            time.sleep(self.arms.round_trip_s)
            return attr(*a, **k)

        return call


class InProcessWorker:
    """What `arms.start_worker` returns, minus the process: the backend `spec` names, loaded here
    under `settings`, with the worker's context manager and `shutdown`."""

    def __init__(self, spec: str, settings: Settings, arms: InProcessArms) -> None:
        self.inner = load(spec, settings)
        self.name = self.inner.name
        self.arms = arms
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def prepare(self, problem: Any, candidate: Any) -> Any:
        runner = self.inner.prepare(problem, candidate)
        return _RoundTripRunner(runner, self.arms) if self.arms.round_trip_s > 0 else runner

    def shutdown(self) -> None:
        self.closed = True

    def __enter__(self) -> InProcessWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


@pytest.fixture
def in_process_workers(monkeypatch: pytest.MonkeyPatch) -> InProcessArms:
    """Every arm's worker in this process; CPU timings are never discarded for a low CPU share
    (this machine runs other jobs: tests/tune/test_tune_cpu_backend.py tests the check itself)."""
    state = InProcessArms()

    def start(backend: str, timeout_s: float, settings: Settings) -> InProcessWorker:
        state.started.append(InProcessWorker(backend, settings, state))
        return state.started[-1]

    monkeypatch.setattr(arms, "start_worker", start)
    monkeypatch.setenv("CONVDOCTOR_CPU_MIN_SHARE", "0")
    return state
