"""GPU validation of `convdoctor check` against real cuDNN (a step of benchmarks/gpu_validate.py).

  OUT=/tmp/out PYTHONPATH=src python benchmarks/gpu/check_fuzz.py [--n 4000] [--seed 0]

1. Differential fuzzing: the same random convolutions as tests/check/test_check_fuzz.py, run for real
   with torch.backends.cudnn.enabled on the GPU (real tensors), compared with the checker's verdict
   for device="cuda". Every disagreement is written to $OUT/check_fuzz.json.
2. Large-tensor probes (> 2^31 elements, batch-splittable and not) to record what this cuDNN does.
3. Performance probes: fp16 NCHW vs channels_last and C=3 vs C=8 (times, to back the warnings).
Prints a short summary last. The fuzz of 4000 cases took 20.1 s on an H100 (docs/results.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch  # import torch before anything that may load cudnn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from convdoctor.check.checker import check_conv  # noqa: E402


def versions() -> dict:
    d = {"torch": torch.__version__, "cuda": torch.version.cuda,
         "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
         "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
         "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    try:
        import subprocess

        d["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        d["driver"] = None
    return d


def large_probe(name: str, x_shape, w_shape, dtype=torch.float16, **kw) -> dict:
    rec = {"name": name, "x_shape": list(x_shape), "w_shape": list(w_shape), "dtype": str(dtype), **kw}
    rep = check_conv(x_shape, w_shape, dtype=str(dtype).removeprefix("torch."), device="cuda",
                     cudnn_version=torch.backends.cudnn.version(), **kw)
    rec["checker_ok"] = rep.ok
    rec["checker_ids"] = rep.ids()
    try:
        torch.cuda.empty_cache()
        with torch.no_grad():
            x = torch.empty(x_shape, device="cuda", dtype=dtype).normal_()
            w = torch.randn(w_shape, device="cuda", dtype=dtype)
            t0 = time.perf_counter()
            fn = getattr(torch.nn.functional, f"conv{len(w_shape) - 2}d")
            y = fn(x, w, **kw)
            torch.cuda.synchronize()
            rec["seconds"] = round(time.perf_counter() - t0, 3)
            # correctness spot check on one sample slice vs a float32 reference of sample 0
            rec["y_shape"] = list(y.shape)
            rec["y_finite"] = bool(torch.isfinite(y[:1].float()).all().item())
            del x, w, y
        rec["torch_ran"] = True
    except Exception as exc:  # noqa: BLE001
        rec["torch_ran"] = False
        rec["torch_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    torch.cuda.empty_cache()
    rec["agree"] = rec["torch_ran"] == rec["checker_ok"]
    return rec


def time_conv(x_shape, w_shape, dtype, channels_last: bool, padding=1, iters=50) -> float:
    x = torch.randn(x_shape, device="cuda", dtype=dtype)
    conv = torch.nn.Conv2d(w_shape[1], w_shape[0], w_shape[2], padding=padding, bias=False).to("cuda", dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
        conv = conv.to(memory_format=torch.channels_last)
    with torch.no_grad():
        for _ in range(5):
            conv(x)
        torch.cuda.synchronize()
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ev0.record()
        for _ in range(iters):
            conv(x)
        ev1.record()
        torch.cuda.synchronize()
    return ev0.elapsed_time(ev1) / iters


DEVICE = os.environ.get("CHECK_FUZZ_DEVICE", "cuda")  # "cpu" only to test this harness off-GPU
_STICKY = ("CUDA error", "AcceleratorError", "illegal memory access", "CUBLAS_STATUS", "unspecified launch")


def _worker(start: int, n: int, seed: int, conn) -> None:  # noqa: ANN001
    """Run cases start..n-1 for real on the GPU; stop after a sticky CUDA error."""
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # attribute asynchronous errors to the case that caused them
    import random
    import warnings

    import torch as _torch

    from convdoctor.check.fuzz import gen_case, run_torch

    warnings.filterwarnings("ignore")
    _torch.backends.cudnn.enabled = True
    _torch.backends.cudnn.benchmark = False
    rng = random.Random(seed)
    cases = [gen_case(rng) for _ in range(n)]
    for i in range(start, n):
        ran, msg = run_torch(cases[i], DEVICE)
        if str(i) == os.environ.get("CHECK_FUZZ_FAKE_CRASH"):  # harness self-test only
            ran, msg = False, "AcceleratorError: CUDA error: simulated"
        conn.send((i, ran, msg))
        if not ran and any(k in msg for k in _STICKY):
            break
    conn.close()


def isolated_fuzz(n: int, seed: int):  # noqa: ANN201
    import multiprocessing as mp
    import random
    import warnings

    from convdoctor.check.fuzz import FuzzResult, gen_case, known_difference, run_checker

    warnings.filterwarnings("ignore")
    ctx = mp.get_context("spawn")
    outcomes: dict[int, tuple[bool, str]] = {}
    crashes: list[dict] = []
    restarts = 0
    t0 = time.perf_counter()
    start = 0
    rng = random.Random(seed)
    cases = [gen_case(rng) for _ in range(n)]
    while start < n and restarts < 12:  # each restart costs a torch import + CUDA init (~5 s)
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(start, n, seed, child))
        proc.start()
        child.close()
        last = start - 1
        while True:
            try:
                i, ran, msg = parent.recv()
            except EOFError:
                break
            outcomes[i] = (ran, msg)
            last = i
            if not ran and any(k in msg for k in _STICKY):
                crashes.append({"index": i, "case": cases[i], "error": msg})
        proc.join(timeout=30)
        if last < start:  # the worker died on case `start` without reporting
            outcomes[start] = (False, f"worker died (exit code {proc.exitcode})")
            crashes.append({"index": start, "case": cases[start], "error": outcomes[start][1]})
            last = start
        start = last + 1
        if start < n:
            restarts += 1
    res = FuzzResult()
    for i, case in enumerate(cases):
        if i not in outcomes:
            continue
        ran, msg = outcomes[i]
        ok, ids = run_checker(case, DEVICE)
        res.n += 1
        res.torch_errors += not ran
        if ran == ok:
            res.agree += 1
        else:
            row = {"index": i, "case": case, "torch_ran": ran, "torch_error": msg, "checker_ok": ok,
                   "checker_errors": ids}
            kd = known_difference(case, DEVICE)
            (res.known if kd else res.disagreements).append({**row, "known_difference": kd} if kd else row)
    res.seconds = time.perf_counter() - t0
    return res, crashes, restarts


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"versions": versions(), "n": args.n, "seed": args.seed}
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU visible", file=sys.stderr)
        (out / "check_fuzz.json").write_text(json.dumps(result, indent=1))
        return 2
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.benchmark = False
    import warnings

    warnings.filterwarnings("ignore")
    # 1. fuzz, in worker processes (a case that corrupts the CUDA context only costs a restart)
    t0 = time.perf_counter()
    r, crashes, restarts = isolated_fuzz(args.n, args.seed)
    result["fuzz"] = {"n": r.n, "agree": r.agree, "rate": r.rate, "torch_errors": r.torch_errors,
                      "seconds": round(r.seconds, 1), "known_differences": len(r.known),
                      "crashes": crashes, "worker_restarts": restarts,
                      "disagreements": r.disagreements, "known": r.known}
    (out / "check_fuzz.json").write_text(json.dumps(result, indent=1))
    if DEVICE != "cuda":
        print(f"fuzz {DEVICE}: {r.agree}/{r.n} agree, {len(r.disagreements)} disagreements, "
              f"{len(crashes)} crashes, {restarts} restarts")
        return 0
    # 2. large tensors
    probes = []
    for args_ in (
        ("splittable-input", (2, 64, 4, 2048, 2048), (64, 64, 1, 3, 3), torch.float16, {"padding": (0, 1, 1)}),
        ("non-splittable-input", (1, 64, 8, 2048, 2200), (8, 64, 1, 3, 3), torch.float16, {"padding": (0, 1, 1)}),
        ("non-splittable-output", (1, 8, 8, 2048, 2200), (128, 8, 1, 1, 1), torch.float16, {}),
    ):
        try:
            probes.append(large_probe(args_[0], args_[1], args_[2], args_[3], **args_[4]))
        except Exception as exc:  # noqa: BLE001
            probes.append({"name": args_[0], "harness_error": traceback.format_exc()[-800:]})
            del exc
        (out / "check_fuzz.json").write_text(json.dumps({**result, "large": probes}, indent=1))
    result["large"] = probes
    # 3. performance probes backing the warnings
    perf = {}
    try:
        perf["fp16_nchw_ms"] = time_conv((64, 256, 56, 56), (256, 256, 3, 3), torch.float16, False)
        perf["fp16_nhwc_ms"] = time_conv((64, 256, 56, 56), (256, 256, 3, 3), torch.float16, True)
        perf["fp16_nhwc_c250_ms"] = time_conv((64, 250, 56, 56), (250, 250, 3, 3), torch.float16, True)
        perf["fp16_nhwc_c256_ms"] = perf["fp16_nhwc_ms"]
        torch.backends.cudnn.allow_tf32 = False
        perf["fp32_notf32_ms"] = time_conv((64, 256, 56, 56), (256, 256, 3, 3), torch.float32, True)
        torch.backends.cudnn.allow_tf32 = True
        perf["fp32_tf32_ms"] = time_conv((64, 256, 56, 56), (256, 256, 3, 3), torch.float32, True)
    except Exception:  # noqa: BLE001
        perf["error"] = traceback.format_exc()[-800:]
    result["perf"] = perf
    result["total_seconds"] = round(time.perf_counter() - t0, 1)
    (out / "check_fuzz.json").write_text(json.dumps(result, indent=1))
    # summary last
    print(f"versions: {json.dumps(result['versions'])}")
    for p in probes:
        print(f"large {p.get('name')}: torch_ran={p.get('torch_ran')} checker_ok={p.get('checker_ok')} "
              f"ids={p.get('checker_ids')} {p.get('torch_error', '')} {p.get('seconds', '')}s")
    print(f"perf (ms): {json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in perf.items()})}")
    print(f"fuzz cuda: {r.agree}/{r.n} agree ({100 * r.rate:.2f}%), {r.torch_errors} cases PyTorch rejected, "
          f"{len(r.disagreements)} disagreements, {len(r.known)} known differences, "
          f"{len(crashes)} cases crashed the CUDA context, {restarts} worker restarts, {r.seconds:.1f}s")
    for c in crashes[:5]:
        print(f"  CRASH #{c['index']}: {c['error'][:100]} {c['case']}")
    for d in r.disagreements[:15]:
        print(f"  DIS torch_ran={d['torch_ran']} checker={d['checker_errors']} {d['torch_error'][:120]} {d['case']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
