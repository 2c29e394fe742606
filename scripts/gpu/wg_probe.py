# ruff: noqa: B023 - the lambdas run inside the iteration that made them
"""Is convdoctor's Triton wgrad kernel (`convdoctor.kernels.wgrad`) worth a candidate?

For the bench suite's wgrad problems the kernel may run (ungrouped, weight <= wgrad.MAX_WEIGHT
elements) whose session-27 tuned time moved fewer than MAX_TBS TB/s (far from the memory roofline),
in fp32 NCHW with TF32 allowed: times PyTorch's default path (cuDNN heuristics) and PyTorch with
cuDNN off, and every offered kernel configuration (plus extra ones, and the best at other split
targets), all with `triton.testing.do_bench` (L2 cleared before each call, median), each checked
against a float64 reference (norm-wise relative error). Prints the session-27 tuned and
benchmark=True times beside them. Plain script, no tuner.
    python scripts/gpu/wg_probe.py [MAX_TBS] [NAME_REGEX]  ->  $OUT/wg_probe.json
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback

import torch

from convdoctor.kernels import wgrad as wg
from convdoctor.tune.suites import load_suite

EXTRA_SMALL = ("m32n64l128w4s3", "m16n128l64w4s3")
EXTRA_LARGE = ("m64n128l64w8s3", "m128n128l32w8s3")


def _bench(fn):
    import triton.testing as tt

    return tt.do_bench(fn, warmup=10, rep=50, return_mode="median") * 1e3  # us


def main() -> int:
    out = os.environ.get("OUT", ".")
    max_tbs = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    rx = re.compile(sys.argv[2]) if len(sys.argv) > 2 else None
    deadline = time.time() + float(os.environ.get("AREA_LEFT", "1e9")) - 15
    s27 = json.load(open("docs/results/s27/bench_fp32-nchw_wgrad_full_3referees_mixed5b.json"))
    by = {(r["group"], r["name"]): r for r in s27["rows"]}
    probs = []
    for e in load_suite("cnn-layers").entries:
        p = e.problem(direction="wgrad")
        if wg.eligible("wgrad", p.ndim, p.c, p.k, p.groups, p.kernel, p.dtype):
            continue
        r = by.get((e.group, e.name))
        if r is None or (rx and not rx.search(e.name)):
            continue
        tbs = p.min_bytes() / r["tuned_s"] / 1e12
        if tbs < max_tbs:
            probs.append((e, p, r))
    # the rows just under 1.10x first, then the farthest from the roofline
    probs.sort(key=lambda q: (not 1.0 < q[2]["speedup_vs_benchmark"] < 1.10,
                              q[1].min_bytes() / q[2]["tuned_s"]))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{len(probs)} problems; triton {__import__('triton').__version__}; {sms} SMs", flush=True)
    rows = []
    t0 = time.time()
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    for e, p, r in probs:
        if time.time() > deadline:
            print("deadline: stopping", flush=True)
            break
        row = {"group": e.group, "name": e.name, "problem": p.key(),
               "s27_tuned_us": r["tuned_s"] * 1e6, "s27_benchmark_us": r["benchmark_s"] * 1e6}
        try:
            nd = p.ndim
            x = torch.randn(p.x_shape(), device="cuda")
            dy = torch.randn(p.y_shape(), device="cuda")
            w = torch.randn(p.w_shape(), device="cuda")
            sym = p.symmetric_padding
            pads = list(p.pad_pre)
            if not sym:
                pad = [v for i in reversed(range(nd)) for v in (p.pad_pre[i], p.pad_post[i])]
                x = torch.nn.functional.pad(x, pad)
                pads = [0] * nd

            def base(xx=x, dd=dy, ww=w):
                return torch.ops.aten.convolution_backward(
                    dd, xx, ww, None, list(p.stride), pads, list(p.dilation), False, [0] * nd,
                    1, [False, True, False])[1]

            ref = base(x.double(), dy.double(), w.double())
            row["torch_heuristic_us"] = _bench(base)
            with torch.backends.cudnn.flags(enabled=False):
                row["torch_cudnn_off_us"] = _bench(base)
            dw = torch.empty(p.w_shape(), device="cuda")
            cfgs = {}
            extra = EXTRA_SMALL if p.k <= 32 else EXTRA_LARGE
            # the kernel sees the UNPADDED input with the problem's own padding
            xk = x if sym else torch.randn(p.x_shape(), device="cuda")
            if not sym:
                ref = torch.ops.aten.convolution_backward(
                    dy.double(), torch.nn.functional.pad(xk.double(), pad), w.double(), None,
                    list(p.stride), [0] * nd, list(p.dilation), False, [0] * nd, 1,
                    [False, True, False])[1]
            for cfg in wg.configs_for(p.k) + extra:
                try:
                    dw.fill_(float("nan"))
                    t1 = time.time()
                    wg.run(xk, dy, dw, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation,
                           config=cfg, tf32=True)
                    torch.cuda.synchronize()
                    comp = time.time() - t1
                    err = ((dw.double() - ref).norm() / ref.norm()).item()
                    us = _bench(lambda: wg.run(xk, dy, dw, stride=p.stride, pad_pre=p.pad_pre,
                                               dilation=p.dilation, config=cfg, tf32=True))
                    cfgs[cfg] = {"us": us, "rel_err": err, "first_call_s": comp}
                except Exception as exc:  # noqa: BLE001
                    cfgs[cfg] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            ok = {k: v for k, v in cfgs.items() if "us" in v}
            if ok:
                bestc = min(ok, key=lambda k: ok[k]["us"])
                waves = {}
                for wv in (1, 2, 8, 16):
                    wg.WAVES = wv
                    try:
                        waves[wv] = _bench(lambda: wg.run(xk, dy, dw, stride=p.stride,
                                                          pad_pre=p.pad_pre, dilation=p.dilation,
                                                          config=bestc, tf32=True))
                    finally:
                        wg.WAVES = 4
                row["best_config"] = bestc
                row["waves_us"] = waves
            row["triton"] = cfgs
            best = min((v["us"] for v in ok.values()), default=None)
            row["triton_best_us"] = best
            print(f"{e.group:12s} {e.name:28s} s27 tuned {row['s27_tuned_us']:7.1f} bench "
                  f"{row['s27_benchmark_us']:7.1f} | heur {row['torch_heuristic_us']:7.1f} off "
                  f"{row['torch_cudnn_off_us']:8.1f} triton {best and round(best, 1)} "
                  f"({row.get('best_config')}) waves {row.get('waves_us') and {k: round(v, 1) for k, v in row['waves_us'].items()}} "
                  f"err {max((v.get('rel_err', 0) for v in cfgs.values()), default=0):.1e} "
                  f"fails {[k for k in cfgs if k not in ok]}", flush=True)
        except Exception as exc:  # noqa: BLE001
            row["error"] = traceback.format_exc()[-800:]
            print("ERROR", e.name, exc, flush=True)
        rows.append(row)
        with open(os.path.join(out, "wg_probe.json"), "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                       "triton": __import__("triton").__version__, "sms": sms, "rows": rows,
                       "seconds": time.time() - t0}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
