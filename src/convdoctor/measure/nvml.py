"""NVML clock watching: SM clock, its maximum, and the clock-event (throttle) reasons. Never raises.

`NvmlClock(device).read()` returns a `ClockReading` (convdoctor.tune.backend) or None when NVML is
unavailable. `slowdown` is True when any power, thermal or software slowdown bit is set, the cases in
which a sample must be discarded. Bit values are NVML's (nvml.h, `nvmlClocksEventReason*`, formerly
`nvmlClocksThrottleReason*`); the function is `nvmlDeviceGetCurrentClocksEventReasons` on recent
drivers/bindings, `nvmlDeviceGetCurrentClocksThrottleReasons` before.
"""

from __future__ import annotations

from typing import Any

# nvml.h clock-event reason bits
GPU_IDLE = 0x1
APPLICATIONS_CLOCKS_SETTING = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
DISPLAY_CLOCK_SETTING = 0x100

REASON_NAMES = {
    GPU_IDLE: "gpu_idle", APPLICATIONS_CLOCKS_SETTING: "applications_clocks",
    SW_POWER_CAP: "sw_power_cap", HW_SLOWDOWN: "hw_slowdown", SYNC_BOOST: "sync_boost",
    SW_THERMAL_SLOWDOWN: "sw_thermal", HW_THERMAL_SLOWDOWN: "hw_thermal",
    HW_POWER_BRAKE_SLOWDOWN: "hw_power_brake", DISPLAY_CLOCK_SETTING: "display_clock",
}
# Power, thermal and software slowdowns: a sample taken under any of these is not representative.
SLOWDOWN_MASK = (SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN
                 | HW_POWER_BRAKE_SLOWDOWN)


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in sorted(REASON_NAMES.items()) if bits & bit]


def is_slowdown(bits: int, mask: int = SLOWDOWN_MASK) -> bool:
    return bool(bits & mask)


class NvmlClock:
    """Reads one GPU's clocks through NVML; `ok` is False (and read() None) when NVML fails."""

    def __init__(self, device: int | None = None, *, mask: int = SLOWDOWN_MASK,
                 nvml: Any = None) -> None:
        self.mask = mask
        self.ok = False
        self.error = ""
        self._nv = nvml
        self._h: Any = None
        self._max: float | None = None
        self._reasons_fn: Any = None
        try:
            if self._nv is None:
                import pynvml

                self._nv = pynvml
            self._nv.nvmlInit()
            self._h = self._find_handle(device)
            fn = getattr(self._nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            self._reasons_fn = fn or self._nv.nvmlDeviceGetCurrentClocksThrottleReasons
            try:
                self._max = float(self._nv.nvmlDeviceGetMaxClockInfo(self._h,
                                                                     self._nv.NVML_CLOCK_SM))
            except Exception:  # noqa: BLE001
                self._max = None
            self.ok = True
        except Exception as exc:  # noqa: BLE001 - NVML missing, no driver, no permission
            self.error = f"{type(exc).__name__}: {exc}"
            self.ok = False

    def _find_handle(self, device: int | None) -> Any:
        """NVML handle of the CUDA device (by UUID, then PCI bus id; NVML and CUDA order differ
        when CUDA_VISIBLE_DEVICES is set)."""
        nv = self._nv
        try:
            import torch

            dev = torch.cuda.current_device() if device is None else int(device)
            props = torch.cuda.get_device_properties(dev)
            uuid = getattr(props, "uuid", None)
            if uuid is not None:
                text = str(uuid)
                text = text if text.startswith("GPU-") else "GPU-" + text
                for arg in (text, text.encode()):  # older bindings want bytes
                    try:
                        return nv.nvmlDeviceGetHandleByUUID(arg)
                    except Exception:  # noqa: BLE001
                        pass
            bus = getattr(props, "pci_bus_id", None)
            dom = getattr(props, "pci_domain_id", 0) or 0
            devid = getattr(props, "pci_device_id", None)
            if bus is not None and devid is not None:
                bus_id = f"{dom:08x}:{bus:02x}:{devid:02x}.0"
                for arg in (bus_id, bus_id.encode()):
                    try:
                        return nv.nvmlDeviceGetHandleByPciBusId(arg)
                    except Exception:  # noqa: BLE001
                        pass
        except Exception:  # noqa: BLE001
            dev = device or 0
        return nv.nvmlDeviceGetHandleByIndex(int(device or 0))

    def read(self) -> Any:
        """A ClockReading, or None when NVML is unavailable or the query failed."""
        if not self.ok:
            return None
        from .clock import ClockReading

        try:
            sm = float(self._nv.nvmlDeviceGetClockInfo(self._h, self._nv.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001
            sm = None
        try:
            bits = int(self._reasons_fn(self._h))
        except Exception:  # noqa: BLE001
            bits = 0
        return ClockReading(sm_clock_mhz=sm, max_sm_clock_mhz=self._max, reasons=bits,
                            slowdown=is_slowdown(bits, self.mask))

    def describe(self) -> dict[str, Any]:
        r = self.read()
        if r is None:
            return {"nvml": False, "error": self.error}
        return {"nvml": True, "sm_clock_mhz": r.sm_clock_mhz, "max_sm_clock_mhz":
                r.max_sm_clock_mhz, "reasons": reason_names(r.reasons), "slowdown": r.slowdown}

    def driver_version(self) -> str | None:
        if not self.ok:
            return None
        try:
            v = self._nv.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        except Exception:  # noqa: BLE001
            return None
