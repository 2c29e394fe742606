#!/usr/bin/env python
"""GPU smoke test of the tuner's CUDA backend (convdoctor.tune.cuda_backend), non-interactive, < ~3 min.

For 6 problems x (fprop, dgrad, wgrad): list candidates (cuDNN plans from heuristic modes A/B/
FALLBACK + bounded engine/knob enumeration, PyTorch's paths), build each, check it against the
float64 reference (output poisoned), time it (L2 flush, CUDA events; median of N), and print a table.
torch:heuristic runs in the backend's private child worker (PyTorch caches its cuDNN choice per
process under a key that ignores the benchmark flag, so it cannot share a process with
torch:benchmark). Also: build_plan by name, NVML clock, roofline peaks.

Run from the repo root:  OUT=/tmp/out PYTHONPATH=src python lab/tune_gpu_smoke.py
Writes $OUT/tune_gpu_smoke.json (log lines on stdout, summary table last).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402  (torch before cudnn)

from convdoctor.engines import cudnn_enum as cudnn_plan  # noqa: E402
from convdoctor.measure import roofline  # noqa: E402
from convdoctor.measure.nvml import NvmlClock, reason_names  # noqa: E402
from convdoctor.problem import ConvProblem  # noqa: E402
from convdoctor.settings import Settings  # noqa: E402
from convdoctor.tune.backend import Candidate, CandidateUnsupported  # noqa: E402
from convdoctor.tune.cuda_backend import CudaBackend  # noqa: E402

PROBLEMS = {
    "resnet3x3_fp32_nchw": "n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1 dtype=float32 math=tf32 layout=nchw",
    "3x3_fp16_nhwc": "n=32 c=128 h=56 w=56 k=128 r=3 s=3 pad=1 dtype=float16 layout=nhwc",
    "1x1_fp32_strict": "n=32 c=1024 h=14 w=14 k=256 r=1 s=1 dtype=float32 math=strict layout=nchw",
    "speech1d_c1_wide": "n=16 c=1 w=16000 k=256 s=400 stride=160 dtype=float32 math=tf32 layout=nchw",
    "depthwise_s2_asym_fp16": ("n=32 c=144 h=56 w=56 k=144 groups=144 r=3 s=3 stride=2 pad_pre=0 "
                               "pad_post=1 dtype=float16 layout=nhwc"),
    "3d_bf16_ndhwc": "n=2 c=32 d=16 h=64 w=64 k=32 t=3 r=3 s=3 pad=1 dtype=bfloat16 layout=nhwc",
}
DIRECTIONS = ("fprop", "dgrad", "wgrad")
REPS = 5
WARMUPS = 2
DEADLINE_S = 120.0
CASE_CAP_S = 15.0


def log(msg: str) -> None:
    print(msg, flush=True)


class Watch:
    """Progress trail in $OUT/progress.txt; a Python traceback there if one step takes > 25 s
    (faulthandler, works even when the main thread holds the GIL in C++); if a step takes > 40 s
    and the GIL is free, the report so far is written and the script exits."""

    def __init__(self, out: Path, on_stuck) -> None:
        self.f = open(out / "progress.txt", "w", buffering=1)  # noqa: SIM115
        self.on_stuck = on_stuck
        self.step_started = time.monotonic()
        self.step = ""
        threading.Thread(target=self._watch, daemon=True).start()

    def __call__(self, step: str) -> None:
        self.step, self.step_started = step, time.monotonic()
        self.f.write(f"{time.strftime('%H:%M:%S')} {step}\n")
        faulthandler.cancel_dump_traceback_later()
        faulthandler.dump_traceback_later(25, repeat=False, file=self.f)

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            if time.monotonic() - self.step_started > 40:
                self.f.write(f"STUCK > 40 s in: {self.step}\n")
                log(f"STUCK > 40 s in: {self.step}; writing the report so far and exiting")
                self.on_stuck(self.step)
                os._exit(3)


def problems() -> list[tuple[str, ConvProblem]]:
    out = []
    for name, text in PROBLEMS.items():
        for d in DIRECTIONS:
            out.append((f"{name}/{d}", ConvProblem.parse(f"{d} {text}")))
    return out


WATCH = None


def measure(backend: CudaBackend, problem: ConvProblem, cand: Candidate,
            best_ms: float = float("inf")) -> dict:
    if WATCH is not None:
        WATCH(f"{problem.short()} {cand.key}")
    rec: dict = {"key": cand.key, "workspace": cand.workspace_bytes, "notes": list(cand.notes),
                 "deterministic": cand.deterministic}
    t0 = time.perf_counter()
    try:
        runner = backend.prepare(problem, cand)
    except CandidateUnsupported as exc:
        rec.update(status="unsupported", reason=str(exc)[:300])
        return rec
    except Exception as exc:  # noqa: BLE001
        rec.update(status="failed", reason=f"prepare: {type(exc).__name__}: {exc}"[:300])
        return rec
    try:
        rec["prepare_ms"] = (time.perf_counter() - t0) * 1e3
        t1 = time.perf_counter()
        runner.warmup()
        rec["first_run_ms_wall"] = (time.perf_counter() - t1) * 1e3
        if rec["first_run_ms_wall"] > 1000.0 and best_ms < 100.0:
            rec.update(status="screened-out", reason="first run over 1 s (smoke only)")
            return rec
        t2 = 0.0
        for _ in range(WARMUPS - 1):
            t1 = time.perf_counter()
            runner.warmup()
            t2 = (time.perf_counter() - t1) * 1e3
        c = runner.check()
        rec.update(ok=c.ok, rel_err=c.max_rel_err, tol=c.tolerance, check_detail=c.detail)
        # hopeless candidates (a warm run far slower than the best so far) get one sample only,
        # the smoke is not the tuner (the harness screens properly)
        slow = t2 > max(20.0, 8.0 * best_ms)
        rec["screened_slow"] = slow
        samples = runner.time(1 if slow else REPS)
        rec["samples_ms"] = [s * 1e3 for s in samples]
        rec["median_ms"] = statistics.median(samples) * 1e3
        rec["timing_mode"] = getattr(runner, "timing_mode", "")
        rec["status"] = "ok" if c.ok else "disqualified"
    except Exception as exc:  # noqa: BLE001
        rec.update(status="failed", reason=f"{type(exc).__name__}: {exc}"[:300],
                   tb=traceback.format_exc()[-1500:])
    finally:
        try:
            runner.close()
        except Exception:  # noqa: BLE001
            pass
    return rec


def table(report: dict) -> None:
    def f(v: object) -> str:
        return f"{v:8.3f}" if isinstance(v, float) else f"{str(v)[:8]:>8}"

    log("")
    log(f"{'case':34} {'cands':>5} {'ok':>3} {'bad':>3} {'best cudnn':>10} {'heur':>8} "
        f"{'bench':>8} {'off':>8} {'x bench':>7} {'%roof':>5}  best plan")
    for label, c in report["cases"].items():
        if "error" in c:
            log(f"{label:34} ERROR {c['error'][:80]}")
            continue
        b = c.get("best_cudnn") or {}
        bms = b.get("ms")
        bench = c.get("torch:benchmark")
        sp = (bench / bms) if isinstance(bench, float) and isinstance(bms, float) else None
        roof = (c.get("roofline_best") or {}).get("percent")
        log(f"{label:34} {c.get('n_candidates', 0):5d} {c.get('n_ok', 0):3d} "
            f"{c.get('n_disqualified', 0) + c.get('n_failed', 0):3d} {f(bms):>10} "
            f"{f(c.get('torch:heuristic'))} {f(bench)} {f(c.get('torch:cudnn-off'))} "
            f"{(f'{sp:7.2f}' if sp else '      -')} {(f'{roof:5.0f}' if roof else '    -')}  "
            f"{b.get('key', '-')}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="substring filter on case labels")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out_tune_gpu"))
    out.mkdir(parents=True, exist_ok=True)

    t_start = time.perf_counter()
    backend = CudaBackend(settings=Settings().replace(cudnn_enum_extra=8, cudnn_enum_budget_s=1.5))
    report: dict = {"env": backend.environment(), "cases": {}, "errors": []}

    def on_stuck(step: str) -> None:
        report["errors"].append(f"stuck > 40 s in {step}; exited")
        (out / "tune_gpu_smoke.json").write_text(json.dumps(report, indent=1, default=str))
        table(report)

    global WATCH
    WATCH = Watch(out, on_stuck)
    props = torch.cuda.get_device_properties(backend.device)
    report["l2_bytes"] = int(getattr(props, "L2_cache_size", 0) or 0)
    clk = NvmlClock(backend.device)
    report["nvml"] = clk.describe()
    log(f"env: {report['env']}")
    log(f"L2: {report['l2_bytes']} bytes; NVML: {report['nvml']}")
    try:
        pk = roofline.peaks(backend.device, use_file=False)
        report["peaks"] = {"flops_tflops": {k: v / 1e12 for k, v in pk.flops.items()},
                           "bandwidth_gbs": pk.bandwidth / 1e9}
        log(f"peaks: {report['peaks']}")
    except Exception as exc:  # noqa: BLE001
        pk = None
        report["errors"].append(f"roofline: {type(exc).__name__}: {exc}")

    for label, p in problems():
        if args.only and args.only not in label:
            continue
        if time.perf_counter() - t_start > DEADLINE_S:
            report["errors"].append(f"deadline: skipped {label}")
            continue
        case: dict = {"problem": p.key()}
        report["cases"][label] = case
        try:
            t0 = time.perf_counter()
            WATCH(f"{label}: candidates")
            cands = backend.candidates(p)
            case["candidates_s"] = time.perf_counter() - t0
            en = backend.last_enumeration
            case["n_candidates"] = len(cands)
            case["cudnn_error"] = backend.cudnn_error
            if en is not None and en.problem_key == p.key():
                case["enumeration"] = {
                    "seconds": en.seconds, "engine_count": en.engine_count,
                    "enum_added": en.enum_added, "built": len(en.built()),
                    "not_built": [(x.name, x.source, x.reason[:120]) for x in en.plans
                                  if not x.built][:30],
                    "by_source": {s: sum(1 for x in en.built() if x.source == s)
                                  for s in ("A", "B", "FALLBACK", "enum")},
                }
            # build_plan: default (best heuristic) and by name round trip
            try:
                best = cudnn_plan.build_plan(p)
                again = cudnn_plan.build_plan(p, best.name)
                case["convplan_default"] = {"name": best.name, "ws": best.workspace_bytes,
                                            "same_object_by_name": again is best}
            except Exception as exc:  # noqa: BLE001
                case["convplan_default"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            recs = []
            best_ms = float("inf")
            for c in cands:
                if time.perf_counter() - t0 > CASE_CAP_S:
                    recs.append({"key": c.key, "status": "skipped",
                                 "reason": f"smoke case time cap {CASE_CAP_S:.0f} s"})
                    continue
                r = measure(backend, p, c, best_ms)
                recs.append(r)
                if r.get("status") == "ok":
                    best_ms = min(best_ms, r["median_ms"])
            case["results"] = recs
            ok = [r for r in recs if r.get("status") == "ok"]
            cud = [r for r in ok if r["key"].startswith("cudnn:")]
            bestc = min(cud, key=lambda r: r["median_ms"]) if cud else None
            case["best_cudnn"] = ({"key": bestc["key"], "ms": bestc["median_ms"]}
                                  if bestc else None)
            for k in ("torch:benchmark", "torch:heuristic", "torch:cudnn-off"):
                r = next((r for r in recs if r["key"] == k), None)
                case[k] = r.get("median_ms") if r and r.get("status") == "ok" else (
                    r.get("status") if r else None)
            case["n_ok"] = len(ok)
            case["n_disqualified"] = sum(1 for r in recs if r.get("status") == "disqualified")
            case["n_failed"] = sum(1 for r in recs if r.get("status") in ("failed",))
            case["n_unsupported"] = sum(1 for r in recs if r.get("status") == "unsupported")
            case["n_skipped"] = sum(1 for r in recs if r.get("status") in ("skipped",
                                                                          "screened-out"))
            case["max_err_ok"] = max((r["rel_err"] for r in ok), default=None)
            if pk is not None and bestc:
                case["roofline_best"] = roofline.roofline_for(p, bestc["median_ms"] / 1e3, pk)
            rd = clk.read()
            case["clock"] = ({"sm_mhz": rd.sm_clock_mhz, "reasons": reason_names(rd.reasons),
                              "slowdown": rd.slowdown} if rd else None)
            log(f"{label}: {len(cands)} cands, ok {case['n_ok']}, disq {case['n_disqualified']}, "
                f"failed {case['n_failed']}, unsup {case['n_unsupported']}, skipped "
                f"{case['n_skipped']}, max err ok "
                f"{case['max_err_ok']}, best cudnn {case['best_cudnn']}, heur "
                f"{case['torch:heuristic']}, bench {case['torch:benchmark']}, off "
                f"{case['torch:cudnn-off']} ({time.perf_counter() - t0:.1f}s)")
            for r in recs:
                if r.get("status") in ("disqualified", "failed", "unsupported"):
                    log(f"    {r['status']}: {r['key']} {r.get('check_detail') or r.get('reason')}")
        except Exception as exc:  # noqa: BLE001
            case["error"] = f"{type(exc).__name__}: {exc}"[:500]
            case["tb"] = traceback.format_exc()[-3000:]
            log(f"{label}: ERROR {case['error']}")
        finally:
            cudnn_plan.clear_cache()
            torch.cuda.empty_cache()
            (out / "tune_gpu_smoke.json").write_text(json.dumps(report, indent=1, default=str))

    backend.shutdown()
    report["wall_s"] = time.perf_counter() - t_start
    (out / "tune_gpu_smoke.json").write_text(json.dumps(report, indent=1, default=str))

    table(report)
    log(f"errors: {report['errors']}")
    log(f"wall {report['wall_s']:.0f}s; JSON: {out / 'tune_gpu_smoke.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
