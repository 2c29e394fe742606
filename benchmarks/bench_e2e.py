"""End to end: a training step of real models under every way a user would run them.

    python benchmarks/bench_e2e.py --out DIR [--models convnext_tiny,efficientnet_b0,resnet50]
        [--precisions fp32,bf16] [--modes eager,cl_benchmark,compile,optimize,optimize_warm,
        compile_optimize] [--batch 64] [--size 224] [--steps 20]

Models come from timm (`timm.create_model(name, pretrained=False)`) or torchvision where they are
installed, else from convdoctor's zoo. A training step is forward, a scalar loss, backward and an
SGD step, at batch `--batch` and `--size` x `--size` RGB inputs; `bf16` runs the step under
`torch.autocast(dtype=torch.bfloat16)`, `fp32` with PyTorch's default TF32 for convolutions.

Modes, each in a fresh process (PyTorch caches its cuDNN choice per shape for the whole process,
so the first mode to run a shape would decide for the others):
  eager              the model as given, NCHW, cudnn.benchmark off
  cl_benchmark       channels_last and cudnn.benchmark=True
  compile            torch.compile (default mode) of the channels_last model
  optimize           convdoctor.optimize on an EMPTY tuning database (DIR/e2e.sqlite3, removed
                     first), then the optimized model
  optimize_warm      convdoctor.optimize on the database the optimize mode left
  compile_optimize   torch.compile of the model convdoctor.optimize returned (warm database)
  optimize_nolimit   convdoctor.optimize on an EMPTY database of its own with no tuning time
                     limit (tune_time_limit_s=inf): what a full quick tune reaches (not run by
                     default)
Per mode: the median step time over `--steps` steps after warm-up (CUDA-synchronized), and the
time to the first step: from building the mode's model (after the model and inputs exist) to the
end of its first training step, compile or optimize included. The table prints both and each
mode's speedup over the best of eager, cl_benchmark and compile (step time). JSON lines go to
DIR/e2e.jsonl (one per model, precision and mode), the table to stdout last.
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
MODES = ("eager", "cl_benchmark", "compile", "optimize", "optimize_warm", "compile_optimize",
         "optimize_nolimit")
DEFAULT_MODES = MODES[:6]
BASE_MODES = ("eager", "cl_benchmark", "compile")


def nolimit_db(db: str) -> str:
    """The optimize_nolimit mode's own database, beside `db`."""
    return db.replace(".sqlite3", "_nolimit.sqlite3")


