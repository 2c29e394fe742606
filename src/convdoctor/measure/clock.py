"""A reading of the device clock while a sample was taken."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClockReading:
    """The device clock while a sample was taken (NVML on a GPU, CPU share on the host)."""

    sm_clock_mhz: float | None
    max_sm_clock_mhz: float | None
    reasons: int
    slowdown: bool
