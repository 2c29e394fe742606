"""Where does benchmark=True's speech-inference step win over the heuristic one? (GPU probe)

Sessions 8 and 11 (H100): the speech front end's inference step (wav2vec2 feature encoder, batch
16, 16000 samples, fp32) ran 1.7-2.9% faster in benchmark=True processes than in heuristic ones,
and `optimize` kept PyTorch's heuristic path. This probe runs, in fresh processes per mode (each
twice, modes alternating): the step, each Conv1d alone on its real input, the CUDA kernels each
Conv1d launches (torch.profiler), and the same timings again after each of SPACERS spacer
allocations (kept alive, 1-64 MiB plus an odd offset) that move where PyTorch's caching allocator
puts the workspace and activations, to see whether a layer's time depends on those addresses.
CUDA events over back-to-back calls (`probe_timing.event_us`), no L2 flush: the model's own
conditions.

    python scripts/gpu/speech_probe.py [SPACERS [MODE ...]]

MODE: heuristic, benchmark, or convdoctor (`convdoctor.optimize(model, x, train=False)` with an
empty database in $OUT and graphs off, so the eager routes are what is measured; default: the
first two, twice).

Writes $OUT/speech_probe.jsonl (one line per process) and prints a per-layer summary.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODES = ("heuristic", "benchmark", "heuristic", "benchmark")


def _kernels(fn: Any) -> list[tuple[str, float]]:
    """(kernel name, device us per call) of the CUDA kernels `fn` launches, over 5 calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    out = []
    for ev in prof.key_averages():
        dev = getattr(ev, "device_time_total", None)
        if dev is None:
            dev = getattr(ev, "cuda_time_total", 0.0)
        if dev and dev > 0:
            out.append((ev.key[:90], round(dev / 5, 2)))
    return sorted(out, key=lambda kv: -kv[1])[:4]


def child(mode: str, spacers: int) -> dict[str, Any]:
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_optimize import CONFIGS, build
    from probe_timing import event_us

    torch.backends.cudnn.benchmark = mode == "benchmark"
    model, x = build(CONFIGS["speech_fp32"], "cuda")
    model.eval()
    rec: dict[str, Any] = {"mode": mode, "pid": os.getpid()}
    if mode == "convdoctor":
        from convdoctor.runtime.optimizer import optimize, report_of

        db = Path(os.environ.get("OUT", ".")) / f"speech_probe_{os.getpid()}.sqlite"
        optimize(model, x, train=False, db=db, graphs=False, backend="cuda")
        rep = report_of(model)
        rec["routing_reason"] = rep.routing_reason
        rec["choices"] = [d.key for lay in rep.layers for d in lay.directions]
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv1d)]
    seen: dict[int, Any] = {}
    hooks = [c.register_forward_pre_hook(lambda m, a, i=i: seen.__setitem__(i, a[0]))
             for i, c in enumerate(convs)]
    with torch.no_grad():
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()
        for h in hooks:
            h.remove()
        ins = [seen[i].clone() for i in range(len(convs))]
        rec["layers"] = [list(t.shape) for t in ins]
        rec["kernels"] = [_kernels(lambda c=c, t=t: c(t)) for c, t in zip(convs, ins, strict=True)]

        def measure() -> dict[str, Any]:
            step = event_us(lambda: model(x), 20, warm=3, blocks=5)
            layer = [event_us(lambda c=c, t=t: c(t), 30, warm=3, blocks=3)
                     for c, t in zip(convs, ins, strict=True)]
            return {"step_us": round(step, 1), "layer_us": [round(v, 1) for v in layer]}

        rec["sweep"] = [dict(measure(), spacer_mib=0)]
        rng = random.Random(os.getpid())
        keep = []
        for j in range(spacers):
            nbytes = (rng.randint(1, 64) << 20) + 69632 * (j + 1)
            keep.append(torch.empty(nbytes, dtype=torch.uint8, device="cuda"))
            rec["sweep"].append(dict(measure(), spacer_mib=round(nbytes / 2**20, 2)))
    return rec


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]))), flush=True)
        return
    spacers = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    modes = sys.argv[2:] or list(MODES)
    out_dir = Path(os.environ.get("OUT", "."))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), str(HERE), os.environ.get("PYTHONPATH", "")]))
    recs = []
    with open(out_dir / "speech_probe.jsonl", "w") as fh:
        for mode in modes:
            r = subprocess.run([sys.executable, __file__, "--child", mode, str(spacers)],
                               capture_output=True, text=True, env=env, timeout=300)
            if r.returncode != 0:
                print(f"{mode}: rc={r.returncode}\n{r.stderr[-2000:]}", file=sys.stderr)
                continue
            line = [x for x in r.stdout.splitlines() if x.startswith("{")][-1]
            fh.write(line + "\n")
            recs.append(json.loads(line))
    for rec in recs:
        sw = rec["sweep"]
        steps = [s["step_us"] for s in sw]
        if "choices" in rec:
            print(f"== convdoctor routes: {rec['choices']}; {rec['routing_reason']}")
        print(f"== {rec['mode']} pid {rec['pid']}: step median {statistics.median(steps):.1f} us "
              f"(min {min(steps):.1f}, max {max(steps):.1f}) over {len(sw)} spacer states")
        for i, shape in enumerate(rec["layers"]):
            v = [s["layer_us"][i] for s in sw]
            k = "; ".join(f"{n[:60]} {t}" for n, t in rec["kernels"][i][:2])
            print(f"  conv{i} {shape}: median {statistics.median(v):.1f} min {min(v):.1f} "
                  f"max {max(v):.1f} | {k}")


if __name__ == "__main__":
    main()