def build_model(name: str) -> tuple[Any, str]:
    """(model, where it came from): timm, torchvision, or convdoctor's zoo."""
    try:
        import timm

        if name in timm.list_models(name):
            return timm.create_model(name, pretrained=False), f"timm {timm.__version__}"
    except ImportError:
        pass
    try:
        import torchvision

        fn = getattr(torchvision.models, name, None)
        if fn is not None:
            return fn(weights=None), f"torchvision {torchvision.__version__}"
    except ImportError:
        pass
    from convdoctor import zoo

    return zoo.get(name), "convdoctor zoo"


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One model, precision and mode in this process: returns the measured record."""
    import torch

    dev = args.device
    torch.manual_seed(0)
    model, origin = build_model(args.model)
    model = model.to(dev).train()
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    amp = torch.autocast(dev, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    rec: dict[str, Any] = {"model": args.model, "origin": origin, "precision": args.precision,
                           "mode": args.mode, "batch": args.batch, "size": args.size}
    t0 = time.perf_counter()
    run_model = model
    if args.mode in ("cl_benchmark", "compile", "compile_optimize"):
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = args.mode == "cl_benchmark"
    if args.mode in ("optimize", "optimize_warm", "compile_optimize", "optimize_nolimit"):
        import convdoctor

        nolimit = args.mode == "optimize_nolimit"
        with amp:
            convdoctor.optimize(model, x, train=True,
                                db=nolimit_db(args.db) if nolimit else args.db,
                                tune_time_limit_s=float("inf") if nolimit else None)
        from convdoctor.runtime import report_of

        rep = report_of(model)
        if rep is not None:
            rec["optimize"] = {"problems": rep.problems, "from_db": rep.from_db,
                               "tuned": rep.tuned, "tuning_s": round(rep.tuning_s, 2),
                               "optimize_s": round(rep.optimize_s, 2),
                               "routing": bool(rep.routing),
                               "speedup": rep.speedup, "phase_s": dict(rep.phase_s),
                               "route_builds": dict(rep.route_builds),
                               "decisions": rep.decisions, "precompile": dict(rep.precompile),
                               "channels_last": rep.channels_last, "graphs": rep.graphs,
                               "untuned": rep.untuned, "left_tiny": rep.left_tiny,
                               "left_minor": rep.left_minor,
                               "failed_steps": list(rep.failed_steps),
                               "routing_reason": str(rep.routing_reason)[:300],
                               "graphs_reason": str(rep.graphs_reason)[:300],
                               "notes": [str(n)[:300] for n in rep.notes]}
    if args.mode in ("compile", "compile_optimize"):
        run_model = torch.compile(model)
    else:
        run_model = model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with amp:
            out = run_model(x)
            if isinstance(out, (tuple, list)):
                out = out[0]
            loss = torch.nn.functional.cross_entropy(out.float(), y % out.shape[-1])
        loss.backward()
        opt.step()

    def sync() -> None:
        if dev == "cuda":
            torch.cuda.synchronize()

    step()
    sync()
    rec["first_step_s"] = round(time.perf_counter() - t0, 3)
    for _ in range(3):
        step()
    sync()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    rec["step_ms"] = round(statistics.median(times) * 1e3, 3)
    rec["step_ms_iqr"] = round((statistics.quantiles(times, n=4)[2] - statistics.quantiles(
        times, n=4)[0]) * 1e3, 3) if len(times) >= 4 else None
    rec["device_name"] = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    rec["torch"] = torch.__version__
    return rec


def run_child(args: argparse.Namespace, model: str, precision: str, mode: str,
              db: str) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--model", model,
           "--precision", precision, "--mode", mode, "--db", db, "--device", args.device,
           "--batch", str(args.batch), "--size", str(args.size), "--steps", str(args.steps)]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"]
                                             if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"model": model, "precision": precision, "mode": mode,
                "error": f"timed out after {args.timeout:.0f} s"}
    wall = time.perf_counter() - t0
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            rec = json.loads(line)
            rec["process_s"] = round(wall, 2)
            return rec
    tail = " | ".join(p.stderr.strip().splitlines()[-3:])[:400]
    return {"model": model, "precision": precision, "mode": mode,
            "error": f"exit {p.returncode}: {tail}"}


def table(records: list[dict[str, Any]]) -> str:
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in records:
        by.setdefault((r["model"], r["precision"]), {})[r["mode"]] = r
    lines = ["| model | precision | " + " | ".join(MODES) + " |",
             "|---|---|" + "---|" * len(MODES)]
    for (model, prec), modes in by.items():
        base = [m["step_ms"] for k, m in modes.items() if k in BASE_MODES and "step_ms" in m]
        best = min(base) if base else None
        cells = []
        for mode in MODES:
            r = modes.get(mode)
            if r is None:
                cells.append("-")
            elif "error" in r:
                cells.append("error")
            else:
                sp = f", {best / r['step_ms']:.2f}x" if best and mode not in BASE_MODES else ""
                cells.append(f"{r['step_ms']:.1f} ms{sp}; first step {r['first_step_s']:.0f} s")
        lines.append(f"| {model} | {prec} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="e2e_out")
    ap.add_argument("--models", default="convnext_tiny,efficientnet_b0,resnet50")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--modes", default=",".join(DEFAULT_MODES))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per mode process")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--precision", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        print(f"bench_e2e: unknown mode(s) {', '.join(bad)}; modes: {', '.join(MODES)}",
              file=sys.stderr)
        return 2
    records: list[dict[str, Any]] = []
    with open(out / "e2e.jsonl", "a", encoding="utf-8") as f:
        for model in [m for m in args.models.split(",") if m]:
            for prec in [p for p in args.precisions.split(",") if p]:
                db = str(out / f"e2e_{model}_{prec}.sqlite3")
                for path in (db, nolimit_db(db)):
                    for suffix in ("", "-wal", "-shm"):
                        Path(path + suffix).unlink(missing_ok=True)
                for mode in modes:
                    rec = run_child(args, model, prec, mode, db)
                    records.append(rec)
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    print(json.dumps(rec), flush=True)
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
