# ruff: noqa: B023 - the lambdas run inside the iteration that made them
"""Which suite rows could the forward kernel's tuner candidates (`triton:fp_`, the configurations in
`convdoctor.kernels.fprop.OFFERED`) win? For every fp32 NCHW forward row of the bench suite the
kernel runs (ungrouped, 1D/2D), in ONE process: the best of the offered configurations with
`triton.testing.do_bench` (L2 cleared, median; TF32 allowed), beside the row's tuned time in the
current fp32 forward pass (benchmarks/results/bench). Rows where it comes within MARGIN of that time are the ones worth a full bench.
    PYTHONPATH=src python lab/fp_sweep.py  ->  $OUT/fp_sweep.json
"""

from __future__ import annotations

import json
import os
import sys
import time

MARGIN = 1.05


def _time_configs(p) -> dict:  # noqa: ANN001
    """{config: median us, or the error} for the offered configurations on problem `p`."""
    import torch
    import triton.testing as tt

    from convdoctor.kernels import fprop as fk

    x = torch.randn(p.x_shape(), device="cuda")
    w = torch.randn(p.w_shape(), device="cuda")
    y = torch.empty((p.n, p.k, *p.out_spatial()), device="cuda")
    out: dict = {}
    for cfg in fk.OFFERED:
        def run() -> None:
            fk.run(x, w, y, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation, config=cfg,
                   tf32=True)

        try:
            run()
            out[cfg] = tt.do_bench(run, warmup=5, rep=25, return_mode="median") * 1e3
        except Exception as exc:  # noqa: BLE001
            out[cfg] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def main() -> int:
    import torch

    from convdoctor.bench.suites import load_suite
    from convdoctor.kernels import fprop as fk

    out = os.environ.get("OUT", ".")
    from probe_timing import deadline as _deadline
    from probe_timing import pass_rows

    deadline = _deadline(15.0)
    tuned = {k: r["tuned_s"] * 1e6 for k, r in pass_rows("fp32-nchw", "fprop").items()}
    rows = []
    for e in load_suite("cnn-layers").entries:
        p = e.problem(direction="fprop")
        if fk.unfit(p) is not None or (e.group, e.name) not in tuned:
            continue
        if time.time() > deadline:
            print("deadline: stopping before", e.group, e.name, flush=True)
            break
        row = {"group": e.group, "name": e.name, "problem": p.key(),
               "pass_tuned_us": tuned[(e.group, e.name)], "configs": {}}
        try:
            row["configs"] = _time_configs(p)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        torch.cuda.empty_cache()
        ok = {k: v for k, v in row["configs"].items() if isinstance(v, float)}
        if ok:
            best = min(ok, key=ok.__getitem__)
            row["best_config"], row["best_us"] = best, ok[best]
            row["vs_tuned"] = ok[best] / row["pass_tuned_us"]
            flag = " <- within %.0f%%" % ((MARGIN - 1) * 100) if row["vs_tuned"] <= MARGIN else ""
            print(f"{e.group + '/' + e.name:40s} tuned {row['pass_tuned_us']:8.1f} kernel "
                  f"{ok[best]:8.1f} {best} x{row['vs_tuned']:.2f}{flag}", flush=True)
        else:
            print(f"{e.group + '/' + e.name:40s} ERROR {row.get('error') or row['configs']}",
                  flush=True)
        rows.append(row)
        with open(os.path.join(out, "fp_sweep.json"), "w") as f:
            json.dump({"margin": MARGIN, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
