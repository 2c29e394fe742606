# ruff: noqa: B023 - the lambdas run inside the iteration that made them
"""Is convdoctor's Triton wgrad kernel (`convdoctor.kernels.wgrad`) worth a candidate?

For bench-suite wgrad problems in fp32 NCHW with TF32 allowed: times PyTorch's default path (cuDNN
heuristics), PyTorch with cuDNN off and a sweep of kernel configurations (per-tap and per-tap-row
programs, tile shapes), all with `triton.testing.do_bench` (L2 cleared before each call, median),
each checked against a float64 reference (norm-wise relative error), beside the row's tuned and
benchmark=True times in the current fp32 wgrad pass (benchmarks/results/bench). Each problem runs in a child process (a kernel fault costs that problem only).
    PYTHONPATH=src python lab/wg_probe.py NAME [NAME ...]   ->  $OUT/wg_probe.json, one line per problem
"""

from __future__ import annotations

import sys
import time


def configs(k: int, c: int, taps_w: int) -> list[str]:
    out = ["m32n32l64w4s3", "m32n32l128w4s3", "m32n64l64w4s3", "m16n32l128w4s3"]
    if k > 32:
        out += ["m64n64l64w4s3", "m64n32l128w4s3", "m128n64l32w8s3", "m64n128l64w8s3"]
    out += ["m32n64l64w4s3r", "m32n32l128w4s3r", "m16n16l128w4s3r"]
    if k > 32:
        out += ["m64n64l64w4s3r", "m64n128l32w8s3r"]
    return out


def one(name: str) -> dict:
    import torch
    import triton.testing as tt
    from probe_timing import pass_rows

    from convdoctor.bench.suites import load_suite
    from convdoctor.kernels import wgrad as wg

    rows = {k[1]: r for k, r in pass_rows("fp32-nchw", "wgrad").items()}
    e = next(e for e in load_suite("cnn-layers").entries if e.name == name)
    p = e.problem(direction="wgrad")
    r = rows[name]
    row = {"group": e.group, "name": name, "problem": p.key(),
           "pass_tuned_us": r["tuned_s"] * 1e6, "pass_benchmark_us": r["benchmark_s"] * 1e6}
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    nd = p.ndim
    x = torch.randn(p.x_shape(), device="cuda")
    dy = torch.randn(p.y_shape(), device="cuda")
    w = torch.randn(p.w_shape(), device="cuda")
    pad = [v for i in reversed(range(nd)) for v in (p.pad_pre[i], p.pad_post[i])]
    xp = x if p.symmetric_padding else torch.nn.functional.pad(x, pad)
    pads = list(p.pad_pre) if p.symmetric_padding else [0] * nd

    def base(xx=xp, dd=dy, ww=w):
        return torch.ops.aten.convolution_backward(dd, xx, ww, None, list(p.stride), pads,
                                                   list(p.dilation), False, [0] * nd, 1,
                                                   [False, True, False])[1]

    ref = base(xp.double(), dy.double(), w.double())
    bench = lambda f: tt.do_bench(f, warmup=10, rep=40, return_mode="median") * 1e3  # noqa: E731
    row["torch_heuristic_us"] = bench(base)
    with torch.backends.cudnn.flags(enabled=False):
        row["torch_cudnn_off_us"] = bench(base)
    dw = torch.empty(p.w_shape(), device="cuda")
    cfgs = {}
    for cfg in configs(p.k, p.c, p.kernel[-1]):
        try:
            dw.fill_(float("nan"))
            t1 = time.time()
            wg.run(x, dy, dw, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation,
                   config=cfg, tf32=True)
            torch.cuda.synchronize()
            first = time.time() - t1
            err = ((dw.double() - ref).norm() / ref.norm()).item()
            us = bench(lambda: wg.run(x, dy, dw, stride=p.stride, pad_pre=p.pad_pre,
                                      dilation=p.dilation, config=cfg, tf32=True))
            cfgs[cfg] = {"us": us, "rel_err": err, "first_call_s": first}
        except Exception as exc:  # noqa: BLE001
            cfgs[cfg] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            if "illegal" in str(exc) or "CUDA" in str(exc):
                break
    row["triton"] = cfgs
    ok = {k: v for k, v in cfgs.items() if "us" in v}
    if ok:
        bestc = min(ok, key=lambda k: ok[k]["us"])
        row["best_config"], row["triton_best_us"] = bestc, ok[bestc]["us"]
        waves = {}
        # the best configuration at 2 and 8 programs per SM ("v<N>" in the configuration)
        base = bestc.split("v")[0]
        for wv in (2, 8):
            try:
                waves[wv] = bench(lambda: wg.run(x, dy, dw, stride=p.stride, pad_pre=p.pad_pre,
                                                 dilation=p.dilation, config=f"{base}v{wv}",
                                                 tf32=True))
            except Exception as exc:  # noqa: BLE001
                waves[wv] = f"{type(exc).__name__}: {exc}"[:200]
        row["waves_us"] = waves
    return row


def _report(row: dict) -> None:
    fails = [k for k, v in row["triton"].items() if "us" not in v]
    print(f"{row['name']:28s} tuned {row['pass_tuned_us']:7.1f} bench {row['pass_benchmark_us']:7.1f}"
          f" | heur {row['torch_heuristic_us']:7.1f} off {row['torch_cudnn_off_us']:8.1f} | "
          f"triton {row['triton_best_us']:7.1f} {row['best_config']} waves "
          f"{ {k: (round(v, 1) if isinstance(v, float) else v) for k, v in row['waves_us'].items()} } "
          f"err {max(v.get('rel_err', 0) for v in row['triton'].values()):.1e} fails {fails}",
          flush=True)
    print("   " + " ".join(f"{k}:{v['us']:.0f}" for k, v in row["triton"].items() if "us" in v),
          flush=True)


def main() -> int:
    from probe_children import main as children

    return children(__file__, one, sys.argv[1:], "wg_probe.json", _report, per_s=150.0)


if __name__ == "__main__":
    sys.exit(main())
