"""End-to-end benchmark of `convdoctor.optimize`, and its per-call overhead.

    PYTHONPATH=src python benchmarks/bench_optimize.py --device cpu --quick --out /tmp/bench
    PYTHONPATH=src python benchmarks/bench_optimize.py --device cuda --out $OUT      # H100

Per model/precision (ResNet-50 fp32 NCHW with TF32 allowed, ResNet-50 bf16 channels_last, a 3D
U-Net, the wav2vec2 speech front end with single-channel input) and mode (training step = forward,
backward, SGD step; inference = forward under no_grad) it times (warm-up 4 steps + first step, then
--steps device-synchronized steps; the median is reported, with the host CPU time to issue a step):
  eager_heuristic   PyTorch eager, cudnn.benchmark=False
  eager_benchmark   PyTorch eager, cudnn.benchmark=True (CUDA only)
  compile           torch.compile(mode="max-autotune") (only for the models named in --compile)
  convdoctor        convdoctor.optimize(model, x, train) on the tuning database in --out
Each variant runs in its own process (PyTorch caches its cuDNN choice per shape without the
benchmark flag, so in one process the first mode to run a shape decides for the others).

Fair baselines. Many of these steps are host-bound (on the H100, ResNet-50 bf16 training takes 19.4
ms of CPU time to issue a 19.5 ms step), and the time of a host-bound step differs from process to
process by more than convdoctor's effect (CPU core and frequency placement): a diagnostic run found
stock eager and the optimized model equal when timed interleaved in one process (19.5 vs 19.2 ms)
while separate processes made convdoctor look 0.64x. So:
  * the convdoctor process ALSO builds a stock eager twin of the same config (same seed, PyTorch's
    heuristics with cudnn.benchmark=False, which is also what the optimized model's unrouted layers
    run) after optimize() is done, and times the optimized model and the twin interleaved in rounds
    (--rounds, order reversed every other round, each with its own SGD optimizer): the twin is
    `eager_heuristic_same_process` inside the convdoctor result, and
    `speedup_vs_heuristic_same_process` = twin ms / convdoctor ms is the fair heuristic comparison.
    (optimize never routes a layer through torch:benchmark, so the twin's cuDNN choices are
    PyTorch's heuristics, as in the eager_heuristic process);
  * every child process (variants and first-step runs) is pinned to the same CPU cores (--cpus,
    env RT_CPUS: "N" = the first N available cores, default 4; "0-3,8" = those cores; "off" = no
    pinning), so the cross-process comparisons (vs eager_benchmark, vs compile) are less noisy;
  * --repeats N (env RT_REPEATS, default 1) runs the eager and convdoctor processes N times in
    alternating order (later convdoctor runs do not tune: same database, same routes); the median
    over runs is reported with the spread (max - min) of the runs.
Summary ratios per config/mode:
  speedup_vs_best_eager_fair = min(eager_benchmark ms, eager_heuristic_same_process ms) /
    convdoctor ms ("vs best eager" in the table). The heuristic baseline is the same-process twin
    (the fair one); benchmark=True cannot share the convdoctor process, because PyTorch's cuDNN
    choice cache ignores the benchmark flag (the first run of a shape decides for every later
    one), so eager_benchmark stays a cross-process figure.
  speedup_vs_heuristic_same_process ("vs heur same proc" in the table).
  speedup_vs_best_eager and speedup_vs_heuristic: the former cross-process figures (own-process
    eager_heuristic and eager_benchmark vs convdoctor), kept for comparison with earlier runs.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from convdoctor import zoo  # noqa: E402
from convdoctor.engines.cudnn_enum import build_plan  # noqa: E402
from convdoctor.measure.steps import make_step, median, sync  # noqa: E402
from convdoctor.runtime import optimizer as opt  # noqa: E402

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


# ---------------------------------------------------------------------- method helpers
def parse_cpus(spec: str | None, available: Sequence[int] | None) -> list[int] | None:
    """The cores to pin child processes to. `spec`: "N" = the first N of `available` (sorted);
    "0-3,8" = those cores (the ones not available are dropped); "", "off", "none", "all" = no
    pinning. None means: do not pin (also where the platform has no affinity). Raises ValueError
    on a malformed spec or when no listed core is available."""
    if available is None:
        return None
    spec = (spec or "").strip().lower()
    if spec in ("", "off", "none", "all", "no"):
        return None
    avail = sorted(set(available))
    if spec.isdigit():
        n = int(spec)
        if n <= 0:
            raise ValueError(f"--cpus/RT_CPUS {spec!r}: the number of cores must be >= 1 "
                             "(or 'off' for no pinning)")
        return avail[:n]
    wanted: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"--cpus/RT_CPUS {spec!r}: expected a count like 4, a core list "
                             "like 0-3,8, or 'off'")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"--cpus/RT_CPUS {spec!r}: range {part} runs backwards")
        wanted.update(range(a, b + 1))
    cpus = sorted(wanted & set(avail))
    if not cpus:
        raise ValueError(f"--cpus/RT_CPUS {spec!r}: none of these cores is available to this "
                         f"process (available: {avail})")
    return cpus


def available_cpus() -> list[int] | None:
    """Cores this process may run on, or None where the platform has no CPU affinity."""
    if not hasattr(os, "sched_getaffinity") or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        return sorted(os.sched_getaffinity(0))
    except OSError:
        return None


def _pinner(cpus: list[int] | None) -> Callable[[], None] | None:
    """preexec_fn for subprocess: pin the child (and every thread it starts) to `cpus`; a failure
    is ignored (the child then runs unpinned and reports its real affinity)."""
    if not cpus:
        return None

    def pin() -> None:
        try:
            os.sched_setaffinity(0, cpus)
        except (OSError, AttributeError, ValueError):
            pass

    return pin


def round_sizes(steps: int, rounds: int) -> list[int]:
    """Split `steps` timed steps into at most `rounds` rounds of near-equal size (sum == steps)."""
    steps = max(1, steps)
    rounds = max(1, min(rounds, steps))
    return [steps // rounds + (1 if i < steps % rounds else 0) for i in range(rounds)]


def time_rounds(steps_by_name: dict[str, Callable[[], None]], dev: str, *, warmup: int = 4,
                steps: int = 20, rounds: int = 5) -> dict[str, dict[str, Any]]:
    """Time one or more step functions interleaved: `warmup` untimed steps each, then `rounds`
    rounds in which each function runs its share of `steps` (the order of the functions is
    reversed every other round, so neither always follows the other). One device-synchronized
    wall-clock sample per step; also the process CPU time spent until the step was issued (before
    the sync): close to the wall time means the step is host-bound."""
    names = list(steps_by_name)
    for name in names:
        for _ in range(max(0, warmup)):
            steps_by_name[name]()
    sync(dev)
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    for i, per in enumerate(round_sizes(steps, rounds)):
        for name in names if i % 2 == 0 else names[::-1]:
            fn = steps_by_name[name]
            for _ in range(per):
                c0 = time.process_time()
                t0 = time.perf_counter()
                fn()
                c1 = time.process_time()
                sync(dev)
                wall[name].append((time.perf_counter() - t0) * 1e3)
                cpu[name].append((c1 - c0) * 1e3)
    return {k: {"ms": median(wall[k]), "samples_ms": [round(v, 4) for v in wall[k]],
                "issue_cpu_ms": median(cpu[k])} for k in names}


def tuning_share(left_s: float, slots_left: int) -> float:
    """Seconds of tuning for the next config/mode: an even share of what is left, so every config
    gets its turn (time a slot does not use rolls over to the later ones). One budget split first
    come, first served lets ResNet-50 use all of it, leaving the speech front end and the 3D U-Net
    untuned."""
    if left_s <= 0 or slots_left <= 0:
        return 0.0
    return left_s / slots_left


def process_facts() -> dict[str, Any]:
    """Native threads and child processes of this process (Linux /proc; empty elsewhere): a
    thread or worker left running after optimize() would compete with a host-bound step."""
    facts: dict[str, Any] = {}
    try:
        tasks = os.listdir("/proc/self/task")
        facts["threads"] = len(tasks)
        kids: set[str] | None = None     # None: this kernel has no /proc/.../children
        for t in tasks:
            try:
                found = Path(f"/proc/self/task/{t}/children").read_text().split()
            except OSError:
                continue
            kids = (kids or set()) | set(found)
        if kids is not None:
            facts["child_processes"] = len(kids)
    except OSError:
        pass
    return facts


def compile_wide() -> tuple[list[int], list[int]] | None:
    """For torch.compile's compilation (lazy: it runs in the first step) let this thread and the
    compile workers it starts use every core the parent had (env RT_COMPILE_CPUS, set by the
    parent), not only the cores the timed steps are pinned to: max-autotune compiles and times
    many kernels, and 4 cores would make its compile time, not its step time, the figure. Returns
    (the cores now, the pinned cores to go back to), or None where there is nothing to widen."""
    spec = os.environ.get("RT_COMPILE_CPUS", "")
    if not spec or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        wide = [int(c) for c in spec.split(",")]
        pinned = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, wide)
        import torch._inductor.config as inductor_config
        inductor_config.compile_threads = len(wide)
    except (ValueError, OSError, ImportError, AttributeError):
        return None
    return wide, pinned


def variant_child(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one variant over every config and mode in THIS process (the parent starts one process
    per variant: PyTorch caches its cuDNN choice per shape without the benchmark flag, so heuristic
    and benchmark runs in one process would share choices). The convdoctor variant also times a
    stock eager twin (heuristics) interleaved with the optimized model."""
    dev = args.device
    if dev == "cuda":
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.benchmark = variant == "eager_benchmark"
    deadline = time.monotonic() + args.time_budget
    out: dict[str, Any] = {"_affinity": available_cpus()}
    slots_left = 2 * len(args.configs.split(","))
    for name in args.configs.split(","):
        cfg = CONFIGS[name]
        if variant == "compile" and cfg["model"] not in args.compile:
            continue
        for train in (True, False):
            mode = "train" if train else "inference"
            if args.modes and mode not in args.modes:
                slots_left -= 1
                continue
            slots = slots_left        # this slot and the ones after it share what is left
            slots_left -= 1
            res: dict[str, Any] = {}
            model = step = twin = twin_step = None
            try:
                model, x = build(cfg, dev)
                if not train:
                    model.eval()
                if variant == "convdoctor" and not args.no_twin:
                    # The stock twin (same seed and input, PyTorch's heuristics like every unrouted
                    # layer), timed alone BEFORE optimize() as well: a process that is slow for
                    # host reasons is slow before and after; one that optimize() slowed is not.
                    twin, tx = build(cfg, dev)
                    if not train:
                        twin.eval()
                    twin_step = make_step(twin, tx, train, with_optimizer=train)
                    res["process_before_optimize"] = process_facts()
                    before = time_rounds({"stock": twin_step}, dev, warmup=4, steps=args.steps,
                                         rounds=1)["stock"]
                    res["stock_before_optimize"] = {k: before[k] for k in ("ms", "issue_cpu_ms")}
                    if dev == "cuda":
                        torch.cuda.empty_cache()  # the twin's cached blocks: not during tuning
                share = tuning_share(deadline - time.monotonic(), slots)
                t0 = time.monotonic()
                if variant == "compile":
                    wide = compile_wide()
                    model = torch.compile(model, mode="max-autotune")
                elif variant == "convdoctor":
                    opt.optimize(model, x, train=train, db=args.db, tune_missing=share > 0,
                                 budget_s=args.budget, steps=max(4, args.steps // 2),
                                 backend="cuda" if dev == "cuda" else "cpu",
                                 tune_time_limit_s=share)
                    res["tuning_share_s"] = share
                    rep = opt.report_of(model)
                    res["report"] = {
                        "channels_last": rep.channels_last,
                        "channels_last_reason": rep.channels_last_reason,
                        "graphs": rep.graphs, "graphs_reason": rep.graphs_reason,
                        "routing": rep.routing, "routing_reason": rep.routing_reason,
                        "problems": rep.problems, "from_db": rep.from_db, "tuned": rep.tuned,
                        "untuned": rep.untuned, "tuning_s": rep.tuning_s, "notes": rep.notes[:20],
                        "choices": _choice_counts(rep),
                        "graph_choices": _choice_counts(rep, graph=True),
                        "margins": dict(rep.margins), "extensions": dict(rep.extensions),
                        "verify_ms": dict(rep.verify_ms),
                        "graphs_ms": dict(rep.graphs_ms)}
                step = make_step(model, x, train, with_optimizer=train)
                step()
                sync(dev)
                res["setup_and_first_step_s"] = time.monotonic() - t0
                if variant == "compile":
                    res["compile_cpus"] = len(wide[0]) if wide else None
                    if wide:  # back to the pinned cores for the timed steps
                        try:
                            os.sched_setaffinity(0, wide[1])
                        except OSError:
                            pass
                steps = {variant: step}
                if twin_step is not None:
                    res["process_after_optimize"] = process_facts()
                    twin_step()
                    sync(dev)
                    steps = {"eager_heuristic_same_process": twin_step, variant: step}
                t = time_rounds(steps, dev, warmup=4, steps=args.steps, rounds=args.rounds)
                res.update(t[variant])
                if "eager_heuristic_same_process" in t:
                    same = t["eager_heuristic_same_process"]
                    res["eager_heuristic_same_process"] = same
                    res["speedup_vs_heuristic_same_process"] = same["ms"] / res["ms"]
                    res["timing"] = (f"interleaved with eager_heuristic_same_process in "
                                     f"{len(round_sizes(args.steps, args.rounds))} rounds")
            except Exception as exc:  # noqa: BLE001 - reported, the other configs go on
                res["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
            del model, step, twin, twin_step
            out.setdefault(name, {})[mode] = res
            # Every finished slot so far, one JSON line: a child stopped at --variant-timeout
            # (a long torch.compile) still reports the slots it finished.
            print(json.dumps(out, default=str), flush=True)
            if dev == "cuda":
                torch.cuda.empty_cache()
    return out


def run_variant(variant: str, args: argparse.Namespace, timeout: float,
                time_budget: float | None = None) -> dict[str, Any]:
    tb = args.time_budget if time_budget is None else time_budget
    cmd = [sys.executable, str(Path(__file__).resolve()), "--variant-child", variant,
           "--device", args.device, "--configs", args.configs, "--db", args.db,
           "--steps", str(args.steps), "--budget", str(args.budget), "--rounds", str(args.rounds),
           "--time-budget", str(tb), "--compile", ",".join(args.compile),
           "--modes", ",".join(args.modes)]
    if args.no_twin:
        cmd.append("--no-twin")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    avail = available_cpus()
    if variant == "compile" and avail:
        env["RT_COMPILE_CPUS"] = ",".join(str(c) for c in avail)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           preexec_fn=_pinner(args.cpu_list))
    except subprocess.TimeoutExpired as exc:
        partial = partial_result(exc.stdout)
        partial["_error"] = f"timed out after {timeout:.0f} s"
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        if err:
            partial["_stderr_tail"] = err[-1500:]
        return partial
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"_error": f"exit {p.returncode}: {p.stderr[-1500:]}"}
    data = json.loads(lines[-1])
    data["_wall_s"] = time.monotonic() - t0
    return data  # type: ignore[no-any-return]


