"""GPU end-to-end run of convdoctor.optimize (H100): per-call overhead, then ResNet-50 fp32 (TF32),
ResNet-50 bf16 channels_last, the speech front end and a 3D U-Net, training and inference, against
PyTorch eager (heuristics, cudnn.benchmark=True) and torch.compile(max-autotune) for the models in
RT_COMPILE (e.g. speech_frontend; off by default to fit the time budget); then time to first step
with a warm database vs benchmark=True. Each variant runs in its own process (PyTorch's cuDNN choice
cache ignores the benchmark flag), every child pinned to the same cores (RT_CPUS: a count, default
4 = the first 4 available cores, a list like 0-3, or 'off'). The convdoctor process also times a
stock eager twin (heuristics) interleaved with the optimized model (RT_ROUNDS rounds, default 5):
the fair heuristic baseline, since these steps are often host-bound and host-bound steps time
differently from process to process. RT_REPEATS=2 runs the eager and convdoctor processes twice in
alternating order and reports medians and spreads (adds roughly a minute on the H100; default 1).
RT_VARIANTS picks variants (e.g. eager_heuristic,compile), RT_TOTAL_S stops every variant by
that many seconds (a stopped variant keeps the slots it finished), RT_DB names the tuning database
(default: $OUT/tuning.sqlite3). RT_FIRST_STEP=0 skips the ResNet-50 time-to-first-step run,
RT_OVERHEAD=0 the per-call overhead.
Writes $OUT/runtime_bench.json and $OUT/runtime_e2e.log; prints the table last. Run from the repo
root:

    OUT=/tmp/out PYTHONPATH=src:/tmp/site python scripts/gpu/runtime_e2e.py
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
out = os.environ.get("OUT") or "runtime_out"
sys.argv = [str(ROOT / "benchmarks" / "bench_optimize.py"), "--device", "cuda", "--out", out,
            "--steps", os.environ.get("RT_STEPS", "20"),
            "--budget", os.environ.get("RT_BUDGET", "0.2"),
            "--time-budget", os.environ.get("RT_TIME_BUDGET", "120"),
            "--variant-timeout", os.environ.get("RT_VARIANT_TIMEOUT", "240"),
            "--configs", os.environ.get("RT_CONFIGS",
                                        "resnet50_fp32,resnet50_bf16_cl,speech_fp32,unet3d_fp32"),
            "--compile", os.environ.get("RT_COMPILE", ""),
            "--cpus", os.environ.get("RT_CPUS", "4"),
            "--repeats", os.environ.get("RT_REPEATS", "1"),
            "--rounds", os.environ.get("RT_ROUNDS", "5")]
if os.environ.get("RT_DB"):
    sys.argv += ["--db", os.environ["RT_DB"]]
if os.environ.get("RT_FIRST_STEP", "1") == "0":
    sys.argv.append("--skip-first-step")
if os.environ.get("RT_OVERHEAD", "1") == "0":
    sys.argv.append("--skip-overhead")
runpy.run_path(sys.argv[0], run_name="__main__")
