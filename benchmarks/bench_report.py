"""Size and speed of `convdoctor report` on large inputs: 1,000 tuned problems, a 150-layer model.

Usage: python benchmarks/bench_report.py [--problems 1000] [--layers 150] [--keep DIR]

Writes synthetic inputs shaped like the real ones (a `convdoctor db export` file of CUDA tuning
results: 60 candidates per problem, 8 timed with 30 samples each, 45 screened out, a few failed or
disqualified; an `optimize --json` payload of a model with that many layers, 3 directions each,
with 40 step samples per side), runs `convdoctor report` on each in a fresh process and prints
the page's size and the time to write it. Where Chromium is installed (`chromium`), it also
prints the time the page takes to open: the page is loaded headless and, at its load event, a
forced layout of the whole document is timed with `performance.now()` from the start of the
navigation (parse, style and layout; the copy used for this carries a measuring script, which the
page itself never has). Targets: under 5 MB, open in under 2 s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GPU = "NVIDIA H100 80GB HBM3"
SIZE_TARGET = 5_000_000          # bytes (5 MB)
OPEN_TARGET_MS = 2000.0
_PROBE = ('<script>addEventListener("load",function(){var h=document.documentElement'
          '.scrollHeight;document.title="LOADED "+performance.now().toFixed(1)+" "+h;});</script>')


def _problem(rng: random.Random, direction: str) -> dict[str, Any]:
    hw = rng.choice((7, 14, 28, 56, 112))
    k = rng.choice((32, 64, 128, 256, 512))
    return {"direction": direction, "n": rng.choice((8, 16, 32, 64)), "c": rng.choice((32, 64,
            128, 256, 512)), "k": k, "spatial": [hw, hw], "kernel": [3, 3], "stride": [1, 1],
            "pad_pre": [1, 1], "pad_post": [1, 1], "dilation": [1, 1], "groups": 1,
            "dtype": rng.choice(("float32", "float16")), "math": "tf32",
            "layout": rng.choice(("nchw", "nhwc")), "deterministic": False}


def _cand(key: str, status: str, samples: list[float], screen: list[float], reason: str = "",
          discarded: int = 0) -> dict[str, Any]:
    med = statistics.median(samples or screen) if (samples or screen) else None
    return {"candidate": {"key": key, "backend": "cuda", "workspace_bytes": 0,
                          "deterministic": False, "notes": []},
            "status": status, "reason": reason, "median_s": med, "ci_low_s": None,
            "ci_high_s": None, "n": len(samples), "warmup_runs": 3, "prepare_s": 0.01,
            "first_run_s": 0.001, "second_run_s": 0.001, "discarded": discarded,
            "clock_mhz": 1980.0, "rank_s": None, "cost_s": 0.05, "correctness": None,
            "samples": [float(f"{v:.6g}") for v in samples],
            "screen_samples": [float(f"{v:.6g}") for v in screen]}


def synthetic_result(rng: random.Random, i: int) -> dict[str, Any]:
    """One CUDA tuning result in `TuneResult.to_dict()` form."""
    prob = _problem(rng, ("fprop", "dgrad", "wgrad")[i % 3])
    base = 10 ** rng.uniform(-5.3, -3.0)

    def draw(scale: float, n: int) -> list[float]:
        return [base * scale * math.exp(rng.gauss(0.0, 0.02)) for _ in range(n)]

    cands = [_cand("torch:heuristic", "ok", draw(rng.uniform(1.0, 1.6), 30), []),
             _cand("torch:benchmark", "ok", draw(rng.uniform(1.0, 1.4), 30), [])]
    for j in range(6):
        cands.append(_cand(f"cudnn:eng{rng.randrange(80)}_k2={j}", "ok",
                           draw(rng.uniform(0.9, 1.5), 30), [], discarded=rng.choice((0, 0, 2))))
    for j in range(45):
        cands.append(_cand(f"cudnn:eng{j}_k3={j % 7}", "screened-out", [],
                           draw(rng.uniform(1.5, 4.0), 3), reason="screen: slower than 1.5x"))
    cands.append(_cand("triton:fp_k64p64j32w4s3", "disqualified", [], [],
                       reason="max relative error 3.1e-02 above tolerance 1.0e-02"))
    cands.append(_cand("cudnn:eng99", "failed", [], [],
                       reason="CUDNN_STATUS_EXECUTION_FAILED in the first run"))
    cands.append(_cand("torch:im2col", "unsupported", [], [], reason="grouped convolution"))
    ok = [c for c in cands if c["status"] == "ok"]
    win = min(ok, key=lambda c: c["median_s"])
    env = {"gpu_name": GPU, "sm_count": "132", "compute_capability": "9.0",
           "driver": "580.159.04", "cuda_runtime": "13.0", "cudnn": "91900", "torch": "2.11.0"}
    return {"problem": prob, "env": env, "backend": "cuda", "winner": win["candidate"],
            "winner_time_s": win["median_s"],
            "baselines": {"torch:heuristic": ok[0]["median_s"], "torch:benchmark": ok[1]["median_s"]},
            "tuning_s": rng.uniform(2, 12), "created": 1.79e9 + i, "noise_band": 0.005,
            "notes": [], "degraded": False, "short_list": False, "listing": {},
            "candidates": cands}


def synthetic_tuning(n: int, seed: int = 1) -> dict[str, Any]:
    """A `convdoctor db export` file of `n` tuning results."""
    rng = random.Random(seed)
    return {"format": "convdoctor-tuning-db", "schema": 1, "exported": 1.79e9,
            "records": [synthetic_result(rng, i) for i in range(n)]}


def synthetic_optimize(layers: int, seed: int = 2) -> dict[str, Any]:
    """An `optimize --json` payload of a model with `layers` convolution layers (training)."""
    rng = random.Random(seed)
    lays = []
    for i in range(layers):
        dirs = []
        for d in ("fprop", "dgrad", "wgrad"):
            py = 10 ** rng.uniform(-2.3, -0.5)
            tuned = rng.random() > 0.2
            dirs.append({"direction": d, "key": "cudnn:eng67" if tuned else "torch:default",
                         "source": "tuned" if tuned else "pytorch",
                         "problem": f"{d} 32x64x56x56 k64 3x3/1 fp32 tf32 nchw #{i}",
                         "winner_ms": py * rng.uniform(0.6, 1.02) if tuned else None,
                         "baseline_ms": py if tuned else None, "baseline_key": "torch:heuristic",
                         "chain": [], "graph_key": "", "graph_chain": [], "graph_winner_ms": None})
        lays.append({"layer": f"stage{i // 10}.block{i % 10}.conv", "x_shape": [32, 64, 56, 56],
                     "dtype": "torch.float32", "memory_format": "channels_last",
                     "directions": dirs})
    py = [30.0 * math.exp(rng.gauss(0, 0.03)) for _ in range(40)]
    cd = [24.0 * math.exp(rng.gauss(0, 0.02)) for _ in range(40)]
    rep = {"device": "cuda", "train": True, "channels_last": True,
           "channels_last_reason": "measured end to end", "layout_ms": {"as_given": 30.1,
           "channels_last": 26.0, "as_given_graphed": 27.0, "channels_last_graphed": 23.9},
           "graphs": True, "graphs_reason": "measured end to end",
           "graphs_ms": {"eager": 25.0, "graphed": 23.8, "graphed_routed": 24.1, "chosen": 23.8},
           "routing": True, "routing_reason": "measured end to end",
           "verify_ms": {"routed": 25.0, "unrouted": 26.0, "routed_nohost": 25.4, "chosen": 25.0},
           "margins": {"layout": 0.02, "routing": 0.03, "graphs": 0.02}, "extensions": {},
           "layers": lays, "problems": layers * 3, "from_db": 0, "tuned": layers * 2,
           "untuned": layers, "tuning_s": 100.0, "optimize_s": 200.0, "notes": []}
    return {"model": "synthetic.py:model", "input_shape": [32, 3, 224, 224], "dtype": "float32",
            "device": "cuda", "train": True,
            "step_ms": {"pytorch": statistics.median(py), "convdoctor": statistics.median(cd)},
            "speedup": statistics.median(py) / statistics.median(cd), "steps": 40, "report": rep,
            "step_samples_ms": {"pytorch": py, "convdoctor": cd}}


def write_report(args: list[str], out: Path) -> tuple[float, int]:
    """Run `convdoctor report ARGS --out OUT` in a fresh process: (wall seconds, bytes)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"]
                                             if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    cp = subprocess.run([sys.executable, "-m", "convdoctor", "report", *args, "--out", str(out)],
                        capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    if cp.returncode != 0:
        raise SystemExit(f"convdoctor report failed: {cp.stderr.strip()}")
    return wall, out.stat().st_size


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def open_ms(page: Path, browser: str) -> tuple[float, int]:
    """(ms from navigation start to the end of a forced full layout at the load event, the
    document's height in px), in headless Chromium."""
    html = page.read_text(encoding="utf-8")
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html, count=1)
    html = html.replace("</body>", _PROBE + "</body>", 1)
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.html"
        probe.write_text(html, encoding="utf-8")
        cp = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                             "--dump-dom", probe.as_uri()], capture_output=True, text=True,
                            timeout=120)
    m = re.search(r"LOADED ([0-9.]+) ([0-9]+)", cp.stdout)
    if not m:
        raise SystemExit(f"chromium printed no load time: {cp.stderr.strip()[-300:]}")
    return float(m.group(1)), int(m.group(2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=1000)
    ap.add_argument("--layers", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3, help="browser loads per page (median)")
    ap.add_argument("--keep", default=None, help="keep inputs and pages in this directory")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench_report."))
    work.mkdir(parents=True, exist_ok=True)
    tuning, opt = work / "tuning_export.json", work / "optimize.json"
    tuning.write_text(json.dumps(synthetic_tuning(args.problems)), encoding="utf-8")
    opt.write_text(json.dumps(synthetic_optimize(args.layers)), encoding="utf-8")
    browser = chromium()
    ok = True
    for label, flags, page in ((f"{args.problems} tuned problems", ["--db", str(tuning)],
                                work / "tuning.html"),
                               (f"{args.layers}-layer model", ["--optimize", str(opt)],
                                work / "optimize.html")):
        wall, size = write_report(flags, page)
        line = f"{label}: {size / 1e6:.2f} MB ({size} bytes), written in {wall:.2f} s"
        ok &= size < SIZE_TARGET
        if browser:
            loads = [open_ms(page, browser) for _ in range(args.repeat)]
            ms = statistics.median(v for v, _ in loads)
            line += (f"; opens in {ms:.0f} ms (Chromium, median of {len(loads)}: "
                     + ", ".join(f"{v:.0f}" for v, _ in loads) + f" ms; {loads[0][1]} px tall)")
            ok &= ms < OPEN_TARGET_MS
        else:
            line += "; open time not measured (no chromium)"
        print(line)
    print(f"targets: < {SIZE_TARGET / 1e6:.2f} MB, opens in < {OPEN_TARGET_MS:.0f} ms: "
          + ("met" if ok else "NOT met"))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
