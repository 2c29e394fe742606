"""NVML clock readings (`convdoctor.measure.nvml`) against a fake NVML: which throttle reasons
count as a slowdown, old and new API names, and never an exception."""

from __future__ import annotations

import pytest

from convdoctor.measure import nvml


class FakeNvml:
    NVML_CLOCK_SM = 1

    def __init__(self, reasons: int, new_api: bool = True, fail_init: bool = False) -> None:
        self.reasons = reasons
        self.fail_init = fail_init
        if new_api:
            self.nvmlDeviceGetCurrentClocksEventReasons = lambda h: self.reasons

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetHandleByUUID(self, u: str) -> str:
        return "hu"

    def nvmlDeviceGetClockInfo(self, h, clk) -> int:
        return 1755

    def nvmlDeviceGetMaxClockInfo(self, h, clk) -> int:
        return 1980

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h) -> int:
        return self.reasons

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.65.06"


@pytest.mark.parametrize("bits,slow", [(0, False), (nvml.GPU_IDLE, False),
                                       (nvml.SW_POWER_CAP, True), (nvml.HW_THERMAL_SLOWDOWN, True),
                                       (nvml.SW_THERMAL_SLOWDOWN | nvml.GPU_IDLE, True),
                                       (nvml.HW_POWER_BRAKE_SLOWDOWN, True),
                                       (nvml.SYNC_BOOST, False)])
def test_nvml_slowdown_bits(bits: int, slow: bool) -> None:
    for new in (True, False):
        r = nvml.NvmlClock(0, nvml=FakeNvml(bits, new_api=new)).read()
        assert r.slowdown is slow and r.reasons == bits
        assert r.sm_clock_mhz == 1755 and r.max_sm_clock_mhz == 1980


def test_nvml_never_raises() -> None:
    c = nvml.NvmlClock(0, nvml=FakeNvml(0, fail_init=True))
    assert not c.ok and c.read() is None and "NVML" in c.error
    assert c.describe()["nvml"] is False
    broken = FakeNvml(0)
    broken.nvmlDeviceGetCurrentClocksEventReasons = lambda h: (_ for _ in ()).throw(OSError())
    r = nvml.NvmlClock(0, nvml=broken).read()
    assert r is not None and r.reasons == 0
    assert nvml.reason_names(nvml.SW_POWER_CAP | nvml.GPU_IDLE) == ["gpu_idle", "sw_power_cap"]
    assert nvml.NvmlClock(0, nvml=FakeNvml(0)).driver_version() == "580.65.06"
