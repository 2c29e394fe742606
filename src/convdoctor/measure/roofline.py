"""The device's roofline, measured: peak FLOP/s of a large matmul in the problem's dtype and math
mode, and peak bandwidth of a device-to-device copy. Measured once per device (and process), cached
in memory and in a JSON file in the user cache dir keyed by GPU, driver and torch version.

`percent_of_roofline(flops, bytes, seconds, peak_flops, peak_bw)` is pure: attainable FLOP/s at the
problem's arithmetic intensity is min(peak_flops, intensity * peak_bw); the result says which bound
applies and how close the measured time comes to it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from .timing import best_event_s

_MEM: dict[str, Peaks] = {}


@dataclass(frozen=True)
class Peaks:
    device: str
    flops: dict[str, float]       # "float32/tf32", "float32/strict", "float16", "bfloat16" -> FLOP/s
    bandwidth: float              # bytes/s (read + write of a device-to-device copy)
    method: str = "matmul 8192^3 (fp32 strict 4096^3) best of 5; copy 1 GiB best of 5"


def math_key(dtype: str, math: str) -> str:
    return f"float32/{math}" if dtype == "float32" else dtype


def percent_of_roofline(flops: float, nbytes: float, seconds: float, peak_flops: float,
                        peak_bw: float) -> dict[str, Any]:
    """How close `seconds` comes to the roofline for work of `flops` moving at least `nbytes`."""
    if seconds <= 0 or peak_flops <= 0 or peak_bw <= 0:
        return {"percent": None, "bound": None, "achieved_flops": None,
                "attainable_flops": None, "intensity": None}
    intensity = flops / nbytes if nbytes > 0 else float("inf")
    attainable = min(peak_flops, intensity * peak_bw)
    achieved = flops / seconds
    return {
        "percent": 100.0 * achieved / attainable,
        "bound": "compute" if peak_flops <= intensity * peak_bw else "memory",
        "achieved_flops": achieved,
        "attainable_flops": attainable,
        "intensity": intensity,
    }


def _cache_file() -> Path:
    from ..settings import current

    base = current().cache_dir
    if base:
        return Path(base) / "roofline.json"
    try:
        from platformdirs import user_cache_dir

        return Path(user_cache_dir("convdoctor")) / "roofline.json"
    except Exception:  # noqa: BLE001
        return Path.home() / ".cache" / "convdoctor" / "roofline.json"


def _device_id(device: int) -> str:
    import torch

    props = torch.cuda.get_device_properties(device)
    driver = ""
    try:
        from .nvml import NvmlClock

        driver = NvmlClock(device).driver_version() or ""
    except Exception:  # noqa: BLE001
        pass
    return (f"{props.name}|sm{props.multi_processor_count}|cc{props.major}.{props.minor}|"
            f"drv{driver}|torch{torch.__version__}")


def measure_peaks(device: int | None = None) -> Peaks:
    """Run the matmuls and the copy now (a few seconds on an H100)."""
    import torch

    dev = torch.cuda.current_device() if device is None else int(device)
    flops: dict[str, float] = {}
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        with torch.cuda.device(dev):
            for key, dt, tf32, n in (("float32/tf32", torch.float32, True, 8192),
                                     ("float32/strict", torch.float32, False, 4096),
                                     ("float16", torch.float16, False, 8192),
                                     ("bfloat16", torch.bfloat16, False, 8192)):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                a = torch.randn(n, n, device=dev, dtype=dt)
                b = torch.randn(n, n, device=dev, dtype=dt)
                # cast: mypy cannot infer a lambda whose parameters have defaults
                t = best_event_s(cast("Callable[[], Any]", lambda a=a, b=b: torch.mm(a, b)))
                flops[key] = 2.0 * n ** 3 / t
                del a, b
            nbytes = 1 << 30
            src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            t = best_event_s(lambda: dst.copy_(src))
            bw = 2.0 * nbytes / t

    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return Peaks(device=_device_id(dev), flops=flops, bandwidth=bw)


def peaks(device: int | None = None, *, use_file: bool = True) -> Peaks:
    """Peaks for the device: memory cache, then the cache file, else measured (and saved)."""
    import torch

    dev = torch.cuda.current_device() if device is None else int(device)
    ident = _device_id(dev)
    hit = _MEM.get(ident)
    if hit is not None:
        return hit
    path = _cache_file()
    data: dict[str, Any] = {}
    if use_file:
        try:
            data = json.loads(path.read_text())
            rec = data.get(ident)
            if rec:
                p = Peaks(device=ident, flops={k: float(v) for k, v in rec["flops"].items()},
                          bandwidth=float(rec["bandwidth"]), method=str(rec.get("method", "")))
                _MEM[ident] = p
                return p
        except Exception:  # noqa: BLE001 - missing or corrupt cache: measure again
            data = {}
    p = measure_peaks(dev)
    _MEM[ident] = p
    if use_file:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            data[ident] = asdict(p)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, path)
        except OSError:
            pass
    return p


def roofline_for(problem: Any, seconds: float, pk: Peaks) -> dict[str, Any]:
    """% of roofline of a measured time for a ConvProblem (FLOPs and minimum bytes moved)."""
    key = math_key(problem.dtype, problem.math)
    return percent_of_roofline(float(problem.flops()), float(problem.min_bytes()), seconds,
                               pk.flops.get(key, 0.0), pk.bandwidth)
