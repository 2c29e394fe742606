# ruff: noqa: B023 - the lambdas run inside the iteration that made them
"""Is convdoctor's Triton depthwise kernel (`convdoctor.kernels.depthwise`) worth a candidate?

For each depthwise problem of the bench suite (fp32 NCHW and fp16 NHWC, fprop and dgrad) this
times every kernel configuration for the layout, PyTorch's default path (cuDNN heuristics) and
PyTorch with cuDNN off, all with `triton.testing.do_bench` (L2 cleared before each call, median),
and checks each configuration against a float64 reference (norm-wise relative error).
Plain script, no tuner.   PYTHONPATH=src python lab/dw_probe.py   ->  $OUT/dw_probe.json
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

from convdoctor.bench.suites import load_suite
from convdoctor.kernels import depthwise as dw


def _bench(fn):
    import triton.testing as tt

    return tt.do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e3  # us


def _conv(nd):
    return {1: F.conv1d, 2: F.conv2d}[nd]


def main() -> int:
    out = os.environ.get("OUT", ".")
    rows = []
    suite = load_suite("cnn-layers")
    probs = []
    for e in suite.entries:
        p0 = e.problem()
        if p0.groups < 2 or not (p0.groups == p0.c == p0.k) or p0.ndim > 2:
            continue
        for dtype, layout in (("float32", "nchw"), ("float16", "nhwc")):
            for d in ("fprop", "dgrad"):
                probs.append((e.name, e.problem(direction=d, dtype=dtype, layout=layout)))
    print(f"{len(probs)} problems; triton", __import__("triton").__version__, flush=True)
    t_start = time.time()
    for name, p in probs:
        d, dtype, layout = p.direction, p.dtype, p.layout
        row = {"name": name, "problem": p.key()}
        try:
            dt = getattr(torch, dtype)
            nd = p.ndim
            fmt = torch.channels_last if (layout == "nhwc" and nd == 2) else torch.contiguous_format
            x = torch.randn(p.x_shape(), device="cuda", dtype=dt).contiguous(memory_format=fmt)
            w = torch.randn(p.w_shape(), device="cuda", dtype=dt)
            pad = [v for i in reversed(range(nd)) for v in (p.pad_pre[i], p.pad_post[i])]
            sym = p.symmetric_padding
            conv = _conv(nd)

            def torch_fwd(xx):
                if sym:
                    return conv(xx, w, stride=p.stride, padding=p.pad_pre, dilation=p.dilation, groups=p.groups)
                return conv(F.pad(xx, pad), w, stride=p.stride, dilation=p.dilation, groups=p.groups)

            y = torch_fwd(x)
            dy = torch.randn_like(y)
            if d == "fprop":
                xd = F.pad(x.double(), pad)
                ref = conv(xd, w.double(), stride=p.stride, dilation=p.dilation, groups=p.groups)
                base = lambda: torch_fwd(x)  # noqa: E731
                run = lambda cfg, o: dw.run("fprop", x, w, o, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation, config=cfg)  # noqa: E731
                dst = torch.empty_like(y)
            else:
                xr = F.pad(x.double(), pad).requires_grad_()
                yy = conv(xr, w.double(), stride=p.stride, dilation=p.dilation, groups=p.groups)
                (g,) = torch.autograd.grad(yy, xr, dy.double())
                sl = (slice(None), slice(None)) + tuple(slice(p.pad_pre[i], p.pad_pre[i] + p.spatial[i]) for i in range(nd))
                ref = g[sl]
                xs = list(p.x_shape())
                if sym:
                    base = lambda: torch.ops.aten.convolution_backward(dy, x, w, None, list(p.stride), list(p.pad_pre), list(p.dilation), False, [0] * nd, p.groups, [True, False, False])[0]  # noqa: E731
                else:
                    xp = F.pad(x, pad)
                    base = lambda: torch.ops.aten.convolution_backward(dy, xp, w, None, list(p.stride), [0] * nd, list(p.dilation), False, [0] * nd, p.groups, [True, False, False])[0]  # noqa: E731
                run = lambda cfg, o: dw.run("dgrad", dy, w, o, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation, config=cfg)  # noqa: E731
                dst = torch.empty(xs, device="cuda", dtype=dt).contiguous(memory_format=fmt)
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.allow_tf32 = True
            row["torch_heuristic_us"] = _bench(base)
            with torch.backends.cudnn.flags(enabled=False):
                row["torch_cudnn_off_us"] = _bench(base)
            cfgs = {}
            for cfg in dw.configs_for(layout, math.prod(dst.shape[2:])):
                try:
                    dst.fill_(float("nan"))
                    run(cfg, dst)
                    torch.cuda.synchronize()
                    err = ((dst.double() - ref).norm() / ref.norm()).item()
                    cfgs[cfg] = {"us": _bench(lambda: run(cfg, dst)), "rel_err": err}
                except Exception as exc:  # noqa: BLE001
                    cfgs[cfg] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            row["triton"] = cfgs
            best = min((v["us"] for v in cfgs.values() if "us" in v), default=None)
            row["triton_best_us"] = best
            if best:
                ref_t = min(row["torch_heuristic_us"], row["torch_cudnn_off_us"])
                row["speedup_vs_best_torch"] = ref_t / best
            print(f"{d} {dtype} {layout} {name:28s} heur {row['torch_heuristic_us']:8.1f} off {row['torch_cudnn_off_us']:8.1f} "
                  f"triton {best if best is None else round(best, 1)} x{row.get('speedup_vs_best_torch', 0):.2f} "
                  f"err {max((v.get('rel_err', 0) for v in cfgs.values()), default=0):.1e}", flush=True)
        except Exception as exc:  # noqa: BLE001
            row["error"] = traceback.format_exc()[-800:]
            print("ERROR", name, d, dtype, exc, flush=True)
        rows.append(row)
        with open(os.path.join(out, "dw_probe.json"), "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                       "rows": rows, "seconds": time.time() - t_start}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
