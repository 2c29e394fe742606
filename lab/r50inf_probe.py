"""Eager step vs CUDA-graph replay of ResNet-50 fp32 (TF32) inference: where does the step's time
go? In ONE process (cudnn.benchmark from PROBE_BENCH, 0 or 1), for NCHW and channels_last: the
stock eager step and a CUDA-graph replay of the same model (convdoctor's GraphedForward), timed
interleaved in rounds (wall per step and host CPU to issue it), the SM clock, power and clock-event
reasons read by NVML each round, and the GPU kernel time of one step (torch.profiler, summed over
kernels, top kernels by name) for eager and graphed. Writes $OUT/r50inf_probe_bench{0,1}.json and
prints a summary.

    OUT=/tmp/o PROBE_BENCH=0 PYTHONPATH=src python lab/r50inf_probe.py
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from convdoctor import zoo  # noqa: E402
from convdoctor.measure.steps import make_step  # noqa: E402
from convdoctor.runtime import graphs as _graphs  # noqa: E402

OUT = Path(os.environ.get("OUT") or "probe_out")
OUT.mkdir(parents=True, exist_ok=True)
BENCH = os.environ.get("PROBE_BENCH", "0") == "1"
ROUNDS = int(os.environ.get("PROBE_ROUNDS", "6"))
PER = int(os.environ.get("PROBE_PER", "10"))


def nvml() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)

        def read() -> dict[str, Any]:
            return {"sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    "reasons": int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))}
        return read
    except Exception as exc:  # noqa: BLE001
        print("nvml:", exc)
        return lambda: {}


def kernel_time(fn: Any, n: int = 3) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    by: dict[str, float] = {}
    for e in prof.events():
        dt = getattr(e, "device_time", None) or getattr(e, "cuda_time", 0) or 0
        if e.device_type.name == "CUDA" and dt:
            by[e.name] = by.get(e.name, 0.0) + dt / 1e3 / n
    top = sorted(by.items(), key=lambda kv: -kv[1])[:12]
    return {"kernel_ms": sum(by.values()), "kernels": len(by),
            "top": [(k[:90], round(v, 4)) for k, v in top]}


def main() -> None:
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.benchmark = BENCH
    read = nvml()
    res: dict[str, Any] = {"benchmark": BENCH, "affinity": sorted(os.sched_getaffinity(0))}
    for layout in ("nchw", "cl"):
        torch.manual_seed(0)
        m = zoo.get("resnet50").cuda().eval()
        x = torch.randn(32, 3, 224, 224, device="cuda")
        if layout == "cl":
            m = m.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        g_m = copy.deepcopy(m)
        eager = make_step(m, x, False)
        for _ in range(3):
            eager()
        torch.cuda.synchronize()
        g = _graphs.install(g_m, (x,), False)
        graphed = make_step(g_m, x, False)
        steps = {"eager": eager, "graphed": graphed}
        wall: dict[str, list[float]] = {k: [] for k in steps}
        host: dict[str, list[float]] = {k: [] for k in steps}
        clocks: dict[str, list[Any]] = {k: [] for k in steps}
        for fn in steps.values():
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        for r in range(ROUNDS):
            for k in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
                fn = steps[k]
                for i in range(PER):
                    c0, t0 = time.process_time(), time.perf_counter()
                    fn()
                    c1 = time.process_time()
                    if i == PER // 2:
                        clocks[k].append(read())
                    torch.cuda.synchronize()
                    wall[k].append((time.perf_counter() - t0) * 1e3)
                    host[k].append((c1 - c0) * 1e3)
        # back to back without a sync per step: the GPU-bound rate
        b2b: dict[str, float] = {}
        for k, fn in steps.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(30):
                fn()
            torch.cuda.synchronize()
            b2b[k] = (time.perf_counter() - t0) * 1e3 / 30
        kt = {k: kernel_time(fn) for k, fn in steps.items()}
        res[layout] = {
            k: {"ms": statistics.median(wall[k]), "min_ms": min(wall[k]),
                "host_ms": statistics.median(host[k]), "b2b_ms": b2b[k],
                "samples_ms": [round(v, 3) for v in wall[k]], "clocks": clocks[k], **kt[k]}
            for k in steps}
        res[layout]["graph_replays"] = g.replays
        del m, g_m, g, steps, eager, graphed
        torch.cuda.empty_cache()
    name = f"r50inf_probe_bench{int(BENCH)}.json"
    (OUT / name).write_text(json.dumps(res, indent=1))
    print(f"== benchmark={BENCH} affinity={res['affinity']}")
    for layout in ("nchw", "cl"):
        for k in ("eager", "graphed"):
            r = res[layout][k]
            ck = [c.get("sm_mhz") for c in r["clocks"]]
            pw = [round(c.get("power_w", 0)) for c in r["clocks"]]
            print(f"{layout:5s} {k:8s} median {r['ms']:.3f} min {r['min_ms']:.3f} host "
                  f"{r['host_ms']:.3f} b2b {r['b2b_ms']:.3f} kernels {r['kernel_ms']:.3f} ms "
                  f"({r['kernels']} names) sm {ck} W {pw}")
        for k in ("eager", "graphed"):
            print(f"  {layout} {k} top:", res[layout][k]["top"][:6])


if __name__ == "__main__":
    main()