def partial_result(stdout: str | bytes | None) -> dict[str, Any]:
    """The slots a child finished before it was stopped: its last complete JSON line ({} if
    none)."""
    if isinstance(stdout, bytes):
        stdout = stdout.decode(errors="replace")
    for ln in reversed((stdout or "").splitlines()):
        if ln.startswith("{"):
            try:
                data = json.loads(ln)
            except ValueError:
                continue  # cut mid-line
            if isinstance(data, dict):
                return data
    return {}


REPEATED = ("eager_heuristic", "eager_benchmark", "convdoctor")


def run_plan(variants: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """(run index, variant) in the order to start them: every variant once, then, for each further
    repeat, the eager and convdoctor variants again in reversed, then forward, ... order."""
    plan = [(0, v) for v in variants]
    again = [v for v in variants if v in REPEATED]
    for r in range(1, max(1, repeats)):
        plan += [(r, v) for v in (again[::-1] if r % 2 else again)]
    return plan


def _spread(xs: Sequence[float]) -> float:
    return max(xs) - min(xs) if xs else float("nan")


def merge_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One variant's results for one config/mode over repeated processes: the first run that has a
    time is the base (with its report); `ms` becomes the median over runs, `runs_ms` and
    `ms_spread` (max - min) show the noise, the same for the same-process twin and its ratio; the
    later runs' timings are kept under `repeats`."""
    if len(runs) == 1:
        return dict(runs[0])
    timed = [r for r in runs if "ms" in r]
    if not timed:
        return dict(runs[0])
    base = dict(timed[0])
    ms = [r["ms"] for r in timed]
    base.update(ms_run0=timed[0]["ms"], runs_ms=ms, ms=median(ms), ms_spread=_spread(ms))
    same = [r["eager_heuristic_same_process"]["ms"] for r in timed
            if "eager_heuristic_same_process" in r]
    if same:
        base["eager_heuristic_same_process"] = dict(
            base["eager_heuristic_same_process"], ms_run0=base["eager_heuristic_same_process"]["ms"],
            runs_ms=same, ms=median(same), ms_spread=_spread(same))
        sp = [r["speedup_vs_heuristic_same_process"] for r in timed
              if "speedup_vs_heuristic_same_process" in r]
        base.update(speedup_vs_heuristic_same_process=median(sp),
                    speedup_vs_heuristic_same_process_runs=sp)
    keep = ("ms", "samples_ms", "issue_cpu_ms", "setup_and_first_step_s",
            "eager_heuristic_same_process", "speedup_vs_heuristic_same_process", "error",
            "stock_before_optimize", "process_before_optimize", "process_after_optimize")
    base["repeats"] = [{k: r[k] for k in keep if k in r} for r in runs if r is not timed[0]]
    return base


def summarize(slot: dict[str, Any]) -> None:
    """Add the ratios of one config/mode slot in place (see the module docstring)."""
    cd = slot.get("convdoctor", {})
    cd_ms = cd.get("ms")
    if not cd_ms:
        return
    eager = [slot[v]["ms"] for v in ("eager_heuristic", "eager_benchmark")
             if v in slot and "ms" in slot[v]]
    if eager:  # the former cross-process figures
        slot["speedup_vs_best_eager"] = min(eager) / cd_ms
        if "ms" in slot.get("eager_heuristic", {}):
            slot["speedup_vs_heuristic"] = slot["eager_heuristic"]["ms"] / cd_ms
    same = cd.get("eager_heuristic_same_process", {}).get("ms")
    if same:
        slot["speedup_vs_heuristic_same_process"] = cd.get(
            "speedup_vs_heuristic_same_process", same / cd_ms)
        best = [same] + ([slot["eager_benchmark"]["ms"]]
                         if "ms" in slot.get("eager_benchmark", {}) else [])
        slot["speedup_vs_best_eager_fair"] = min(best) / cd_ms


def _choice_counts(rep: Any, graph: bool = False) -> dict[str, int]:
    """Chosen routes per kind (cuDNN plans by engine); `graph`: the routes ranked for CUDA graph
    replay (no host cost per plan call), where they differ from the eager ones."""
    counts: dict[str, int] = {}
    for lay in rep.layers:
        for d in lay.directions:
            key = (getattr(d, "graph_key", "") or d.key) if graph else d.key
            k = key.split("_")[0] if key.startswith("cudnn:") else key
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
                      "setup_s": t0 - t_imp, "affinity": available_cpus()}))


