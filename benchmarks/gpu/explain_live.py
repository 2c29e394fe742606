"""GPU validation of `convdoctor explain` / `convdoctor run` on real failures (a step of
benchmarks/gpu_validate.py).

Provokes real convolution failures with PyTorch on the GPU (wrong channels, dtype, device, too-small
input, near-full memory, a huge tensor ...), an environment failure in a child process
(CUDA_VISIBLE_DEVICES empty) run through `convdoctor run`, the excepthook in a child, and the live
checks on a real machine; records each real message, the diagnosis, the live confirmations and
timings into $OUT/explain_gpu.json. Cases with no fixed expectation (PyTorch may accept them) are
recorded as observations. Prints a short summary last.

    OUT=/tmp/out PYTHONPATH=src python benchmarks/gpu/explain_live.py

CUDNN_FAULT_DIR: a directory holding another cuDNN's libcudnn_graph.so.9 (default
.gpu-extra/cudnn-cu12/lib); when it exists, a mixed cuDNN install is provoked with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from typing import Any

OUT = os.environ.get("OUT") or "/tmp/explain_gpu_out"
os.makedirs(OUT, exist_ok=True)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(REPO, "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

results: list[dict[str, Any]] = []


def record(name: str, expect: str | None, fn) -> None:  # type: ignore[no-untyped-def]
    from convdoctor.explain import explain

    t0 = time.perf_counter()
    entry: dict[str, Any] = {"case": name, "expect": expect}
    try:
        fn()
        entry["raised"] = False
        entry["note"] = "no exception: PyTorch accepted this case"
    except Exception as exc:  # noqa: BLE001 - we want the real message
        entry["raised"] = True
        entry["exception"] = f"{type(exc).__name__}: {str(exc)[:800]}"
        t1 = time.perf_counter()
        d = explain(exc, live=True)
        entry["explain_s"] = round(time.perf_counter() - t1, 3)
        entry["cause"] = d.cause_id
        entry["ranked"] = [(c.id, c.confidence, c.confirmation.status if c.confirmation else None,
                            (c.confirmation.detail[:200] if c.confirmation else None)) for c in d.causes[:3]]
        entry["facts"] = d.facts
        entry["ok"] = (d.cause_id == expect) if expect else None
    entry["case_s"] = round(time.perf_counter() - t0, 3)
    results.append(entry)
    print(f"[{name}] expect={expect} got={entry.get('cause')} raised={entry['raised']}", flush=True)


def run_child(name: str, expect: str | None, code: str, env_extra: dict[str, str],
              via_run: bool = True) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra)
    if via_run:
        cmd = [sys.executable, "-m", "convdoctor", "run", "--json", "--", sys.executable, "-c", code]
    else:
        cmd = [sys.executable, "-c", code]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    entry: dict[str, Any] = {"case": name, "expect": expect, "rc": p.returncode,
                             "case_s": round(time.perf_counter() - t0, 3),
                             "stdout_tail": p.stdout[-600:], "stderr_tail": p.stderr[-2500:]}
    if via_run and "{\n" in p.stderr:
        try:
            d = json.loads(p.stderr[p.stderr.rindex('{\n  "kind": "explain"'):])
            entry["cause"] = d["cause"]
            entry["ranked"] = [(c["id"], c["confidence"], (c.get("confirmation") or {}).get("status"))
                               for c in d["causes"][:3]]
        except Exception as exc:  # noqa: BLE001
            entry["parse_error"] = repr(exc)
    elif not via_run:
        entry["cause"] = "printed" if "--- convdoctor explain ---" in p.stderr else None
        if expect and expect in p.stderr:
            entry["cause"] = expect
    entry["ok"] = (entry.get("cause") == expect) if expect else None
    results.append(entry)
    print(f"[{name}] expect={expect} got={entry.get('cause')} rc={p.returncode}", flush=True)


def main() -> int:
    t_start = time.perf_counter()
    import torch  # torch before cudnn (frontend)
    import torch.nn.functional as F

    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    print("env:", info, flush=True)
    dev = "cuda"

    record("channel-mismatch", "channel-mismatch",
           lambda: F.conv2d(torch.randn(2, 1, 32, 32, device=dev), torch.randn(8, 3, 3, 3, device=dev)))
    record("dtype-mismatch", "dtype-mismatch",
           lambda: torch.nn.Conv2d(3, 8, 3).to(dev)(torch.randn(2, 3, 32, 32, device=dev).half()))
    record("device-mismatch", "device-mismatch",
           lambda: torch.nn.Conv2d(3, 8, 3)(torch.randn(2, 3, 32, 32, device=dev)))
    record("input-too-small", "input-too-small",
           lambda: F.conv2d(torch.randn(1, 3, 2, 2, device=dev), torch.randn(8, 3, 3, 3, device=dev)))
    record("half-on-cpu", None,
           lambda: F.conv2d(torch.randn(1, 3, 8, 8).half(), torch.randn(4, 3, 3, 3).half()))
    record("empty-batch", None,
           lambda: F.conv2d(torch.randn(0, 3, 8, 8, device=dev), torch.randn(4, 3, 3, 3, device=dev)))

    def huge_alloc() -> None:
        free, _total = torch.cuda.mem_get_info()
        torch.empty(int(free * 1.5), dtype=torch.uint8, device=dev)

    record("oom-allocation", "gpu-out-of-memory", huge_alloc)

    def conv_near_full_memory() -> None:
        x = torch.randn(64, 256, 56, 56, device=dev)
        w = torch.randn(256, 256, 3, 3, device=dev)
        free, _ = torch.cuda.mem_get_info()
        filler = torch.empty(max(0, free - (64 << 20)), dtype=torch.uint8, device=dev)
        try:
            torch.backends.cudnn.benchmark = True
            F.conv2d(x, w, padding=1)
            torch.cuda.synchronize()
        finally:
            torch.backends.cudnn.benchmark = False
            del filler
            torch.cuda.empty_cache()

    record("conv-near-full-memory", "gpu-out-of-memory", conv_near_full_memory)
    torch.cuda.empty_cache()

    def huge_tensor_conv() -> None:
        x = torch.randn(1, 1, 65536, 32769, device=dev, dtype=torch.float16)  # 2^31 + 65536 elements
        w = torch.randn(1, 1, 3, 3, device=dev, dtype=torch.float16)
        F.conv2d(x, w, padding=1)
        torch.cuda.synchronize()

    record("over-2^31-elements", None, huge_tensor_conv)
    torch.cuda.empty_cache()

    # cuDNN frontend: a graph with inconsistent shapes, to see the status text users get
    def frontend_bad_graph() -> None:
        import cudnn  # noqa: F401  (nvidia-cudnn-frontend, the `gpu` extra)

        handle = cudnn.create_handle()
        g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.HALF,
                          compute_data_type=cudnn.data_type.FLOAT)
        X = g.tensor(name="X", dim=[8, 64, 56, 56], stride=[64 * 56 * 56, 1, 64 * 56, 64])
        W = g.tensor(name="W", dim=[32, 65, 3, 3], stride=[65 * 9, 1, 65 * 3, 65])
        Y = g.conv_fprop(image=X, weight=W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
        Y.set_output(True)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A])
        g.check_support()
        g.build_plans()

    record("cudnn-frontend-bad-graph", None, frontend_bad_graph)

    # the live checks on a healthy GPU machine, for a message that names no shapes
    from convdoctor.explain import explain

    t0 = time.perf_counter()
    d = explain("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED", live=True)
    results.append({"case": "live-env-on-healthy-gpu", "expect": None, "cause": d.cause_id,
                    "explain_s": round(time.perf_counter() - t0, 3),
                    "ranked": [(c.id, c.confidence, c.confirmation.to_dict() if c.confirmation else None)
                               for c in d.causes], "ok": None})
    print("[live-env-on-healthy-gpu]", d.cause_id, [(c.id, c.confirmation.status if c.confirmation else None)
                                                    for c in d.causes], flush=True)

    run_child("run-no-visible-gpu", "no-driver",
              "import torch; torch.zeros(1).cuda()", {"CUDA_VISIBLE_DEVICES": ""})
    run_child("run-conv-channel-error", "channel-mismatch",
              "import torch; torch.nn.functional.conv2d(torch.randn(1,1,8,8,device='cuda'), "
              "torch.randn(4,3,3,3,device='cuda'))", {})
    run_child("excepthook-in-child", "channel-mismatch",
              "import convdoctor; convdoctor.install_excepthook(); import torch; "
              "torch.nn.functional.conv2d(torch.randn(1,1,8,8,device='cuda'), torch.randn(4,3,3,3,device='cuda'))",
              {}, via_run=False)

    # JAX (installed on the GPU machine): a real XLA out-of-memory, and a conv with wrong channels
    run_child("jax-oom", "gpu-out-of-memory",
              "import jax, jax.numpy as jnp; x = jnp.ones((60 * 1024**3,), dtype=jnp.float32); x.block_until_ready()",
              {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    run_child("jax-conv-wrong-channels", None,
              "import jax, jax.numpy as jnp; jax.lax.conv(jnp.ones((1, 1, 8, 8)), jnp.ones((4, 3, 3, 3)), (1, 1), 'SAME')",
              {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    # a mixed cuDNN install, if another cuDNN copy is on this machine
    fault_dir = os.environ.get("CUDNN_FAULT_DIR") or os.path.join(REPO, ".gpu-extra", "cudnn-cu12", "lib")
    extra = os.path.join(fault_dir, "libcudnn_graph.so.9")
    if os.path.exists(extra):
        run_child("mixed-cudnn-sublibrary", "cudnn-version-mismatch",
                  "import torch; x = torch.randn(1, 3, 16, 16, device='cuda'); "
                  "torch.nn.functional.conv2d(x, torch.randn(4, 3, 3, 3, device='cuda')); torch.cuda.synchronize()",
                  {"LD_PRELOAD": extra})
    else:
        results.append({"case": "mixed-cudnn-sublibrary", "expect": None, "ok": None,
                        "note": f"skipped: {extra} not present"})

    total = time.perf_counter() - t_start
    checked = [r for r in results if r.get("expect")]
    ok = sum(1 for r in checked if r.get("ok"))
    summary = {"env": info, "cases": len(results), "with_expectation": len(checked), "matched": ok,
               "seconds": round(total, 1)}
    with open(os.path.join(OUT, "explain_gpu.json"), "w") as fh:
        json.dump({"summary": summary, "results": results}, fh, indent=1, default=str)
    print("\nSUMMARY explain GPU validation:", json.dumps(summary))
    for r in results:
        flag = "ok " if r.get("ok") else ("-- " if r.get("ok") is None else "BAD")
        print(f"  {flag} {r['case']:28s} expect={r.get('expect')} got={r.get('cause')} "
              f"{(r.get('exception') or r.get('note') or '')[:110]!r}")
    return 0 if ok == len(checked) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        with open(os.path.join(OUT, "explain_gpu.json"), "w") as fh:
            json.dump({"crashed": traceback.format_exc(), "results": results}, fh, indent=1, default=str)
        sys.exit(2)
