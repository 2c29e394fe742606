"""Child: a small conv2d forward + backward per visible GPU and precision, cuDNN enabled,
checked against a float64 CPU reference. Prints one JSON object.
"""

import json
import sys
import time

CASES = (  # (name, dtype, allow_tf32, tolerance on max|err| / max|ref|)
    ("fp32", "float32", False, 1e-4),
    ("tf32", "float32", True, 1e-2),
    ("fp16", "float16", False, 1e-2),
    ("bf16", "bfloat16", False, 5e-2),
)


def main():
    t0 = time.perf_counter()
    out = {"ran": False, "cases": []}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"import torch: {type(exc).__name__}: {exc}"
        return out
    if not torch.cuda.is_available():
        out["error"] = "torch.cuda.is_available() is False"
        return out
    torch.backends.cudnn.enabled = True
    out["ran"] = True
    g = torch.Generator().manual_seed(0)
    # big enough (reduction of 64*3*3 = 576) that cuDNN picks tensor-core engines for TF32/fp16/bf16
    x64 = torch.randn(2, 64, 32, 32, generator=g, dtype=torch.float64)
    w64 = torch.randn(64, 64, 3, 3, generator=g, dtype=torch.float64)
    gy64 = torch.randn(2, 64, 32, 32, generator=g, dtype=torch.float64)
    xr, wr = x64.clone().requires_grad_(True), w64.clone().requires_grad_(True)
    yr = torch.nn.functional.conv2d(xr, wr, padding=1)
    yr.backward(gy64)
    refs = {"fprop": yr.detach(), "dgrad": xr.grad, "wgrad": wr.grad}
    for dev in range(torch.cuda.device_count()):
        name = torch.cuda.get_device_name(dev)
        cap = torch.cuda.get_device_capability(dev)
        for case, dt, tf32, tol in CASES:
            r = {"device": dev, "gpu": name, "case": case, "tol": tol}
            if dt == "bfloat16" and cap < (8, 0):
                r["skipped"] = "bf16 needs sm_80+"
                out["cases"].append(r)
                continue
            torch.backends.cudnn.allow_tf32 = tf32
            dtype = getattr(torch, dt)
            phase = "fprop"
            try:
                x = x64.to(f"cuda:{dev}", dtype).requires_grad_(True)
                w = w64.to(f"cuda:{dev}", dtype).requires_grad_(True)
                y = torch.nn.functional.conv2d(x, w, padding=1)
                torch.cuda.synchronize(dev)
                phase = "backward"
                y.backward(gy64.to(f"cuda:{dev}", dtype))
                torch.cuda.synchronize(dev)
                errs = {}
                for k, got in (("fprop", y), ("dgrad", x.grad), ("wgrad", w.grad)):
                    ref = refs[k]
                    errs[k] = float((got.detach().double().cpu() - ref).abs().max() / ref.abs().max())
                r["rel_err"] = errs
                r["ok"] = all(e <= tol for e in errs.values())
            except Exception as exc:  # noqa: BLE001
                r["ok"] = False
                r["phase"] = phase
                r["error"] = f"{type(exc).__name__}: {exc}"[:1500]
            out["cases"].append(r)
    # did TF32 really run? (its error is far above strict fp32's when tensor cores were used)
    for dev in range(torch.cuda.device_count()):
        by = {c["case"]: c for c in out["cases"] if c["device"] == dev and "rel_err" in c}
        if "fp32" in by and "tf32" in by:
            by["tf32"]["tf32_effective"] = max(by["tf32"]["rel_err"].values()) > 10 * max(by["fp32"]["rel_err"].values())
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


if __name__ == "__main__":
    json.dump(main(), sys.stdout)