def first_step(db: str, cl: bool, cpus: list[int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("benchmark", "convdoctor"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--first-step-child", mode,
               "--db", db, "--cl", "1" if cl else "0"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env,
                               preexec_fn=_pinner(cpus))
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
    from convdoctor.engines.flag_exec import FlagExec, flag_exec
    from convdoctor.runtime import site as S

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
                from convdoctor.engines.cudnn_exec import PlanExec
                from convdoctor.runtime.record import problems_for

                rec = {**S._facts(x, m.weight, site.args), "y_shape": tuple(x.shape),
                       "grad": True, "x_requires_grad": True, "w_requires_grad": True}
                probs = problems_for(rec, True)
                ex = {d: PlanExec("cudnn:heuristic", p, build_plan(p)) for d, p in probs.items()}
                routes["cudnn-plan"] = S.Route({d: S.build_chain([ex[d]], dev) for d in S.DIRS})
            except Exception as exc:  # noqa: BLE001
                res["cudnn-plan_error"] = f"{type(exc).__name__}: {exc}"
        S.uninstall(m)

        def select(variant: str) -> None:
            S.uninstall(m)
            if variant != "stock":
                routed = S.install(m, "bench", dev)
                routed.routes[key] = routes[variant]

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


def assemble(results: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> None:
    """Fill results["variants"] and results["configs"] from every variant's runs (in run order),
    merging repeated runs (merge_runs) and adding the ratios (summarize)."""
    results["variants"] = {}
    per: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    for variant, datas in runs.items():
        infos = [{k: v for k, v in d.items() if k.startswith("_")} for d in datas]
        results["variants"][variant] = dict(infos[0], **({"repeats": infos[1:]} if infos[1:]
                                                         else {}))
        for d in datas:
            for name, modes in d.items():
                if name.startswith("_"):
                    continue
                for mode, r in modes.items():
                    per.setdefault(name, {}).setdefault(mode, {}).setdefault(variant, []).append(r)
    configs: dict[str, Any] = {}
    for name, modes in per.items():
        for mode, by_variant in modes.items():
            slot = {v: merge_runs(rs) for v, rs in by_variant.items()}
            summarize(slot)
            configs.setdefault(name, {})[mode] = slot
    results["configs"] = configs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--db", default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget", type=float, default=0.3, help="tuning seconds per problem")
    ap.add_argument("--time-budget", type=float, default=240.0,
                    help="seconds of tuning in the convdoctor process, shared evenly over the "
                         "configs and modes (unused time rolls over)")
    ap.add_argument("--compile", default="", help="comma-separated zoo models to torch.compile")
    ap.add_argument("--variant-timeout", type=float, default=420.0)
    ap.add_argument("--quick", action="store_true", help="CPU: fewer steps")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-first-step", action="store_true",
                    help="do not time ResNet-50's first training step (needs resnet50_fp32 tuned "
                         "in the database to mean anything)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds the timed steps are split into (interleaving in one process)")
    ap.add_argument("--no-twin", action="store_true",
                    help="do not time a stock eager twin in the convdoctor process")
    ap.add_argument("--cpus", default=os.environ.get("RT_CPUS", "4"),
                    help="pin child processes: N = first N available cores, a list like 0-3,8, "
                         "or 'off' (env RT_CPUS; default 4)")
    ap.add_argument("--repeats", default=os.environ.get("RT_REPEATS", "1"),
                    help="run the eager and convdoctor processes this many times, alternating "
                         "order; medians and spreads are reported (env RT_REPEATS; default 1)")
    ap.add_argument("--variants", default=os.environ.get("RT_VARIANTS", ""),
                    help="comma-separated variants to run, in this order (default: all of "
                         + ", ".join(VARIANTS) + "; env RT_VARIANTS)")
    ap.add_argument("--total-s", type=float, default=os.environ.get("RT_TOTAL_S", "0"),
                    help="stop every variant process by this many seconds after the start (0: no "
                         "limit; env RT_TOTAL_S); a stopped variant keeps the slots it finished")
    ap.add_argument("--modes", default=os.environ.get("RT_MODES", "train,inference"),
                    help="comma-separated modes to run: train, inference (env RT_MODES)")
    ap.add_argument("--first-step-child", default=None)
    ap.add_argument("--variant-child", default=None)
    ap.add_argument("--cl", default="auto")
    args = ap.parse_args()
    args.compile = [c for c in args.compile.split(",") if c]
    args.modes = [m for m in args.modes.split(",") if m]
    if any(m not in ("train", "inference") for m in args.modes):
        print(f"--modes/RT_MODES {','.join(args.modes)!r}: expected train and/or inference",
              file=sys.stderr)
        return 2
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
    try:
        repeats = int(args.repeats)
        if repeats < 1:
            raise ValueError
    except ValueError:
        print(f"--repeats/RT_REPEATS {args.repeats!r}: expected a whole number >= 1",
              file=sys.stderr)
        return 2
    if args.rounds < 1:
        print("--rounds must be >= 1", file=sys.stderr)
        return 2
    args.only = [v for v in args.variants.split(",") if v]
    unknown = [v for v in args.only if v not in VARIANTS]
    if unknown:
        print(f"--variants/RT_VARIANTS: unknown {', '.join(unknown)}; have {', '.join(VARIANTS)}",
              file=sys.stderr)
        return 2
    avail = available_cpus()
    try:
        args.cpu_list = parse_cpus(args.cpus, avail)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
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
           "threads": torch.get_num_threads(), "steps": args.steps, "rounds": args.rounds,
           "repeats": repeats, "cpus_available": avail, "cpu_affinity": args.cpu_list,
           "cpu_affinity_spec": args.cpus,
           "method": "one process per variant, each pinned to cpu_affinity (null: not pinned); "
                     "warm-up 4 steps + first step, then --steps timed steps "
                     "(device-synchronized), median; in the convdoctor process a stock eager "
                     "twin (cudnn.benchmark=False) is timed interleaved with the optimized model "
                     "in --rounds rounds (eager_heuristic_same_process); with repeats > 1 the "
                     "eager and convdoctor processes run again in alternating order (no tuning) "
                     "and ms is the median over runs, ms_spread = max - min"}
    results: dict[str, Any] = {"env": env, "configs": {}, "variants": {}}
    path = out / "runtime_bench.json"
    path.write_text(json.dumps(results, indent=2))
    if not args.skip_overhead:
        results["overhead"] = overhead(dev)
        path.write_text(json.dumps(results, indent=2, default=str))
    variants = [v for v in (args.only or VARIANTS)
                if not (v == "eager_benchmark" and dev != "cuda")
                and not (v == "compile" and not args.compile)]
    runs: dict[str, list[dict[str, Any]]] = {}
    for r, variant in run_plan(variants, repeats):
        timeout = args.variant_timeout
        if args.total_s:
            left = args.total_s - (time.monotonic() - t_start) - 10
            if left < 30:
                runs.setdefault(variant, []).append(
                    {"_run": r, "_error": f"not started: {max(0.0, left):.0f} s of --total-s left"})
                continue
            timeout = min(timeout, left)
        # Later convdoctor runs do not tune: the database from run 0, the same routes.
        data = run_variant(variant, args, timeout, time_budget=None if r == 0 else 0.0)
        data["_run"] = r
        runs.setdefault(variant, []).append(data)
        assemble(results, runs)
        path.write_text(json.dumps(results, indent=2, default=str))
    if dev == "cuda" and not args.skip_first_step:
        chosen = results["configs"].get("resnet50_fp32", {}).get("train", {}).get("convdoctor", {})
        cl = bool(chosen.get("report", {}).get("channels_last"))
        results["first_step_resnet50_fp32_train"] = first_step(args.db, cl, args.cpu_list)
    results["total_s"] = time.monotonic() - t_start
    path.write_text(json.dumps(results, indent=2, default=str))
    print(table(results))
    return 0


