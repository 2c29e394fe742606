# ruff: noqa: B023 - the lambdas run inside the iteration that made them
"""Is convdoctor's forward implicit-GEMM kernel (`convdoctor.kernels.fprop`, probe stage) worth a
candidate? For bench-suite fp32 NCHW forward problems with TF32 allowed: times PyTorch's default
path (cuDNN heuristics), cuBLAS's batched product for a stride-1 1x1 layer, and a sweep of the
"k...p...c..." configurations (weights tap-major unless 1x1; the copy timed apart; the best
configuration again on the weight as given, "+w"; FP_SWEEP=j: the "k...p...j..." configurations on the weight as given, with two "c"
ones on the copy, "+tap"), each timed with `triton.testing.do_bench` (L2 cleared before each call, median),
named by the MMA instruction it compiled to, and checked against a float64 reference (norm-wise relative
error), beside the row's tuned and benchmark=True times in the current fp32 forward pass. A child process per problem.
    PYTHONPATH=src python lab/fp_probe.py GROUP/NAME [GROUP/NAME ...]  ->  $OUT/fp_probe.json
"""

from __future__ import annotations

import os
import sys
import time


def one(spec: str) -> dict:
    import torch
    import torch.nn.functional as F  # noqa: N812
    import triton.testing as tt

    from convdoctor.bench.suites import load_suite
    from convdoctor.kernels import fprop as fk

    group, name = spec.split("/", 1)
    from probe_timing import pass_rows

    rows = pass_rows("fp32-nchw", "fprop")
    e = next(e for e in load_suite("cnn-layers").entries if e.group == group and e.name == name)
    p = e.problem(direction="fprop")
    r = rows[(group, name)]
    row = {"group": group, "name": name, "problem": p.key(), "pass_tuned_us": r["tuned_s"] * 1e6,
           "pass_benchmark_us": r["benchmark_s"] * 1e6, "pass_winner": r["winners"][0]}
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
    one_by_one = all(v == 1 for v in p.kernel)
    if one_by_one and not any(p.pad_pre) and not any(p.pad_post):
        # torch:gemm's product (stride 1): cuBLAS batched over the images
        if all(v == 1 for v in p.stride):
            w2 = w.reshape(w.shape[0], -1)
            xv = x.reshape(x.shape[0], x.shape[1], -1)
            row["cublas_bmm_us"] = bench(lambda: torch.matmul(w2, xv))
    # the "k...p..." kernel reads weights along C: a tap-major copy unless 1x1 (timed apart)
    wt = w if one_by_one else fk.tap_major(w)
    if not one_by_one:
        row["tap_major_copy_us"] = bench(lambda: fk.tap_major(w))
    sweep_j = os.environ.get("FP_SWEEP") == "j"
    if sweep_j and not one_by_one:
        # the "k...p...j..." kernel on the weight as given, and the best "c" ones on the copy
        sweep = [(c, w) for c in fk.J_CONFIGS] + [(c, wt) for c in ("k128p64c32w4s3",
                                                                  "k256p64c32w8s3")]
    else:
        sweep = [(c, wt) for c in fk.KP_CONFIGS]
    cfgs = {}
    for cfg, ww in sweep:
        # "+tap": on the tap-major copy in a "j" sweep (its time leaves the copy out); "+w": a
        # "c" configuration on the weight as given
        label = cfg + ("+tap" if sweep_j and ww is wt and not one_by_one else
                       "+w" if not sweep_j and ww is w and not one_by_one else "")
        try:
            y.fill_(float("nan"))
            t1 = time.time()
            ck = fk.launch(x, ww, y, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation,
                        config=cfg, tf32=True)
            torch.cuda.synchronize()
            first = time.time() - t1
            err = ((y.double() - ref).norm() / ref.norm()).item()
            us = bench(lambda: fk.run(x, ww, y, stride=p.stride, pad_pre=p.pad_pre,
                                      dilation=p.dilation, config=cfg, tf32=True))
            ptx = getattr(ck, "asm", {}).get("ptx", "")
            cfgs[label] = {"us": us, "rel_err": err, "first_call_s": first,
                           "mma": "wgmma" if "wgmma" in ptx else ("mma.sync" if "mma.sync" in ptx
                                                                   else "none"),
                           "regs": getattr(ck, "n_regs", None),
                           "spills": getattr(ck, "n_spills", None)}
        except Exception as exc:  # noqa: BLE001
            cfgs[label] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            if "illegal" in str(exc):
                break
    ok = {k: v for k, v in cfgs.items() if "us" in v and "+" not in k}
    if ok and not one_by_one and not sweep_j:
        # the best configuration again on the weight as given (strided along C)
        bestc = min(ok, key=lambda k: ok[k]["us"])
        try:
            us = bench(lambda: fk.run(x, w, y, stride=p.stride, pad_pre=p.pad_pre,
                                      dilation=p.dilation, config=bestc, tf32=True))
            cfgs[bestc + "+w"] = {"us": us}
        except Exception as exc:  # noqa: BLE001
            cfgs[bestc + "+w"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    row["triton"] = cfgs
    if ok:
        bestc = min(ok, key=lambda k: ok[k]["us"])
        row["best_config"], row["triton_best_us"] = bestc, ok[bestc]["us"]
    return row


def _report(row: dict) -> None:
    errs = max(v.get("rel_err", 0) for v in row["triton"].values())
    best = row["triton"][row["best_config"]]
    print(f"{row['group'] + '/' + row['name']:36s} tuned {row['pass_tuned_us']:7.1f} bench "
          f"{row['pass_benchmark_us']:7.1f} | heur {row['torch_heuristic_us']:7.1f} | "
          f"bmm {row.get('cublas_bmm_us', 0):6.1f} tap {row.get('tap_major_copy_us', 0):4.1f} | "
          f"triton {row['triton_best_us']:7.1f} {row['best_config']} {best.get('mma')} "
          f"regs {best.get('regs')} err {errs:.1e}", flush=True)
    print("   " + " ".join(f"{k}:{v['us']:.1f}" for k, v in row["triton"].items() if "us" in v),
          flush=True)


def main() -> int:
    from probe_children import main as children

    return children(__file__, one, sys.argv[1:], "fp_probe.json", _report, per_s=120.0,
                    margin_s=25.0)


if __name__ == "__main__":
    sys.exit(main())
