"""Is there a faster cuDNN engine configuration than the heuristic lists offer? (knob-space headroom)

The tuner's bounded enumeration builds only a few knob settings per engine (each knob at its ends
and middle), so most tile sizes of the big implicit-GEMM engines are never built there.
This script searches one engine's knob space properly: for each PROBLEM_KEY it builds and times the
heuristic plans (modes A and B), takes the engines of the fastest ones, and for each engine builds
every knob setting "next to" a heuristic plan of that engine (one knob changed over its whole
range) plus a seeded random sample of the full product, up to CAP settings. Every built plan is
timed quickly (CUDA events over a batch of calls); the fastest explored and heuristic plans are
then timed again, interleaved (ROUNDS rounds), and the fastest explored plan's output is checked
against PyTorch's. Plain code, no tuner.

    PYTHONPATH=src python lab/knob_explore.py [--cap 300] [--budget 45] PROBLEM_KEY [PROBLEM_KEY ...]

Writes $OUT/knob_explore.jsonl (one line per problem); prints a summary line per problem.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time
from typing import Any

ROUNDS = 7
BATCH = 20


def _time(fn: Any, calls: int) -> float:
    from probe_timing import event_us

    return event_us(fn, calls)


def _knob_int(t: Any) -> int:
    """The plan-name (backend) number of a frontend knob type (`int(t)` is the frontend's own
    numbering, which plan names do not use)."""
    from convdoctor.engines.cudnn_policy import knob_number_by_name

    n = knob_number_by_name(t)
    return int(t) if n is None else n


def _values(lo: int, hi: int, st: int) -> list[int]:
    from convdoctor.engines.cudnn_policy import knob_values

    if st <= 0 or hi < lo:
        return [lo]
    count = (hi - lo) // st + 1
    return list(range(lo, hi + 1, st)) if count <= 64 else knob_values(lo, hi, st, 16)


def explore(key: str, cap: int, budget: float, top_engines: int) -> dict[str, Any]:
    import torch

    from convdoctor.engines import cudnn_enum as cp
    from convdoctor.engines.cudnn_policy import parse_plan_name
    from convdoctor.engines.torch_ops import torch_conv, torch_flags
    from convdoctor.measure.buffers import io_roles
    from convdoctor.problem import ConvProblem

    t0 = time.perf_counter()
    p = ConvProblem.parse(key)
    (ra, rb), ro = io_roles(p.direction)
    a = cp.empty_for(p, ra, "cuda:0").uniform_(-1, 1)
    b = cp.empty_for(p, rb, "cuda:0").uniform_(-1, 1)
    o = cp.empty_for(p, ro, "cuda:0")
    like = {"dgrad": "x", "wgrad": "w"}.get(p.direction)
    lk = cp.empty_for(p, like, "cuda:0") if like else None
    h = cp.get_handle(0)
    cp.clear_cache()
    plans: dict[str, Any] = {}   # name -> ConvPlan
    source: dict[str, str] = {}
    for mode in ("A", "B"):
        for info, plan in cp._mode_plans(p, h, mode, 0):
            if plan is not None and info.name not in plans:
                plans[info.name] = plan
                source[info.name] = mode
    ws_cap = 512 << 20
    quick: dict[str, float] = {}

    def run_plan(plan: Any) -> Any:
        ws = torch.empty(max(1, plan.workspace_bytes), dtype=torch.uint8, device="cuda:0")
        return lambda: plan.execute(a, b, o, workspace=ws, check=False)

    def screen(name: str) -> None:
        plan = plans[name]
        if plan.workspace_bytes > ws_cap:
            return
        try:
            fn = run_plan(plan)
            fn()
            fn()
            torch.cuda.synchronize()
            quick[name] = min(_time(fn, 10), _time(fn, 10))
        except Exception as exc:  # noqa: BLE001
            quick[name] = float("inf")
            source[name] += f" (failed: {str(exc)[:80]})"

    for name in list(plans):
        screen(name)
    heur_names = [n for n in plans]
    best_heur = sorted(heur_names, key=lambda n: quick.get(n, float("inf")))
    engines: list[int] = []
    for n in best_heur:
        e, _ = parse_plan_name(n)
        if e not in engines:
            engines.append(e)
        if len(engines) >= top_engines:
            break
    knob_specs: dict[int, Any] = {}
    built = 0
    tried = 0
    build_s = 0.0
    for eng in engines:
        if time.perf_counter() - t0 > budget:
            break
        try:
            g0 = cp._new_graph(p, h, "enum")
            knobs = g0.graph.get_knobs_for_engine(eng)
        except Exception as exc:  # noqa: BLE001
            knob_specs[eng] = f"no knobs: {exc}"[:200]
            continue
        spec = [(k.type, _knob_int(k.type), int(k.min_value), int(k.max_value), int(k.stride))
                for k in knobs if not str(k.type).endswith("NOT_SET")]
        knob_specs[eng] = [(ki, lo, hi, st) for _, ki, lo, hi, st in spec]
        axes = [_values(lo, hi, st) for _, _, lo, hi, st in spec]
        seeds = []
        for n in best_heur:
            e, kn = parse_plan_name(n)
            if e == eng:
                seeds.append(tuple(kn.get(ki, axes[j][0]) for j, (_, ki, *_r) in enumerate(spec)))
        combos: list[tuple[int, ...]] = []
        seen = set(seeds)
        for s in seeds[:3]:
            for j, ax in enumerate(axes):
                for v in ax:
                    c = s[:j] + (v,) + s[j + 1:]
                    if c not in seen:
                        seen.add(c)
                        combos.append(c)
        total = 1
        for ax in axes:
            total *= len(ax)
        rng = random.Random(eng)
        if total <= 4 * cap:
            rest = [c for c in itertools.product(*axes) if c not in seen]
            rng.shuffle(rest)
        else:
            rest = [tuple(rng.choice(ax) for ax in axes) for _ in range(4 * cap)]
        for c in rest:
            if len(combos) >= cap:
                break
            if c not in seen:
                seen.add(c)
                combos.append(c)
        # build in chunks, one graph per chunk (manual plans of one engine share a graph)
        for start in range(0, len(combos), 40):
            if time.perf_counter() - t0 > budget:
                break
            g = cp._new_graph(p, h, "enum")
            for c in combos[start:start + 40]:
                tried += 1
                try:
                    g.graph.create_execution_plan(eng, {t: v for (t, *_r), v in zip(spec, c, strict=True)})
                except Exception:  # noqa: BLE001
                    continue
            for i in range(int(g.graph.get_execution_plan_count())):
                name = str(g.graph.get_plan_name_at_index(i))
                if name in plans:
                    continue
                tb = time.perf_counter()
                info, plan = cp._build_index(p, g, i, 0, "enum")
                build_s += time.perf_counter() - tb
                if plan is None:
                    continue
                built += 1
                plans[name] = plan
                source[name] = "enum"
                screen(name)
    explored = [n for n in plans if source[n] == "enum" and quick.get(n, float("inf")) < 1e9]
    fin_h = [n for n in best_heur if quick.get(n, float("inf")) < 1e9][:3]
    fin_e = sorted(explored, key=lambda n: quick[n])[:5]
    fns: dict[str, Any] = {n: run_plan(plans[n]) for n in fin_h + fin_e}

    def bench_fn(path: str) -> Any:
        def fn() -> None:
            with torch_flags(path.split(":", 1)[1], p):
                torch_conv(p, a, b, lk)
        return fn
    for path in ("torch:benchmark", "torch:heuristic"):
        fns[path] = bench_fn(path)
    for f in fns.values():
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(ROUNDS):
        for n, f in fns.items():
            samples[n].append(_time(f, BATCH))
    med = {n: sorted(v)[len(v) // 2] for n, v in samples.items()}
    res: dict[str, Any] = {"problem": key, "heuristic_plans": len(heur_names),
                           "engines": engines, "knobs": {str(k): v for k, v in knob_specs.items()},
                           "tried": tried, "built": built, "build_s": round(build_s, 2),
                           "median_us": {n: round(v, 2) for n, v in med.items()},
                           "quick_us": {n: round(v, 2) for n, v in
                                        sorted(quick.items(), key=lambda kv: kv[1])[:15]},
                           "sources": {n: source[n] for n in med if n in source}}
    hb = min((med[n] for n in fin_h), default=float("inf"))
    eb_name = min(fin_e, key=lambda n: med[n]) if fin_e else None
    res["best_heuristic_plan_us"] = round(hb, 2)
    res["best_explored"] = eb_name
    res["best_explored_us"] = round(med[eb_name], 2) if eb_name else None
    res["torch_best_us"] = round(min(med["torch:benchmark"], med["torch:heuristic"]), 2)
    if eb_name:
        # correctness of the explored winner against PyTorch's own result
        o.fill_(float("nan"))
        fns[eb_name]()
        if p.direction == "fprop":
            with torch_flags("heuristic", p):
                ref = torch_conv(p, a, b, lk)
            err = (o.float() - ref.float()).abs().max().item()
            scale = ref.float().abs().max().item()
            res["best_explored_rel_err"] = err / max(scale, 1e-30)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    for n in list(plans):
        plans[n].release_workspace()
    cp.clear_cache()
    torch.cuda.empty_cache()
    return res


def main() -> int:
    import torch  # noqa: F401  (before cudnn)

    ap = argparse.ArgumentParser()
    ap.add_argument("--cap", type=int, default=300)
    ap.add_argument("--budget", type=float, default=45.0)
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("keys", nargs="+")
    args = ap.parse_args()
    dest = os.environ.get("OUT", ".")
    for key in args.keys:
        try:
            r = explore(key, args.cap, args.budget, args.engines)
        except Exception as exc:  # noqa: BLE001 - a probe reports, never stops
            r = {"problem": key, "error": f"{type(exc).__name__}: {exc}"[:400]}
        with open(os.path.join(dest, "knob_explore.jsonl"), "a") as fh:
            fh.write(json.dumps(r) + "\n")
        if "error" in r:
            print(f"{key[:70]}: ERROR {r['error']}", flush=True)
            continue
        eb = r.get("best_explored_us")
        ratio = (r["best_heuristic_plan_us"] / eb) if eb else float("nan")
        print(f"{key[:70]}: heur-plan {r['best_heuristic_plan_us']} explored {eb} "
              f"({r.get('best_explored')}) torch {r['torch_best_us']} ratio {ratio:.3f} "
              f"built {r['built']}/{r['tried']} build {r['build_s']} s "
              f"err {r.get('best_explored_rel_err')} in {r['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