COLUMNS = (("eager_heuristic", "heur(own)"), ("eager_benchmark", "bench(own)"),
           ("compile", "compile"), ("convdoctor", "convdoctor"),
           ("eager_heuristic_same_process", "heur(cd proc)"))


def _ms_of(slot: dict[str, Any], key: str) -> dict[str, Any]:
    if key == "eager_heuristic_same_process":
        return slot.get("convdoctor", {}).get(key, {})  # type: ignore[no-any-return]
    return slot.get(key, {})  # type: ignore[no-any-return]


def table(results: dict[str, Any]) -> str:
    """Per config/mode: eager heuristic and eager benchmark (own processes), compile (if run),
    convdoctor, the stock heuristic twin timed in convdoctor's process, "vs best eager" =
    min(eager_benchmark, heuristic in convdoctor's process) / convdoctor and "vs heur same proc" =
    heuristic in convdoctor's process / convdoctor. The heuristic baseline is the same-process
    twin because host-bound steps time differently from process to process; eager_benchmark cannot
    share the process (PyTorch's cuDNN choice cache ignores the benchmark flag: the first run of a
    shape decides for every later one), so it stays a cross-process figure. Times in ms; with
    repeats, a line of spreads (max - min over the runs) follows."""
    lines = [f"env: {results['env']}"]
    for row in results.get("overhead", []):
        parts = [f"{k}: fwd {v['fwd_us']:.1f} us, fwd+bwd {v['fwdbwd_us']:.1f} us"
                 for k, v in row.items() if isinstance(v, dict)]
        lines.append(f"overhead {row['shape']} ({row['device']}): " + "; ".join(parts))
    for v, info in results.get("variants", {}).items():
        for i, run in enumerate([info, *info.get("repeats", [])]):
            if "_error" in run:
                lines.append(f"variant {v} run {i}: ERROR {str(run['_error'])[-400:]}")
    have_compile = any("compile" in slot for modes in results["configs"].values()
                       for slot in modes.values())
    cols = [(k, h) for k, h in COLUMNS if k != "compile" or have_compile]
    lines.append("times in ms (median of steps; own = the variant's own process, cd proc = "
                 "stock eager timed interleaved with convdoctor in its process)")
    lines.append(f"{'config':<18} {'mode':<9} " + " ".join(f"{h:>13}" for _, h in cols)
                 + f" {'vs best eager':>13} {'vs heur same proc':>17}")
    for name, modes in results["configs"].items():
        for mode, slot in modes.items():
            cells = []
            for k, _ in cols:
                r = _ms_of(slot, k)
                cells.append(f"{r['ms']:>13.3f}" if "ms" in r else
                             f"{('ERR' if 'error' in r else '-'):>13}")
            sp = slot.get("speedup_vs_best_eager_fair")
            sh = slot.get("speedup_vs_heuristic_same_process")
            lines.append(f"{name:<18} {mode:<9} {' '.join(cells)} "
                         f"{(f'{sp:.3f}x' if sp else '-'):>13} {(f'{sh:.3f}x' if sh else '-'):>17}")
            spreads = [f"{h} {_ms_of(slot, k)['ms_spread']:.3f} ({len(_ms_of(slot, k)['runs_ms'])} "
                       "runs)" for k, h in cols if "ms_spread" in _ms_of(slot, k)]
            runs_sp = slot.get("convdoctor", {}).get("speedup_vs_heuristic_same_process_runs")
            if runs_sp:
                spreads.append("vs heur same proc " + "/".join(f"{x:.3f}" for x in runs_sp))
            if spreads:
                lines.append(f"{'':<28}spread over runs (max-min ms): " + ", ".join(spreads))
            cdr = slot.get("convdoctor", {})
            if "issue_cpu_ms" in cdr and results["env"].get("device") != "cpu":
                same = cdr.get("eager_heuristic_same_process", {})
                lines.append(f"{'':<28}host CPU to issue a step: convdoctor "
                             f"{cdr['issue_cpu_ms']:.2f} ms" + (
                                 f", heur(cd proc) {same['issue_cpu_ms']:.2f} ms"
                                 if "issue_cpu_ms" in same else ""))
            rep = cdr.get("report")
            if rep:
                lines.append(f"{'':<28}layout {'channels_last' if rep['channels_last'] else 'as given'}"
                             f", routing {'on' if rep['routing'] else 'off'}, problems "
                             f"{rep['problems']} (db {rep['from_db']}, tuned {rep['tuned']} in "
                             f"{rep['tuning_s']:.0f}s), choices {rep['choices']}"
                             + (f", graph routes {rep['graph_choices']}"
                                if rep.get("graph_choices", rep["choices"]) != rep["choices"]
                                else ""))
                if rep.get("graphs_reason"):
                    lines.append(f"{'':<28}CUDA graphs {'on' if rep.get('graphs') else 'off'}: "
                                 f"{rep['graphs_reason']}")
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
