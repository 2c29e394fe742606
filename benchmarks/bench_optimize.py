"""End-to-end benchmark of `convdoctor.optimize`, and its per-call overhead.

    PYTHONPATH=src python benchmarks/bench_optimize.py --device cpu --quick --out /tmp/bench
    PYTHONPATH=src python benchmarks/bench_optimize.py --device cuda --out $OUT      # H100

Per model/precision (ResNet-50 fp32 NCHW with TF32 allowed, ResNet-50 bf16 channels_last, a 3D
U-Net, the wav2vec2 speech front end with single-channel input) and mode (training step = forward,
backward, SGD step; inference = forward under no_grad) it times, interleaved in rounds (warm-up, then
steps; the median is reported):
  eager_heuristic   PyTorch eager, cudnn.benchmark=False
  eager_benchmark   PyTorch eager, cudnn.benchmark=True (CUDA only)
  compile           torch.compile(mode="max-autotune") (only for the models named in --compile)
  convdoctor        convdoctor.optimize(model, x, train) on the tuning database in --out
Each variant runs in its own process (PyTorch caches its cuDNN choice per shape without the
benchmark flag, so in one process the first mode to run a shape decides for the others).
And, on CUDA, the time to the first training step of ResNet-50 fp32 in a fresh process: with a
warm database (optimize + first step) against cudnn.benchmark=True (its search + first step).
`overhead()` measures the CPU time per convolution call: stock module vs routed module.
Writes JSON into --out and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from convdoctor import zoo  # noqa: E402
from convdoctor.runtime import optimizer as opt  # noqa: E402
from convdoctor.runtime.timing import make_step, median, sync, time_steps  # noqa: E402

CONFIGS: dict[str, dict[str, Any]] = {
    "resnet50_fp32": {"model": "resnet50", "cuda": (32, 3, 224, 224), "cpu": (2, 3, 64, 64),
                      "dtype": "float32", "channels_last": False},
    "resnet50_bf16_cl": {"model": "resnet50", "cuda": (32, 3, 224, 224), "cpu": (2, 3, 64, 64),
                         "dtype": "bfloat16", "channels_last": True},
    "speech_fp32": {"model": "speech_frontend", "cuda": (16, 1, 16000), "cpu": (2, 1, 4000),
                    "dtype": "float32", "channels_last": False},
    "unet3d_fp32": {"model": "unet3d", "cuda": (2, 1, 32, 64, 64), "cpu": (1, 1, 16, 16, 16),
                    "dtype": "float32", "channels_last": False},
}


def build(cfg: dict[str, Any], dev: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    dtype = getattr(torch, cfg["dtype"])
    model = zoo.get(cfg["model"]).to(device=dev, dtype=dtype)
    x = torch.randn(*cfg[dev], device=dev, dtype=dtype)
    if cfg["channels_last"]:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x


def variant_child(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one variant over every config and mode in THIS process (the parent starts one process
    per variant: PyTorch caches its cuDNN choice per shape without the benchmark flag, so heuristic
    and benchmark runs in one process would share choices)."""
    dev = args.device
    if dev == "cuda":
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.benchmark = variant == "eager_benchmark"
    deadline = time.monotonic() + args.time_budget
    out: dict[str, Any] = {}
    for name in args.configs.split(","):
        cfg = CONFIGS[name]
        if variant == "compile" and cfg["model"] not in args.compile:
            continue
        for train in (True, False):
            mode = "train" if train else "inference"
            res: dict[str, Any] = {}
            try:
                model, x = build(cfg, dev)
                if not train:
                    model.eval()
                t0 = time.monotonic()
                if variant == "compile":
                    model = torch.compile(model, mode="max-autotune")
                elif variant == "convdoctor":
                    left = deadline - time.monotonic()
                    opt.optimize(model, x, train=train, db=args.db, tune_missing=left > 0,
                                 budget_s=args.budget, steps=max(4, args.steps // 2),
                                 backend="cuda" if dev == "cuda" else "cpu",
                                 tune_time_limit_s=max(left, 0.0))
                    rep = opt.report_of(model)
                    res["report"] = {
                        "channels_last": rep.channels_last,
                        "channels_last_reason": rep.channels_last_reason,
                        "routing": rep.routing, "routing_reason": rep.routing_reason,
                        "problems": rep.problems, "from_db": rep.from_db, "tuned": rep.tuned,
                        "untuned": rep.untuned, "tuning_s": rep.tuning_s, "notes": rep.notes[:20],
                        "choices": _choice_counts(rep)}
                step = make_step(model, x, train, with_optimizer=train)
                step()
                sync(dev)
                res["setup_and_first_step_s"] = time.monotonic() - t0
                samples = time_steps(step, dev, warmup=4, steps=args.steps)
                res["ms"] = median(samples)
                res["samples_ms"] = samples
                del model, step
            except Exception as exc:  # noqa: BLE001 - reported, the other configs go on
                res["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
            out.setdefault(name, {})[mode] = res
            if dev == "cuda":
                torch.cuda.empty_cache()
    return out


def run_variant(variant: str, args: argparse.Namespace, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--variant-child", variant,
           "--device", args.device, "--configs", args.configs, "--db", args.db,
           "--steps", str(args.steps), "--budget", str(args.budget),
           "--time-budget", str(args.time_budget), "--compile", ",".join(args.compile)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"_error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"_error": f"exit {p.returncode}: {p.stderr[-1500:]}"}
    data = json.loads(lines[-1])
    data["_wall_s"] = time.monotonic() - t0
    return data  # type: ignore[no-any-return]


def _choice_counts(rep: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for lay in rep.layers:
        for d in lay.directions:
            k = d.key.split("_")[0] if d.key.startswith("cudnn:") else d.key
            counts[k] = counts.get(k, 0) + 1
    return counts


# ---------------------------------------------------------------------- time to first step
def first_step_child(mode: str, db: str, cl: str) -> None:
    t_imp = time.monotonic()
    dev = "cuda"
    torch.cuda.init()
    cfg = CONFIGS["resnet50_fp32"]
    model, x = build(cfg, dev)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    if mode == "benchmark":
        torch.backends.cudnn.benchmark = True
    else:
        opt.optimize(model, x, train=True, db=db, tune_missing=False, verify=False,
                     channels_last={"1": True, "0": False}.get(cl, "auto"), backend="cuda")
    step = make_step(model, x, True, with_optimizer=True)
    step()
    torch.cuda.synchronize()
    t1 = time.monotonic()
    step()
    torch.cuda.synchronize()
    t2 = time.monotonic()
    print(json.dumps({"mode": mode, "first_step_s": t1 - t0, "second_step_s": t2 - t1,
                      "setup_s": t0 - t_imp}))


def first_step(db: str, cl: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("benchmark", "convdoctor"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--first-step-child", mode,
               "--db", db, "--cl", "1" if cl else "0"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            out[mode] = json.loads(line[-1]) if line else {"error": p.stderr[-800:]}
        except Exception as exc:  # noqa: BLE001
            out[mode] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


# ---------------------------------------------------------------------- per-call overhead
def overhead(dev: str, calls: int = 300, repeats: int = 15) -> list[dict[str, Any]]:
    """CPU time per conv call (launch-bound sizes): stock module vs routed (PyTorch flags) vs
    routed cuDNN plan (CUDA). Calls are issued back to back; the device is synchronized only at the
    end of each batch of calls, so for these tiny problems the time is the host's dispatch time.
    Variants are interleaved batch by batch (stock, routed, ..., stock, routed, ...) so load from
    other processes hits them alike; medians are reported."""
    rows = []
    if dev != "cuda":  # the host runs the convolution itself: keep it small
        calls, repeats = 60, 15
    for n, c, hw in ((1, 16, 8), (8, 64, 14) if dev == "cuda" else (2, 32, 8)):
        rows.append(_overhead_one(dev, n, c, hw, calls, repeats))
    return rows


def _overhead_one(dev: str, n: int, c: int, hw: int, calls: int, repeats: int) -> dict[str, Any]:
    from convdoctor.runtime import site as S
    from convdoctor.runtime.execs import FlagExec, flag_exec

    if True:
        m = torch.nn.Conv2d(c, c, 3, padding=1, bias=False).to(dev)
        x = torch.randn(n, c, hw, hw, device=dev, requires_grad=True)
        gy = torch.ones(n, c, hw, hw, device=dev)
        res: dict[str, Any] = {"shape": f"N{n} C{c} {hw}x{hw} K{c} 3x3", "device": dev}
        site = S.install(m, "bench", dev)
        key = (x.shape, x.stride(), x.dtype)
        routes: dict[str, Any] = {}
        for variant in ["torch:default", "torch:heuristic" if dev == "cuda" else "cpu:mkldnn-on"]:
            fe = flag_exec(variant)
            routes[variant] = S.Route({d: S.build_chain([fe], dev) for d in S.DIRS})
        # The same PyTorch path forced through the routed autograd Function (what a layer with a
        # flag-changing route pays; a route that changes nothing uses PyTorch's native node).
        forced = FlagExec("torch:default", {})
        forced.is_noop = lambda: False  # type: ignore[method-assign]
        routes["function"] = S.Route({d: [forced] for d in S.DIRS})
        if dev == "cuda":
            try:
                from convdoctor.runtime.optimizer import problems_for
                from convdoctor.runtime.plans import PlanExec
                from convdoctor.tune.gpu.cudnn_plan import ConvPlan

                rec = {**S._facts(x, m.weight, site.args), "y_shape": tuple(x.shape),
                       "grad": True, "x_requires_grad": True, "w_requires_grad": True}
                probs = problems_for(rec, True)
                ex = {d: PlanExec("cudnn:heuristic", p, ConvPlan.build(p)) for d, p in probs.items()}
                routes["cudnn-plan"] = S.Route({d: S.build_chain([ex[d]], dev) for d in S.DIRS})
            except Exception as exc:  # noqa: BLE001
                res["cudnn-plan_error"] = f"{type(exc).__name__}: {exc}"
        S.uninstall(m)

        def select(variant: str) -> None:
            S.uninstall(m)
            if variant != "stock":
                s2 = S.install(m, "bench", dev)
                s2.routes[key] = routes[variant]

        def fwd() -> None:
            with torch.no_grad():
                for _ in range(calls):
                    m(x)

        def fwdbwd() -> None:
            for _ in range(calls // 3):
                m(x).backward(gy)

        names = ["stock", *routes]
        samples: dict[tuple[str, str], list[float]] = {}
        for kind, fn, per in (("fwd_us", fwd, calls), ("fwdbwd_us", fwdbwd, calls // 3)):
            for v in names:  # warm every variant once
                select(v)
                fn()
            sync(dev)
            for _ in range(repeats):
                for v in names:
                    select(v)
                    t0 = time.perf_counter()
                    fn()
                    sync(dev)
                    samples.setdefault((v, kind), []).append(
                        (time.perf_counter() - t0) / per * 1e6)
        S.uninstall(m)
        for (v, kind), ts in samples.items():
            res.setdefault(v, {})[kind] = statistics.median(ts)
        for v in routes:
            for kind in ("fwd_us", "fwdbwd_us"):
                res[v][kind.replace("_us", "_overhead_us")] = res[v][kind] - res["stock"][kind]
    return res


VARIANTS = ("eager_heuristic", "eager_benchmark", "compile", "convdoctor")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--db", default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget", type=float, default=0.3, help="tuning seconds per problem")
    ap.add_argument("--time-budget", type=float, default=240.0,
                    help="seconds of tuning (over all configs) in the convdoctor process")
    ap.add_argument("--compile", default="", help="comma-separated zoo models to torch.compile")
    ap.add_argument("--variant-timeout", type=float, default=420.0)
    ap.add_argument("--quick", action="store_true", help="CPU: fewer steps")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--first-step-child", default=None)
    ap.add_argument("--variant-child", default=None)
    ap.add_argument("--cl", default="auto")
    args = ap.parse_args()
    args.compile = [c for c in args.compile.split(",") if c]
    if args.first_step_child:
        first_step_child(args.first_step_child, args.db, args.cl)
        return 0
    if args.variant_child:
        print(json.dumps(variant_child(args.variant_child, args), default=str))
        return 0
    for name in args.configs.split(","):
        if name not in CONFIGS:
            print(f"unknown config {name}; have {', '.join(CONFIGS)}", file=sys.stderr)
            return 2
    t_start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.db = args.db or str(out / "tuning.sqlite3")
    dev = args.device
    if args.quick:
        args.steps = min(args.steps, 6)
    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if dev == "cuda"
           else "cpu", "cudnn": torch.backends.cudnn.version() if dev == "cuda" else None,
           "threads": torch.get_num_threads(), "steps": args.steps,
           "method": "one process per variant; warm-up 4 steps + first step, then --steps timed "
                     "steps (device-synchronized), median"}
    results: dict[str, Any] = {"env": env, "configs": {}, "variants": {}}
    path = out / "runtime_bench.json"
    path.write_text(json.dumps(results, indent=2))
    if not args.skip_overhead:
        results["overhead"] = overhead(dev)
        path.write_text(json.dumps(results, indent=2, default=str))
    for variant in VARIANTS:
        if variant == "eager_benchmark" and dev != "cuda":
            continue
        if variant == "compile" and not args.compile:
            continue
        data = run_variant(variant, args, args.variant_timeout)
        results["variants"][variant] = {k: v for k, v in data.items() if k.startswith("_")}
        for name, modes in data.items():
            if name.startswith("_"):
                continue
            for mode, r in modes.items():
                slot = results["configs"].setdefault(name, {}).setdefault(mode, {})
                slot[variant] = r
        path.write_text(json.dumps(results, indent=2, default=str))
    for modes in results["configs"].values():
        for slot in modes.values():
            eager = [slot[v]["ms"] for v in ("eager_heuristic", "eager_benchmark")
                     if v in slot and "ms" in slot[v]]
            cd = slot.get("convdoctor", {}).get("ms")
            if cd and eager:
                slot["speedup_vs_best_eager"] = min(eager) / cd
                slot["speedup_vs_heuristic"] = slot["eager_heuristic"]["ms"] / cd
    if dev == "cuda":
        chosen = results["configs"].get("resnet50_fp32", {}).get("train", {}).get("convdoctor", {})
        cl = bool(chosen.get("report", {}).get("channels_last"))
        results["first_step_resnet50_fp32_train"] = first_step(args.db, cl)
    results["total_s"] = time.monotonic() - t_start
    path.write_text(json.dumps(results, indent=2, default=str))
    print(table(results))
    return 0


def table(results: dict[str, Any]) -> str:
    lines = [f"env: {results['env']}"]
    for row in results.get("overhead", []):
        parts = [f"{k}: fwd {v['fwd_us']:.1f} us, fwd+bwd {v['fwdbwd_us']:.1f} us"
                 for k, v in row.items() if isinstance(v, dict)]
        lines.append(f"overhead {row['shape']} ({row['device']}): " + "; ".join(parts))
    for v, info in results.get("variants", {}).items():
        if "_error" in info:
            lines.append(f"variant {v}: ERROR {str(info['_error'])[-400:]}")
    lines.append(f"{'config':<18} {'mode':<9} " + " ".join(f"{k:>16}" for k in VARIANTS)
                 + f" {'vs best eager':>13}")
    for name, modes in results["configs"].items():
        for mode, slot in modes.items():
            cells = " ".join(f"{slot[k]['ms']:>13.3f} ms" if "ms" in slot.get(k, {})
                             else f"{('ERR' if 'error' in slot.get(k, {}) else '-'):>16}"
                             for k in VARIANTS)
            sp = slot.get("speedup_vs_best_eager")
            lines.append(f"{name:<18} {mode:<9} {cells} {(f'{sp:.3f}x' if sp else '-'):>13}")
            rep = slot.get("convdoctor", {}).get("report")
            if rep:
                lines.append(f"{'':<28}layout {'channels_last' if rep['channels_last'] else 'as given'}"
                             f", routing {'on' if rep['routing'] else 'off'}, problems "
                             f"{rep['problems']} (db {rep['from_db']}, tuned {rep['tuned']} in "
                             f"{rep['tuning_s']:.0f}s), choices {rep['choices']}")
            for k in VARIANTS:
                if "error" in slot.get(k, {}):
                    lines.append(f"{'':<28}{k} error: {slot[k]['error'][:300]}")
    fs = results.get("first_step_resnet50_fp32_train")
    if fs:
        lines.append("time to first training step, ResNet-50 fp32 (fresh process): " + "; ".join(
            f"{k}: {v.get('first_step_s', float('nan')):.2f} s" if "first_step_s" in v
            else f"{k}: {str(v.get('error'))[-300:]}" for k, v in fs.items()))
    lines.append(f"total {results.get('total_s', 0):.0f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
