"""`Prestartable`: a helper process started ahead in the background, taken on first use."""

from __future__ import annotations

import threading
import time
from typing import Any

from convdoctor.tune.cuda_backend import Prestartable


class _Proc:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def shutdown(self) -> None:
        self.log.append(f"shutdown {self.name}")


def _maker(log: list[str], delay: float = 0.0, fail_first: bool = False) -> Any:
    made = iter(range(100))

    def make() -> _Proc:
        n = next(made)
        time.sleep(delay)
        if fail_first and n == 0:
            log.append("start failed")
            raise RuntimeError("no CUDA context")
        log.append(f"made {n} on {threading.current_thread().name}")
        return _Proc(log, str(n))
    return make


def test_a_start_ahead_runs_in_the_background_and_the_first_use_takes_it() -> None:
    log: list[str] = []
    p = Prestartable(_maker(log, delay=0.2))
    t0 = time.monotonic()
    p.start_ahead()
    assert time.monotonic() - t0 < 0.1            # did not wait for the start
    first = p.get()
    assert p.get() is first and first.name == "0"
    assert log == ["made 0 on convdoctor-prestart"]
    p.shutdown()
    assert log[-1] == "shutdown 0"


def test_without_a_start_ahead_the_first_use_starts_it() -> None:
    log: list[str] = []
    p = Prestartable(_maker(log))
    assert p.get().name == "0" and log == ["made 0 on MainThread"]


def test_a_failed_start_ahead_is_retried_on_first_use() -> None:
    log: list[str] = []
    p = Prestartable(_maker(log, fail_first=True))
    p.start_ahead()
    assert p.get().name == "1"
    assert log == ["start failed", "made 1 on MainThread"]


def test_a_shutdown_does_not_wait_for_a_start_under_way_and_that_start_ends_its_process() -> None:
    log: list[str] = []
    p = Prestartable(_maker(log, delay=0.3))
    p.start_ahead()
    t0 = time.monotonic()
    p.shutdown()
    assert time.monotonic() - t0 < 0.1
    deadline = time.monotonic() + 5
    while "shutdown 0" not in log and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log == ["made 0 on convdoctor-prestart", "shutdown 0"]


def test_a_restart_after_a_shutdown_leaks_no_process() -> None:
    """shutdown during a start, then a new start: the stale start shuts its own process down and
    the new one is taken."""
    log: list[str] = []
    p = Prestartable(_maker(log, delay=0.3))
    p.start_ahead()
    p.shutdown()
    p.start_ahead()
    got = p.get()
    deadline = time.monotonic() + 5
    while "shutdown 0" not in log and time.monotonic() < deadline:
        time.sleep(0.02)
    assert got.name == "1" and "shutdown 0" in log and "shutdown 1" not in log
