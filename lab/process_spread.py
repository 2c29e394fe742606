"""How much does the SAME stock eager step vary from one fresh process to the next? (`optimize`'s
"never slower than the best eager mode" comparisons are across processes.)

Starts RT_PROCS (default 3) rounds of fresh processes, pinned to the same cores as
benchmarks/bench_optimize.py (the first 4), each timing one config's stock PyTorch step
(cudnn.benchmark=False): wall ms per step (device-synchronized), host CPU ms to issue it, CUDA-event
ms, and NVML SM clock + clock-event reasons before and after. Variant "import" first imports
convdoctor's cuDNN frontend (and creates its handle) to see whether that alone changes anything.
Writes $OUT/process_spread.json; prints one line per process and a summary.

    OUT=/tmp/o PYTHONPATH=src python lab/process_spread.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = os.environ.get("RT_SPREAD_CONFIGS", "speech_fp32:train,unet3d_fp32:inference").split(",")


def child(cfg_name: str, mode: str, variant: str) -> dict:
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    if variant == "import":
        from convdoctor.engines.cudnn_enum import get_handle
        get_handle(0)
    from bench_optimize import CONFIGS as C  # noqa: N811
    from bench_optimize import build

    from convdoctor.measure.nvml import NvmlClock
    from convdoctor.measure.steps import make_step

    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    clk = NvmlClock(0)
    model, x = build(C[cfg_name], "cuda")
    train = mode == "train"
    if not train:
        model.eval()
    step = make_step(model, x, train, with_optimizer=train)
    for _ in range(6):
        step()
    torch.cuda.synchronize()
    before = clk.read()
    wall, cpu, ev = [], [], []
    for _ in range(40):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        c0 = time.process_time()
        t0 = time.perf_counter()
        e0.record()
        step()
        e1.record()
        c1 = time.process_time()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((c1 - c0) * 1e3)
        ev.append(e0.elapsed_time(e1))
    after = clk.read()

    def rd(r):  # noqa: ANN001, ANN202
        return None if r is None else {"sm_mhz": r.sm_clock_mhz, "slowdown": r.slowdown,
                                       "reasons": getattr(r, "reasons", None)}
    return {"config": cfg_name, "mode": mode, "variant": variant,
            "wall_ms": statistics.median(wall), "issue_cpu_ms": statistics.median(cpu),
            "event_ms": statistics.median(ev), "event_min_ms": min(ev),
            "clock_before": rd(before), "clock_after": rd(after), "pid": os.getpid()}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], sys.argv[4])))
        return 0
    out = Path(os.environ.get("OUT") or "spread_out")
    out.mkdir(parents=True, exist_ok=True)
    procs = int(os.environ.get("RT_PROCS", "3"))
    try:
        cores = sorted(os.sched_getaffinity(0))[:4]
    except AttributeError:
        cores = None
    rows = []
    for rnd in range(procs):
        for spec in CONFIGS:
            cfg, mode = spec.split(":")
            for variant in (("stock", "import") if rnd % 2 == 0 else ("import", "stock")):
                p = subprocess.run([sys.executable, __file__, "--child", cfg, mode, variant],
                                   capture_output=True, text=True, timeout=300,
                                   preexec_fn=(lambda: os.sched_setaffinity(0, cores))
                                   if cores else None)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                row = json.loads(line[-1]) if line else {"config": cfg, "mode": mode,
                                                           "variant": variant,
                                                           "error": p.stderr[-800:]}
                row["round"] = rnd
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = {}
    for spec in CONFIGS:
        cfg, mode = spec.split(":")
        for variant in ("stock", "import"):
            w = [r["wall_ms"] for r in rows if r.get("config") == cfg and r.get("mode") == mode
                 and r.get("variant") == variant and "wall_ms" in r]
            if w:
                summary[f"{cfg}:{mode}:{variant}"] = {
                    "wall_ms": w, "min": min(w), "max": max(w),
                    "spread": (max(w) - min(w)) / min(w)}
    (out / "process_spread.json").write_text(json.dumps({"rows": rows, "summary": summary},
                                                        indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
