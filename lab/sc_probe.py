# ruff: noqa: B023 - the lambdas run inside the iteration that made them
"""Is convdoctor's small-C dgrad Triton kernel (`convdoctor.kernels.smallc`) worth a candidate?

For the "cnn-layers" suite's dgrad problems in fp32 NCHW that the kernel runs (ungrouped, C <= 4):
times PyTorch's default path (cuDNN heuristics, TF32 allowed, benchmark off), PyTorch with cuDNN
off and a sweep of kernel configurations (masked gather and, at a stride, sub-pixel "s"), all with
`triton.testing.do_bench` (L2 cleared before each call, median), each checked against a float64
reference (norm-wise relative error), beside the row's tuned time in the current fp32 dgrad pass
(benchmarks/results/bench).
Each problem runs in a child process (a kernel fault costs that problem only).
    PYTHONPATH=src python lab/sc_probe.py [NAME ...]   ->  $OUT/sc_probe.json, one line per problem
NAME is an entry name ("enc1") or "group:name" ("resnet50:conv1"); none: every eligible row.
SC_CONFIGS="k4p512w4,k8p256w4" replaces the sweep (each also as "s" where strided).
"""

from __future__ import annotations

import os
import sys
import time

SWEEP = ("k4p256w4", "k8p256w4", "k16p256w4", "k4p512w4", "k8p512w4", "k16p512w8", "k4p1024w4",
         "k8p1024w4", "k4p1024w8", "k8p1024w8")


def _entries(names: list[str]) -> list:
    from convdoctor.bench.suites import load_suite
    from convdoctor.kernels import smallc as sc

    out = []
    for e in load_suite("cnn-layers").entries:
        p = e.problem(direction="dgrad")
        if p.dtype != "float32" or p.layout != "nchw":
            continue
        if sc.eligible("dgrad", p.ndim, p.c, p.k, p.groups, p.dtype, n=p.n) is not None:
            continue
        if not names or e.name in names or f"{e.group}:{e.name}" in names:
            out.append(e)
    return out


def configs(k: int, strided: bool) -> list[str]:
    p2 = 1
    while p2 < k:
        p2 *= 2
    sweep = os.environ.get("SC_CONFIGS", "").split(",") if os.environ.get("SC_CONFIGS") else SWEEP
    base = [c for c in sweep if int(c[1:c.index("p")]) <= max(p2, 4) and not c.endswith("s")]
    return base + ([c + "s" for c in base] if strided else [])


def one(name: str) -> dict:
    import torch
    import triton.testing as tt

    from convdoctor.kernels import smallc as sc

    e = _entries([name])[0]
    p = e.problem(direction="dgrad")
    row: dict = {"group": e.group, "name": e.name, "problem": p.key()}
    try:
        from probe_timing import pass_rows

        r = pass_rows("fp32-nchw", "dgrad")[(e.group, e.name)]
        row["pass_heuristic_us"], row["pass_tuned_us"] = r["heuristic_s"] * 1e6, r["tuned_s"] * 1e6
    except (OSError, KeyError, ValueError):
        pass
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    nd = p.ndim
    g = torch.Generator(device="cuda").manual_seed(0)
    dy = torch.randn(p.y_shape(), device="cuda", generator=g)
    w = torch.randn(p.w_shape(), device="cuda", generator=g)
    x_shape = tuple(p.x_shape())
    # asymmetric padding: PyTorch pads the input, so its dgrad is the padded input's, sliced
    padded = tuple(x_shape[:2]) + tuple(x_shape[2 + i] + p.pad_pre[i] + p.pad_post[i]
                                        for i in range(nd))
    xp = torch.empty(padded if not p.symmetric_padding else x_shape, device="cuda")
    pads = list(p.pad_pre) if p.symmetric_padding else [0] * nd
    sl = (slice(None), slice(None)) + (
        tuple(slice(None) for _ in range(nd)) if p.symmetric_padding
        else tuple(slice(p.pad_pre[i], p.pad_pre[i] + x_shape[2 + i]) for i in range(nd)))

    def base(dd=dy, xx=xp, ww=w):
        return torch.ops.aten.convolution_backward(dd, xx, ww, None, list(p.stride), pads,
                                                   list(p.dilation), False, [0] * nd, 1,
                                                   [True, False, False])[0]

    ref = base(dy.double(), xp.double(), w.double())[sl]
    bench = lambda f: tt.do_bench(f, warmup=10, rep=40, return_mode="median") * 1e3  # noqa: E731
    row["torch_heuristic_us"] = bench(base)
    row["torch_heuristic_rel_err"] = ((base()[sl].double() - ref).norm() / ref.norm()).item()
    with torch.backends.cudnn.flags(enabled=False):
        row["torch_cudnn_off_us"] = bench(base)
    dx = torch.empty(x_shape, device="cuda")
    row["bytes"] = (dy.numel() + dx.numel() + w.numel()) * 4
    strided = any(int(s) > 1 for s in p.stride)
    cfgs = {}
    for cfg in configs(p.k, strided):
        kw = dict(stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation, config=cfg)
        try:
            dx.fill_(float("nan"))
            t1 = time.time()
            sc.run(dy, w, dx, **kw)
            torch.cuda.synchronize()
            first = time.time() - t1
            err = ((dx.double() - ref).norm() / ref.norm()).item()
            us = bench(lambda: sc.run(dy, w, dx, **kw))
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
        row["triton_best_tbps"] = row["bytes"] / (ok[bestc]["us"] * 1e-6) / 1e12
        offered = [c for c in sc.configs_for(p.k, strided) if c in ok]
        if offered:
            bo = min(offered, key=lambda k: ok[k]["us"])
            row["best_offered_config"], row["triton_best_offered_us"] = bo, ok[bo]["us"]
    return row


def _report(row: dict) -> None:
    fails = [k for k, v in row["triton"].items() if "us" not in v]
    tuned = row.get("pass_tuned_us")
    print(f"{row['group'] + ':' + row['name']:36s} "
          f"tuned {tuned if tuned is None else round(tuned, 1)} | "
          f"heur {row['torch_heuristic_us']:7.1f} off {row['torch_cudnn_off_us']:8.1f} | "
          f"triton {row['triton_best_us']:7.1f} {row['best_config']} "
          f"({row['triton_best_tbps']:.2f} TB/s) offered "
          f"{row.get('best_offered_config')} {row.get('triton_best_offered_us', 0):.1f} "
          f"err {max(v.get('rel_err', 0) for v in row['triton'].values()):.1e} "
          f"fails {fails}", flush=True)
    print("   " + " ".join(f"{k}:{v['us']:.0f}" for k, v in row["triton"].items() if "us" in v),
          flush=True)


def main() -> int:
    from probe_children import main as children

    names = sys.argv[1:] or [f"{e.group}:{e.name}" for e in _entries([])]
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        names = []
    return children(__file__, one, names, "sc_probe.json", _report,
                    per_s=float(os.environ.get("SC_PROBE_TIMEOUT", "240")))


if __name__ == "__main__":
    sys.exit(main())
