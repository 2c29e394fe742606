"""Where does an optimized model lose time? (issue 6: ResNet-50 bf16 channels_last and the speech
front end trained slower under convdoctor than eager in separate processes.)

In ONE process, for each config, the stock eager model (A) and convdoctor-optimized copies are timed
interleaved (A, B, A, B, ...), so process-to-process differences cannot pose as a convdoctor cost:
  B: optimize(tune_missing=False, db=False)       - routes = PyTorch's path, no tuning worker
  C: optimize(tune_missing=True, time-limited)    - with a tuning worker process, as users run it
Between phases it records the process state (threads, child processes, CUDA memory, allocator
retries, SM clock), and a host-side check (CPU time per step vs wall time per step).
Writes $OUT/runtime_diag.json; prints a summary last.

    OUT=/tmp/o PYTHONPATH=src:/tmp/site python scripts/gpu/runtime_diag.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from convdoctor.runtime import optimizer as opt  # noqa: E402
from convdoctor.runtime.timing import make_step  # noqa: E402

OUT = Path(os.environ.get("OUT") or "diag_out")
OUT.mkdir(parents=True, exist_ok=True)
STEPS = int(os.environ.get("DIAG_STEPS", "30"))
CONFIGS = os.environ.get("DIAG_CONFIGS", "resnet50_bf16_cl,speech_fp32").split(",")


def state() -> dict[str, Any]:
    kids = []
    try:
        me = str(os.getpid())
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    st = Path(f"/proc/{d}/stat").read_text().split()
                    if st[3] == me:
                        kids.append(int(d))
                except OSError:
                    pass
    except OSError:
        pass
    ms = torch.cuda.memory_stats()
    clock = None
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        clock = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001
        pass
    return {"threads": len(os.listdir("/proc/self/task")), "children": kids,
            "allocated_mb": torch.cuda.memory_allocated() / 2**20,
            "reserved_mb": torch.cuda.memory_reserved() / 2**20,
            "alloc_retries": ms.get("num_alloc_retries", 0),
            "cuda_mallocs": ms.get("segment.all.allocated", 0), "sm_clock_mhz": clock,
            "benchmark": torch.backends.cudnn.benchmark,
            "deterministic": torch.backends.cudnn.deterministic,
            "allow_tf32": torch.backends.cudnn.allow_tf32,
            "grad_mode": torch.is_grad_enabled(),
            "anomaly": torch.is_anomaly_enabled()}


def timed(steps: dict[str, Any], rounds: int = 5, per: int | None = None) -> dict[str, Any]:
    per = per or max(2, STEPS // rounds)
    wall: dict[str, list[float]] = {k: [] for k in steps}
    cpu: dict[str, list[float]] = {k: [] for k in steps}
    for fn in steps.values():
        fn()
        fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for k, fn in steps.items():
            for _ in range(per):
                c0 = time.process_time()
                t0 = time.perf_counter()
                fn()
                c1 = time.process_time()   # host time to issue the step (before the sync)
                torch.cuda.synchronize()
                wall[k].append((time.perf_counter() - t0) * 1e3)
                cpu[k].append((c1 - c0) * 1e3)
    return {k: {"ms": statistics.median(v), "min_ms": min(v), "issue_cpu_ms":
                statistics.median(cpu[k]), "samples": [round(x, 3) for x in v]}
            for k, v in wall.items()}


def main() -> int:
    from bench_optimize import CONFIGS as CFG
    from bench_optimize import build

    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    res: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                           "steps": STEPS, "configs": {}}
    path = OUT / "runtime_diag.json"
    db = str(Path(tempfile.mkdtemp()) / "diag.sqlite3")
    summary = []
    for name in CONFIGS:
        cfg = CFG[name]
        r: dict[str, Any] = {"phases": []}
        res["configs"][name] = r
        a, x = build(cfg, "cuda")
        sa = make_step(a, x, True, with_optimizer=True)
        r["phases"].append({"phase": "start", "state": state(), "t": timed({"A": sa})})
        b, _ = build(cfg, "cuda")
        t0 = time.monotonic()
        opt.optimize(b, x, train=True, db=False, tune_missing=False, backend="cuda", steps=10)
        rep = opt.report_of(b)
        r["B_report"] = {"s": time.monotonic() - t0, "cl": rep.channels_last_reason,
                         "routing": rep.routing_reason, "notes": rep.notes[:5]}
        sb = make_step(b, x, True, with_optimizer=True)
        r["phases"].append({"phase": "after optimize B (no tuning)", "state": state(),
                            "t": timed({"A": sa, "B": sb})})
        c, _ = build(cfg, "cuda")
        t0 = time.monotonic()
        opt.optimize(c, x, train=True, db=db, tune_missing=True, backend="cuda", steps=10,
                     budget_s=0.2, tune_time_limit_s=float(os.environ.get("DIAG_TUNE_S", "40")))
        rep = opt.report_of(c)
        r["C_report"] = {"s": time.monotonic() - t0, "cl": rep.channels_last_reason,
                         "routing": rep.routing_reason, "tuned": rep.tuned,
                         "notes": rep.notes[:5]}
        sc = make_step(c, x, True, with_optimizer=True)
        r["phases"].append({"phase": "after optimize C (tuned)", "state": state(),
                            "t": timed({"A": sa, "B": sb, "C": sc})})
        # A fresh stock model built now: does the process itself get slower?
        a2, _ = build(cfg, "cuda")
        sa2 = make_step(a2, x, True, with_optimizer=True)
        opt.restore(c)
        r["phases"].append({"phase": "fresh stock A2, C restored", "state": state(),
                            "t": timed({"A": sa, "A2": sa2, "C_restored": sc})})
        path.write_text(json.dumps(res, indent=1, default=str))
        for ph in r["phases"]:
            summary.append(f"{name:18} {ph['phase']:32} " + "  ".join(
                f"{k} {v['ms']:.2f} ms (cpu {v['issue_cpu_ms']:.2f})" for k, v in ph["t"].items())
                + f"  | thr {ph['state']['threads']} kids {len(ph['state']['children'])}"
                f" retries {ph['state']['alloc_retries']} clk {ph['state']['sm_clock_mhz']}")
        del a, b, c, a2, sa, sb, sc, sa2
        torch.cuda.empty_cache()
    path.write_text(json.dumps(res, indent=1, default=str))
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
