"""A synthetic timer for `measure.steps` (imported by path; not a test module): time moves only
when a step says what it costs (`advance`) and, with `tick`, by a fixed amount per reading. Steps
then measure exactly what the test says they cost, however loaded the machine running it is.
`Costed` is a one-convolution model whose steps cost what the test says."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from convdoctor.measure import steps as _steps
from convdoctor.runtime import site as S


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



class Costed(nn.Module):
    """One convolution whose step costs what `costs` says for what runs it: "given" (no routed
    forward: the copy made before any change, or a model routing left), "routed" (the routed
    forward on), "unrouted" (installed, off: PyTorch's path while verify times it)."""

    def __init__(self, clock: FakeClock, costs: dict[str, float], ch: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, ch, 3, padding=1)
        self.clock, self.costs = clock, costs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        site = S.site_of(self.conv)
        kind = "given" if site is None else "routed" if site.enabled else "unrouted"
        self.clock.advance(self.costs[kind] * 1e-3)
        return self.conv(x)
