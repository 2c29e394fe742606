"""A synthetic timer for `measure.steps` (imported by path; not a test module): time moves only
when a step says what it costs (`advance`) and, with `tick`, by a fixed amount per reading. Steps
then measure exactly what the test says they cost, however loaded the machine running it is."""

from __future__ import annotations

from typing import Any

from convdoctor.measure import steps as _steps


class FakeClock:
    def __init__(self, tick: float = 0.0) -> None:
        self.t = 1000.0
        self.tick = tick

    def _read(self) -> float:
        self.t += self.tick
        return self.t

    def perf_counter(self) -> float:
        return self._read()

    def process_time(self) -> float:
        return self._read()

    def monotonic(self) -> float:
        return self._read()

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def __deepcopy__(self, memo: dict[int, Any]) -> FakeClock:
        return self  # a copied model keeps reading the one clock


def use_clock(monkeypatch: Any, clock: FakeClock) -> FakeClock:
    """Make `measure.steps` (every end-to-end timing of `optimize`) read `clock`."""
    monkeypatch.setattr(_steps, "time", clock)
    return clock
