"""Benchmark: explain a ~1 GB synthetic training log (noise + one real failure) on this CPU.

Generates /tmp/convdoctor_bench_1g.log once (reused if present with the right size), then runs
`convdoctor explain --file` in a fresh process and reports wall time, peak RSS (of the process and
its scan workers) and the diagnosed cause. Usage:

    python benchmarks/bench_explain.py [--size-mb 1024] [--path /tmp/x.log] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time

NOISE_TEMPLATES = (
    "2024-05-01 12:{m:02d}:{s:02d},{ms:03d} INFO train.py:211 epoch {e} step {i} loss {loss:.4f} lr {lr:.2e} "
    "throughput {tp} img/s grad_norm {g:.3f} data_time {dt:.3f}s",
    "2024-05-01 12:{m:02d}:{s:02d},{ms:03d} INFO evaluator.py:88 val batch {i}/5000 top1 {loss:.3f} top5 {g:.3f}",
    "2024-05-01 12:{m:02d}:{s:02d},{ms:03d} DEBUG dataloader.py:412 worker {w} prefetched batch {i} in {dt:.3f}s",
    "2024-05-01 12:{m:02d}:{s:02d},{ms:03d} INFO checkpoint.py:51 saved checkpoint step_{i}.pt ({tp} MB)",
)
# lines that look relevant to the pre-filter but are not failures (about 1 in 2000 lines)
DISTRACTORS = (
    "2024-05-01 12:{m:02d}:{s:02d},{ms:03d} INFO utils.py:44 torch.cuda.max_memory_allocated {tp} MB",
    "2024-05-01 12:{m:02d}:{s:02d},{ms:03d} WARNING loader.py:97 transient read error on shard {w}, retrying",
)
HEADER = (
    "2024-05-01 12:00:00.355516: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] Unable to "
    "register cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been registered\n"
    "2024-05-01 12:00:00.355674: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:607] Unable to "
    "register cuFFT factory: Attempting to register factory for plugin cuFFT when one has already been registered\n"
)
FAILURE = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 311, in <module>\n'
    "    out = model(x)\n"
    '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/conv.py", line 549, in _conv_forward\n'
    "    return F.conv2d(\n"
    "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED\n"
    "E cuda_dnn.cc:478] Memory usage: 524288 bytes free, 42505273344 bytes total.\n"
)


def generate(path: str, size: int, seed: int = 0) -> None:
    rnd = random.Random(seed)
    # a pool of pre-rendered noise lines keeps generation fast
    pool = []
    for i in range(20000):
        t = NOISE_TEMPLATES[i % len(NOISE_TEMPLATES)] if i % 2000 else DISTRACTORS[(i // 2000) % 2]
        pool.append(t.format(m=i % 60, s=(i * 7) % 60, ms=i % 1000, e=i // 4000, i=i,
                             loss=rnd.random() * 3, lr=1e-3 * rnd.random(), tp=rnd.randint(100, 900),
                             g=rnd.random(), dt=rnd.random() / 10, w=i % 8) + "\n")
    block = "".join(pool).encode()
    with open(path, "wb") as fh:
        fh.write(HEADER.encode())
        written = len(HEADER)
        target = size - len(FAILURE)
        while written + len(block) <= target:
            fh.write(block)
            written += len(block)
        rest = target - written
        if rest > 0:
            part = block[:rest]
            part = part[: part.rfind(b"\n") + 1]
            fh.write(part)
        fh.write(FAILURE.encode())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--path", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    size = args.size_mb << 20
    path = args.path or f"/tmp/convdoctor_bench_{args.size_mb}m.log"
    if not (os.path.exists(path) and abs(os.path.getsize(path) - size) < (1 << 20)):
        t0 = time.perf_counter()
        generate(path, size)
        print(f"generated {path}: {os.path.getsize(path) / 2**20:.0f} MiB in {time.perf_counter() - t0:.1f} s")
    cmd = [sys.executable, "-m", "convdoctor", "explain", "--json", "--no-live", "--file", path]
    times, cpus, loads, cause, looked = [], [], [], None, {}
    for _ in range(args.runs):
        # the first run may read from disk, later runs from the page cache
        loads.append(os.getloadavg()[0])
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        if proc.returncode not in (0, 1):
            print(proc.stderr, file=sys.stderr)
            return 2
        out = json.loads(proc.stdout)
        cause, looked = out["cause"], out["looked_at"]
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"file_mib": round(os.path.getsize(path) / 2**20), "runs_s": [round(t, 2) for t in times],
                      "best_s": round(min(times), 2), "cpu_s_per_run": [round(c, 2) for c in cpus],
                      "loadavg_1min_before_each_run": [round(x, 2) for x in loads],
                      "peak_rss_mib_largest_process": round(peak_kb / 1024, 1),
                      "cause": cause, "lines": looked.get("total_lines"),
                      "candidate_lines": looked.get("candidate_lines"), "cpus": os.cpu_count()}, indent=1))
    if not args.keep and args.path is None:
        os.remove(path)
    ok = cause == "gpu-out-of-memory" and min(times) < 10
    print("PASS" if ok else "FAIL", f"(1 GB target: < 10 s; best {min(times):.2f} s wall, "
          f"{min(cpus):.2f} s CPU over {os.cpu_count()} CPUs; cause {cause}; load {min(loads):.1f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
