# ruff: noqa: B023 - the lambdas run inside the iteration that made them
"""Is convdoctor's forward implicit-GEMM kernel (`convdoctor.kernels.fprop`, probe stage) worth a
candidate? For bench-suite fp32 NCHW forward problems with TF32 allowed: times PyTorch's default
path (cuDNN heuristics) and a sweep of kernel configurations with `triton.testing.do_bench` (L2
cleared before each call, median), each checked against a float64 reference (norm-wise relative
error), beside session 29's tuned and benchmark=True times for the row. A child process per problem.
    python scripts/gpu/fp_probe.py GROUP/NAME [GROUP/NAME ...]  ->  $OUT/fp_probe.json
"""

from __future__ import annotations

import json
import sys
import time

S29 = "docs/results/s29/bench_fp32-nchw_fprop_full.json"


def one(spec: str) -> dict:
    import torch
    import torch.nn.functional as F  # noqa: N812
    import triton.testing as tt

    from convdoctor.kernels import fprop as fk
    from convdoctor.tune.suites import load_suite

    group, name = spec.split("/", 1)
    rows = {(r["group"], r["name"]): r for r in json.load(open(S29))["rows"]}
    e = next(e for e in load_suite("cnn-layers").entries if e.group == group and e.name == name)
    p = e.problem(direction="fprop")
    r = rows[(group, name)]
    row = {"group": group, "name": name, "problem": p.key(), "s29_tuned_us": r["tuned_s"] * 1e6,
           "s29_benchmark_us": r["benchmark_s"] * 1e6, "s29_winner": r["winners"][0]}
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    nd = p.ndim
    x = torch.randn(p.x_shape(), device="cuda")
    w = torch.randn(p.w_shape(), device="cuda")
    pad = [v for i in reversed(range(nd)) for v in (p.pad_pre[i], p.pad_post[i])]
    conv = {1: F.conv1d, 2: F.conv2d}[nd]

    def base(xx=x, ww=w):
        xp = xx if p.symmetric_padding else F.pad(xx, pad)
        return conv(xp, ww, None, list(p.stride), list(p.pad_pre) if p.symmetric_padding
                    else 0, list(p.dilation), 1)

    ref = base(x.double(), w.double())
    bench = lambda f: tt.do_bench(f, warmup=10, rep=40, return_mode="median") * 1e3  # noqa: E731
    row["torch_heuristic_us"] = bench(base)
    y = torch.empty(ref.shape, device="cuda")
    cfgs = {}
    for cfg in fk.CONFIGS:
        try:
            y.fill_(float("nan"))
            t1 = time.time()
            fk.run(x, w, y, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation, config=cfg,
                   tf32=True)
            torch.cuda.synchronize()
            first = time.time() - t1
            err = ((y.double() - ref).norm() / ref.norm()).item()
            us = bench(lambda: fk.run(x, w, y, stride=p.stride, pad_pre=p.pad_pre,
                                      dilation=p.dilation, config=cfg, tf32=True))
            cfgs[cfg] = {"us": us, "rel_err": err, "first_call_s": first}
        except Exception as exc:  # noqa: BLE001
            cfgs[cfg] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            if "illegal" in str(exc):
                break
    row["triton"] = cfgs
    ok = {k: v for k, v in cfgs.items() if "us" in v}
    if ok:
        bestc = min(ok, key=lambda k: ok[k]["us"])
        row["best_config"], row["triton_best_us"] = bestc, ok[bestc]["us"]
    return row


def _report(row: dict) -> None:
    errs = max(v.get("rel_err", 0) for v in row["triton"].values())
    print(f"{row['group'] + '/' + row['name']:36s} s29 tuned {row['s29_tuned_us']:7.1f} bench "
          f"{row['s29_benchmark_us']:7.1f} | heur {row['torch_heuristic_us']:7.1f} | "
          f"triton {row['triton_best_us']:7.1f} {row['best_config']} err {errs:.1e}", flush=True)
    print("   " + " ".join(f"{k}:{v['us']:.1f}" for k, v in row["triton"].items() if "us" in v),
          flush=True)


def main() -> int:
    from probe_children import main as children

    return children(__file__, one, sys.argv[1:], "fp_probe.json", _report, per_s=120.0,
                    margin_s=25.0)


if __name__ == "__main__":
    sys.exit(main())
