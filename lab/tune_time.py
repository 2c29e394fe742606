"""Where the tuning time of a real model's problems goes (GPU machine, standalone probe).

    PYTHONPATH=src python lab/tune_time.py OUT.json [--models convnext_tiny,resnet50]
        [--precisions fp32,bf16] [--problems 6] [--variants default,quick] [--budget 2.0]

For each model (timm, else torchvision, else convdoctor's zoo) at batch 64, 224x224, training,
it takes the first `--problems` distinct convolution problems `optimize` would tune
(`convdoctor.runtime.record.model_problems`, under bf16 autocast for `bf16`) and tunes each in this
process on a fresh CUDA backend per variant (settings: `default`, or `quick`:
`convdoctor.settings.QUICK`), timing: the listing (`backend.candidates`, with the
cuDNN enumeration's and refinement's own seconds from the listing record), then the harness
(`tune_problem` with `budget_s`, its listing timed inside it), split into the listing, the
time spent on the candidates (`CandidateStats.cost_s`: first runs, checks, warm-up, screen and
samples) and the rest (the harness's own work, pauses, closing runners). Prints one JSON line per problem and
variant and a summary per variant; writes them all to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

VARIANTS = ("default", "quick")


def problems_of(name: str, precision: str, count: int) -> list[Any]:
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_e2e import build_model

    from convdoctor.runtime.record import model_problems

    model, _ = build_model(name)
    model = model.cuda().train()
    x = torch.randn(64, 3, 224, 224, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
        probs = model_problems(model, x, train=True)
    return probs[:count]


def one(problem: Any, variant: str, budget_s: float) -> dict[str, Any]:
    from convdoctor.settings import Settings, for_tuning
    from convdoctor.tune.cuda_backend import CudaBackend
    from convdoctor.tune.harness import tune_problem

    settings = for_tuning(Settings(), "quick" if variant == "quick" else "thorough")
    backend = CudaBackend(settings=settings)
    listed: list[tuple[float, list[Any]]] = []
    orig = backend.candidates

    def timed(p: Any) -> list[Any]:
        t = time.perf_counter()
        out = orig(p)
        listed.append((time.perf_counter() - t, out))
        return out

    backend.candidates = timed  # type: ignore[method-assign]
    try:
        t1 = time.perf_counter()
        res = tune_problem(problem, backend=backend, db=None, budget_s=budget_s, reuse=False,
                           settings=settings)
        harness_s = time.perf_counter() - t1
        info = backend.listing_info()
    finally:
        backend.shutdown()
    listing_s, cands = listed[0] if listed else (0.0, [])
    from convdoctor.engines.registry import engine_of

    cost = sum(getattr(s, "cost_s", 0.0) or 0.0 for s in res.candidates)
    by_engine: dict[str, dict[str, float]] = {}
    for st in res.candidates:
        e = engine_of(st.candidate.key)
        row = by_engine.setdefault(e.name if e else "?", {"n": 0, "prepare_s": 0.0,
                                                          "first_run_s": 0.0, "cost_s": 0.0})
        row["n"] += 1
        for k in ("prepare_s", "first_run_s", "cost_s"):
            row[k] = round(row[k] + (getattr(st, k, 0.0) or 0.0), 3)
    kinds: dict[str, int] = {}
    for c in cands:
        kinds[c.key.split(":")[0] + ":" + c.key.split(":")[1][:3]] = kinds.get(
            c.key.split(":")[0] + ":" + c.key.split(":")[1][:3], 0) + 1
    win = res.winner_stats
    return {"problem": problem.short(), "variant": variant, "candidates": len(cands),
            "rest_s": round(harness_s - listing_s - cost, 3), "by_engine": by_engine,
            "kinds": kinds, "listing_s": round(listing_s, 3),
            "enumeration_s": (info.get("enumeration") or {}).get("seconds"),
            "refinement_s": (info.get("refinement") or {}).get("seconds"),
            "dual": {k: v for k, v in (info.get("dual") or {}).items()
                     if k in ("skipped", "best_own_us", "best_dual_us")},
            "total_s": round(harness_s, 3), "candidate_cost_s": round(cost, 3),
            "tuning_s": round(res.tuning_s, 3), "winner": res.winner.key if res.winner else None,
            "winner_us": None if win is None or win.median_s is None else round(
                win.median_s * 1e6, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--models", default="convnext_tiny,resnet50")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--problems", type=int, default=6)
    ap.add_argument("--variants", default="default,quick")
    ap.add_argument("--budget", type=float, default=2.0)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for name in args.models.split(","):
        for prec in args.precisions.split(","):
            for p in problems_of(name, prec, args.problems):
                for v in args.variants.split(","):
                    row = {"model": name, "precision": prec, **one(p, v, args.budget)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    Path(args.out).write_text(json.dumps(rows, indent=1))
    for v in args.variants.split(","):
        mine = [r for r in rows if r["variant"] == v]
        if mine:
            def mean(k: str, rs: list[dict[str, Any]] = mine) -> float:
                return statistics.mean(r[k] or 0.0 for r in rs)

            print(f"{v}: {len(mine)} problems; mean per problem: total {mean('total_s'):.2f} s = "
                  f"listing {mean('listing_s'):.2f} s (enumeration {mean('enumeration_s'):.2f}, "
                  f"refinement {mean('refinement_s'):.2f}) + on the candidates "
                  f"{mean('candidate_cost_s'):.2f} s + the rest {mean('rest_s'):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
