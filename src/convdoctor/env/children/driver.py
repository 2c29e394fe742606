"""Child: the NVIDIA driver and GPUs as NVML and libcuda.so.1 see them. Prints one JSON object."""

import ctypes
import json
import sys


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def nvml_facts():
    out = {"ok": False}
    try:
        import pynvml as N
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"nvidia-ml-py not importable: {exc}"
        return out
    try:
        N.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        out["error"] = str(exc) or type(exc).__name__
        return out
    out["ok"] = True
    try:
        out["driver_version"] = _s(N.nvmlSystemGetDriverVersion())
    except Exception as exc:  # noqa: BLE001
        out["driver_version_error"] = str(exc)
    try:
        out["cuda_driver_version"] = int(N.nvmlSystemGetCudaDriverVersion())
    except Exception as exc:  # noqa: BLE001
        out["cuda_driver_version_error"] = str(exc)
    devices = []
    try:
        count = N.nvmlDeviceGetCount()
    except Exception as exc:  # noqa: BLE001
        out["device_count_error"] = str(exc)
        count = 0
    for i in range(count):
        d = {"index": i}
        try:
            h = N.nvmlDeviceGetHandleByIndex(i)
        except Exception as exc:  # noqa: BLE001
            d["error"] = str(exc)
            devices.append(d)
            continue
        for key, fn in (
            ("name", lambda h: _s(N.nvmlDeviceGetName(h))),
            ("uuid", lambda h: _s(N.nvmlDeviceGetUUID(h))),
            ("pci_bus_id", lambda h: _s(N.nvmlDeviceGetPciInfo(h).busId)),
            ("cc", lambda h: "{}.{}".format(*N.nvmlDeviceGetCudaComputeCapability(h))),
            ("memory_total_mib", lambda h: int(N.nvmlDeviceGetMemoryInfo(h).total) // (1 << 20)),
            ("memory_used_mib", lambda h: int(N.nvmlDeviceGetMemoryInfo(h).used) // (1 << 20)),
            ("sm_clock_mhz", lambda h: int(N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM))),
            ("sm_clock_max_mhz", lambda h: int(N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM))),
            ("temperature_c", lambda h: int(N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU))),
            ("power_w", lambda h: round(N.nvmlDeviceGetPowerUsage(h) / 1000.0, 1)),
            ("clock_event_mask", lambda h: int(getattr(N, "nvmlDeviceGetCurrentClocksEventReasons",
                                                     getattr(N, "nvmlDeviceGetCurrentClocksThrottleReasons", None))(h))),
            ("ecc_uncorrected_volatile", lambda h: int(N.nvmlDeviceGetTotalEccErrors(
                h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC))),
        ):
            try:
                d[key] = fn(h)
            except Exception as exc:  # noqa: BLE001 - e.g. NotSupported on consumer GPUs
                d.setdefault("unavailable", {})[key] = str(exc) or type(exc).__name__
        devices.append(d)
    out["devices"] = devices
    try:
        N.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass
    return out


def libcuda_facts():
    out = {"ok": False}
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        out["error"] = str(exc)
        return out
    v = ctypes.c_int(0)
    try:
        rc = lib.cuDriverGetVersion(ctypes.byref(v))
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"cuDriverGetVersion: {exc}"
        return out
    out["ok"] = rc == 0
    out["rc"] = rc
    out["cuda_driver_version"] = v.value
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "/libcuda.so" in parts[-1]:
                    out["path"] = parts[-1]
                    break
    except OSError:
        pass
    return out


if __name__ == "__main__":
    json.dump({"nvml": nvml_facts(), "libcuda": libcuda_facts()}, sys.stdout)
