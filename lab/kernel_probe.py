"""Is a convolution's per-process slowdown a different kernel, or the same kernel running slower?

The same convolution can run at two speeds in different processes (H100: wav2vec2 conv1, a cuDNN
plan and PyTorch's heuristic path, about 143 or 170 us; docs/results.md). This script starts
PROCS fresh processes; each one times, for every PATH (a cuDNN plan key, `heuristic` or `benchmark` for
PyTorch's paths), the convolution on PLACEMENTS different buffer sets (separate allocations with
spacers between, so the addresses differ), CUDA events over 50 calls after a warm-up, and records
the CUDA kernels one call launches (torch.profiler: name, grid, block, registers, shared memory).
A PATH `sources:<plan name>` builds that plan name from each source (heuristic modes A, B,
FALLBACK, engine enumeration; plan cache cleared between) and times each. The PATH `all` builds
every plan the listing reaches (heuristic modes and wide engine/knob enumeration) and records each
one's time and kernel names; with `benchmark` also given, the plans launching a kernel that
benchmark=True's choice launches are printed (is benchmark's engine reachable through
cudnn-frontend at all?). Plain code, no tuner.

    PYTHONPATH=src python lab/kernel_probe.py PROBLEM_KEY PROCS PATH [PATH ...]

Writes $OUT/kernel_probe.json; prints one line per process and path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

PLACEMENTS = 4
CALLS = 50


def _kernels(fn: Any) -> list[str]:
    """The kernels one call launches: name, grid, block, registers, shared memory (from the
    profiler's trace, so two launches of one kernel name with different grids show apart)."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        prof.export_chrome_trace(tmp.name)
        events = json.load(open(tmp.name)).get("traceEvents", [])
    out = []
    for ev in events:
        if ev.get("cat") in ("kernel", "gpu_memset"):
            a = ev.get("args", {})
            out.append(f"{ev.get('name', '')[-90:]} grid={a.get('grid')} block={a.get('block')} "
                       f"regs={a.get('registers per thread')} smem={a.get('shared memory')} "
                       f"dur={ev.get('dur')}")
    return out


def _run_plan(p: Any, plan: Any) -> dict[str, Any]:
    from convdoctor.engines import cudnn_enum as cp

    (ra, rb), ro = plan.input_roles, plan.output_role
    a = cp.empty_for(p, ra, "cuda:0").uniform_(-1, 1)
    b = cp.empty_for(p, rb, "cuda:0").uniform_(-1, 1)
    o = cp.empty_for(p, ro, "cuda:0")
    ws = plan.workspace()

    def fn() -> None:
        plan.execute(a, b, o, workspace=ws, check=False)

    res = {"us": [round(_time(fn), 2) for _ in range(3)], "ws": plan.workspace_bytes,
           "kernels": _kernels(fn)}
    plan.release_workspace()
    return res


def _sources(p: Any, name: str) -> dict[str, Any]:
    """The plan of this name as each source builds it (heuristic modes A, B, FALLBACK and engine
    enumeration), cache cleared between them: does one name run the same everywhere?"""
    import torch

    from convdoctor.engines import cudnn_enum as cp
    from convdoctor.engines.cudnn_policy import HEUR_MODES, parse_plan_name

    h = cp.get_handle(0)
    found: dict[str, Any] = {}
    srcs: list[tuple[str, Any]] = [(m, lambda m=m: cp._mode_plans(p, h, m, 0, only=name))
                                   for m in HEUR_MODES]
    eng, _ = parse_plan_name(name)
    srcs.append(("enum", lambda: cp._engine_plans(p, h, eng, 0, limit=64, per_knob=8)))
    for tag, gen in srcs:
        cp.clear_cache()
        plan = None
        for info, pl in gen():
            if info.name == name and pl is not None:
                plan = pl
                break
        if plan is None:
            found[tag] = "not offered"
            continue
        found[tag] = _run_plan(p, plan)
        torch.cuda.empty_cache()
    cp.clear_cache()
    return found


def _all_plans(p: Any) -> dict[str, Any]:
    """Every plan the listing builds (modes A, B, FALLBACK, then up to 120 enumerated ones within
    30 s): its time (us, one batch of CALLS) and kernel names."""
    import torch

    from convdoctor.engines import cudnn_enum as cp

    listing = cp.enumerate_plans(p, max_extra=120, time_budget_s=30.0, probe=False,
                                 build_budget_s=45.0)
    found: dict[str, Any] = {"_listing": listing.summary()}
    for info in listing.built():
        try:
            plan = cp.build_plan(p, info.name)
            rec = _run_plan(p, plan)
            found[info.name] = {"us": rec["us"][0], "kernels": sorted(
                {k.split(" grid=")[0] for k in rec["kernels"]})}
        except Exception as exc:  # noqa: BLE001 - a probe reports, never stops
            found[info.name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        cp.clear_cache()
        torch.cuda.empty_cache()
    return found


def _time(fn: Any) -> float:
    from probe_timing import event_us

    return event_us(fn, CALLS, warm=10)


def child(problem_key: str, paths: list[str]) -> dict[str, Any]:
    import torch

    from convdoctor.engines.cudnn_enum import build_plan
    from convdoctor.engines.cudnn_policy import plan_name_of
    from convdoctor.engines.torch_ops import torch_conv, torch_flags
    from convdoctor.measure.buffers import empty_for, io_roles
    from convdoctor.problem import ConvProblem

    p = ConvProblem.parse(problem_key)
    (ra, rb), ro = io_roles(p.direction)
    like = {"dgrad": "x", "wgrad": "w"}.get(p.direction)
    sets = []
    keep = []
    for i in range(PLACEMENTS):
        a = empty_for(p, ra, "cuda:0").uniform_(-1, 1)
        b = empty_for(p, rb, "cuda:0").uniform_(-1, 1)
        o = empty_for(p, ro, "cuda:0")
        lk = empty_for(p, like, "cuda:0") if like else None
        sets.append((a, b, o, lk))
        keep.append(torch.empty((i + 1) * 3 * 1024 * 1024 + 4096 * i, dtype=torch.uint8,
                                device="cuda:0"))  # spacer: the next set lands elsewhere
    out: dict[str, Any] = {"pid": os.getpid(), "ptrs": [s[0].data_ptr() for s in sets],
                           "paths": {}}
    for path in paths:
        rec: dict[str, Any] = {}
        if path == "all":
            try:
                out["paths"][path] = _all_plans(p)
            except Exception as exc:  # noqa: BLE001
                out["paths"][path] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        if path.startswith("sources:"):
            try:
                out["paths"][path] = _sources(p, path[len("sources:"):])
            except Exception as exc:  # noqa: BLE001
                out["paths"][path] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        try:
            if path in ("heuristic", "benchmark"):
                def mk(s: Any, path: str = path) -> Any:
                    def fn() -> None:
                        with torch_flags(path, p):
                            torch_conv(p, s[0], s[1], s[3])
                    return fn
            else:
                plan = build_plan(p, plan_name_of(path) or path)
                ws = plan.workspace()

                def mk(s: Any, plan: Any = plan, ws: Any = ws) -> Any:
                    return lambda: plan.execute(s[0], s[1], s[2], workspace=ws, check=False)
            fns = [mk(s) for s in sets]
            rec["us"] = [round(_time(f), 2) for f in fns]
            rec["us_again"] = [round(_time(f), 2) for f in fns]
            rec["kernels"] = _kernels(fns[0])
        except Exception as exc:  # noqa: BLE001 - a probe reports, never stops
            rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
        out["paths"][path] = rec
    return out


def main() -> int:
    if sys.argv[1] == "--child":
        import torch  # noqa: F401  (before cudnn)

        print("RESULT " + json.dumps(child(sys.argv[2], sys.argv[3:])), flush=True)
        return 0
    key, procs, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    # KPROBE_CHILD_S: each child's limit (the `all` path lists every plan, which can take minutes)
    limit = float(os.environ.get("KPROBE_CHILD_S", "300"))
    res = []
    for i in range(procs):
        try:
            cp = subprocess.run([sys.executable, __file__, "--child", key, *paths],
                                capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
            print(f"process {i}: stopped after {limit:.0f} s (KPROBE_CHILD_S) with no result; "
                  f"its last output: {err[-400:]}", flush=True)
            continue
        line = [ln for ln in cp.stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            print(f"process {i}: no result (rc {cp.returncode}): {cp.stderr[-400:]}", flush=True)
            continue
        r = json.loads(line[0][7:])
        res.append(r)
        bench_kernels = {k.split(" grid=")[0] for k in
                         r["paths"].get("benchmark", {}).get("kernels", [])
                         if not k.startswith("Memset")}
        for path, rec in r["paths"].items():
            if path == "all":
                print(f"process {i} all: listing {rec.get('_listing', rec.get('error'))}",
                      flush=True)
                plans = {n: v for n, v in rec.items() if not n.startswith("_")}
                for n, v in sorted(plans.items(), key=lambda kv: kv[1].get("us") or 1e9):
                    same = bench_kernels & set(v.get("kernels", []))
                    print(f"process {i} all {n[:60]:60s} us {v.get('us')} "
                          f"{'SHARES benchmark kernel ' + str(sorted(same)) if same else ''}"
                          f"{v.get('error', '')}", flush=True)
                continue
            if path.startswith("sources:"):
                for tag, v in rec.items():
                    print(f"process {i} {path[:50]} {tag}: {v}", flush=True)
                continue
            ks = sorted(set(rec.get("kernels", [])))
            print(f"process {i} {path[:44]:44s} us {rec.get('us')} again {rec.get('us_again')} "
                  f"{rec.get('error', '')} kernels {ks}", flush=True)
    dest = os.environ.get("OUT", ".")
    with open(os.path.join(dest, "kernel_probe.json"), "a") as fh:
        fh.write(json.dumps({"problem": key, "processes": res}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
