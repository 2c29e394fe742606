"""Knob-space refinement: cuDNN engine configurations next to the fastest heuristic plans.

cuDNN's heuristics list a few configurations of each engine (tile size, cluster shape, ...), and
the bounded enumeration in `cudnn_plan.enumerate_plans` tries each knob only at its ends and
middle. On the H100 (`lab/knob_explore.py`) configurations one knob away from
the fastest heuristic plan ran 1-4% faster on several fp32 layers (whisper conv2 4.0%, ResNet-50
3x3 at 14x14 3.2%, Inception 4a 2.3%). This module finds them cheaply, before the harness:

1. every built cuDNN plan of the enumeration gets a quick time (CUDA events around a few calls
   behind a GPU spin that hides the host's launch cost, no statistics: a ranking, not a
   result; `event_timer`);
2. the fastest plan of each of the fastest `engines` engines is a seed, and so is every other
   plan within `seed_band` of the fastest (`pick_seeds`); every setting one knob away from a
   seed (`policy.neighbor_settings`, each knob over its whole range) is built and given a quick
   time; if the best neighbour beats the seed by more than 1% it becomes the next seed (`rounds`
   times at most);
3. the `keep` fastest new plans whose quick time is within `margin` of the fastest plan seen go
   to the harness as ordinary candidates (source `refine`), where they are warmed up, checked
   against the float64 reference and measured like every other candidate.

All of it runs within `budget_s` (checked before each plan is timed or built); plans not kept are
dropped from the plan cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..measure.buffers import io_roles
from . import cudnn_enum as cp
from . import cudnn_graph as cg
from . import cudnn_policy as policy
from .listing import listing_step

if TYPE_CHECKING:
    from ..problem import ConvProblem

SOURCE = "refine"
BUDGET_NOTE = "refinement time budget spent"
MAX_WORKSPACE = 1 << 30  # a neighbour asking for more than 1 GiB of workspace is not timed


@dataclass
class Refinement:
    """What refinement did for one problem."""

    plans: list[cp.PlanInfo]                    # kept for the harness, fastest first
    quick_us: dict[str, float] = field(default_factory=dict)  # every plan it timed
    seeds: list[str] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)  # new plan -> the seed it came from
    tried: int = 0                              # knob settings offered to cuDNN
    built: int = 0                              # new plans that built
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """A JSON-safe record of the walk for the tuning result (`TuneResult.listing`): its seeds
        with their quick times, what it tried, built and kept, and its notes. Why: two
        tuning runs of Inception Mixed_5b.branch3x3dbl_2 kept different plans because one run's
        walk never started from the plan whose neighbour won the other; which seeds each run used
        could not be read afterwards."""
        def us(name: str) -> float | None:
            t = self.quick_us.get(name)
            return None if t is None else round(t, 2)

        return {
            "seeds": [[policy.cudnn_key(n), us(n)] for n in self.seeds],
            "timed": len(self.quick_us), "tried": self.tried, "built": self.built,
            "kept": [[policy.cudnn_key(p.name), us(p.name),
                      policy.cudnn_key(self.origin[p.name]) if p.name in self.origin else None]
                     for p in self.plans],
            "seconds": round(self.seconds, 3), "budget_spent": BUDGET_NOTE in self.notes,
            "notes": list(self.notes[:10]),
        }


QUICK_CALLS = 3  # calls per quick batch (two batches, the faster one counts)
# Every plan's quick time starts with a probe: one call between events after one warm-up call
# (launch cost included). A plan whose probe reads over SLOW_CUT times the fastest probe so far
# plus SLOW_SLACK_US, and again on a second call (a host hiccup can inflate one reading), keeps
# the probe as its quick time, without the batches: it can be neither a seed (within `seed_band`)
# nor kept (within `margin`). Probes are compared with probes, so launch cost is on both sides.
# Why: on an H100 the spin-covered batches (~20 calls per plan) made the quick times of
# depthwise fp16 layers' slow plans so costly that listing the candidates of 5 MobileNet/
# EfficientNet layers took over the worker's 30 s in both tuning runs, and those layers got no
# tuned result.
SLOW_CUT = 2.0
SLOW_SLACK_US = 50.0
# A plan whose probe reads over this keeps its probe as its quick time too, whatever the fastest
# so far: at half a second per call the launch cost the batches hide is nothing, and the batches
# (~8 more calls) would make one quick time outlast the worker's step watchdog
# (`worker.STEP_TIMEOUT_S`).
SLOW_ABS_US = 500_000.0


def event_timer(problem: ConvProblem, buffers: dict[str, Any], *,
                spin: bool | None = None) -> Callable[[cp.ConvPlan], float]:
    """A quick timer: the best per-call time (us) of two batches of `QUICK_CALLS` back-to-back
    calls, on `buffers` (role -> tensor, e.g. the problem's first placement).

    The batches are timed by the harness's own `timing.LaunchTimer` (no L2 flush, no CUDA graph):
    its warm-up calls, a GPU spin before each batch sized from the batch's measured host time,
    and a retake behind a longer spin when the host outran it, so the events time the kernels
    back to back, not the Python and cudnn-frontend launch cost. Why: on an H100
    (`lab/refine_stability.py`) the former plain timer (events around 3 calls after one
    warm-up call) read plans of a 17 us fp16 kernel at 23-29 us and of a 27 us one at 33-42 us:
    the host's launch cost per call was most of the figure, so which neighbour looked fastest,
    and which seeds a walk started from, was launch jitter, and two tuning runs of the same layer
    kept different refined plans (3 of the 4 unstable rows of an fp16 suite pass).
    `spin=False`, or a torch without `torch.cuda._sleep`, gives the plain timer.

    Every plan first gets a probe (see SLOW_CUT): a plan far slower than the fastest probed so far
    is not timed further."""
    import torch

    from ..measure import timing

    if spin is None:
        spin = True
    (ra, rb), ro = io_roles(problem.direction)
    a, b, out = buffers[ra], buffers[rb], buffers[ro]
    device = a.device.index if a.device.index is not None else torch.cuda.current_device()
    covered = bool(spin) and timing.spin_rate(device) > 0
    fastest = [float("inf")]  # the fastest probe (us) so far

    def batch(call: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(QUICK_CALLS):
                call()

        return run

    def timer(plan: cp.ConvPlan) -> float:
        ws = plan.workspace()

        def call() -> None:
            plan.execute(a, b, out, workspace=ws, check=False)

        name = str(getattr(plan, "name", ""))
        unit = cp.plan_unit(name)
        try:
            cut = min(SLOW_CUT * fastest[0] + SLOW_SLACK_US, SLOW_ABS_US)
            probe = timing.best_event_s(call, reps=1) * 1e6  # after one warm-up call
            if probe > cut:
                listing_step("time", unit, name)  # a new step: the watchdog starts again
                probe = min(probe, timing.best_event_s(call, reps=1, warmup=False) * 1e6)
            fastest[0] = min(fastest[0], probe)
            if probe > cut:
                return probe
            listing_step("time", unit, name)
            if not covered:
                return timing.best_event_s(batch(call), reps=2, warmup=False) / QUICK_CALLS * 1e6
            lt = timing.LaunchTimer(call, device=device, flush=False, batch=QUICK_CALLS,
                                    graph=False)
            return min(lt.time(2)) * 1e6
        finally:
            plan.release_workspace()

    return timer


def _canon(name: str) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    try:
        eng, knobs = policy.parse_plan_name(name)
    except ValueError:
        return None
    return eng, tuple(sorted(knobs.items()))


def _family(name: str) -> tuple[int, frozenset[int]]:
    """(engine, the knobs its name sets)."""
    eng, knobs = policy.parse_plan_name(name)
    return eng, frozenset(knobs)


def pick_seeds(ranked: list[str], quick_us: dict[str, float], *, engines: int = 2,
               band: float = 0.05, max_seeds: int = 4, family_ratio: float = 1.5,
               max_families: int = 2) -> list[str]:
    """Where the knob walks start: the fastest plan of each of the `engines` fastest engines, then
    every other plan within `band` of the fastest quick time (`max_seeds` of these two kinds in
    all), and the fastest plan of each other knob family of those engines (see below); fastest
    first. Why (H100, fp32 suite): with one seed per engine, two tuning runs of the same
    layer walked from different plans when their quick times swapped places (a plan ran 161.7 us
    in one process and 152.3 us in another), found different neighbours, and 4 of 88 layers were
    no longer chosen within 3% run to run; several seeds close to the best make both runs cover
    the same neighbourhoods."""
    if not ranked:
        return []
    seeds: list[str] = []
    for name in ranked:
        eng = policy.parse_plan_name(name)[0]
        if all(policy.parse_plan_name(s)[0] != eng for s in seeds):
            seeds.append(name)
        if len(seeds) >= engines:
            break
    # ... and of each other knob family of those engines within `family_ratio` of the fastest
    # (at most `max_families`; plans naming a different set of knobs: cuDNN leaves some knobs out
    # of a name at their default). Why (H100, wav2vec2 pos_conv fp16): eng27 was listed as
    # eng27_k2=1_k5=3_k14=5 (291 us) and eng27_k14=4_k2=0 (364 us); the walk sets only the
    # engine's reported knobs (k2, k14), so the fastest eng27 plan's neighbours all dropped its
    # k5, and the 184 us plan eng27_k14=4_k2=5, one knob from the slower family's plan, was found
    # only when a noisy quick time made that plan the seed. These seeds do not take the band's
    # places (`max_seeds` counts the others).
    engs = {policy.parse_plan_name(s)[0] for s in seeds}
    families = {_family(s) for s in seeds}
    extra: list[str] = []
    for name in ranked:
        if len(extra) >= max_families or quick_us[name] > quick_us[ranked[0]] * family_ratio:
            break
        fam = _family(name)
        if fam[0] in engs and fam not in families:
            families.add(fam)
            extra.append(name)
    best = quick_us[ranked[0]]
    for name in ranked:
        if len(seeds) >= max(max_seeds, engines):
            break
        if name not in seeds and name not in extra and quick_us[name] <= best * (1.0 + band):
            seeds.append(name)
    return sorted(seeds + extra, key=lambda n: (quick_us[n], n))


def refine(problem: ConvProblem, en: cp.Enumeration, timer: Callable[[cp.ConvPlan], float], *,
           device: int = 0, handle: Any = None, engines: int = 2, keep: int = 6,
           rounds: int = 2, budget_s: float = 6.0, margin: float = 0.02,
           seed_band: float = 0.05, max_seeds: int = 4, chunk: int = 32) -> Refinement:
    """Plans one knob away from the fastest plans of `en` (see the module docstring)."""
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    h = handle if handle is not None else cp.get_handle(device)
    res = Refinement(plans=[])
    by_name = {p.name: p for p in en.built() if _canon(p.name) is not None}

    def spent() -> bool:
        if time.perf_counter() <= deadline:
            return False
        if BUDGET_NOTE not in res.notes:
            res.notes.append(BUDGET_NOTE)
        return True

    for n, name in enumerate(by_name):
        if n and spent():  # the first plan is always timed: seeds need one
            break
        plan = cg.cached_plan(problem, name, device)
        if plan is None or plan.workspace_bytes > MAX_WORKSPACE:
            continue
        listing_step("time", cp.plan_unit(name), name)
        try:
            res.quick_us[name] = float(timer(plan))
        except Exception as exc:  # noqa: BLE001 - the harness will report this plan's failure
            res.notes.append(f"{name}: quick run failed: {' '.join(str(exc).split())[:120]}")
    if not res.quick_us:
        res.notes.append("no built cuDNN plan to start from")
        res.seconds = time.perf_counter() - t0
        return res
    ranked = sorted(res.quick_us, key=res.quick_us.__getitem__)
    res.seeds = pick_seeds(ranked, res.quick_us, engines=engines, band=seed_band,
                           max_seeds=max_seeds)
    known = {_canon(p.name) for p in en.plans}
    found: dict[str, cp.PlanInfo] = {}
    new_names: list[str] = []  # every new plan that built (all leave the cache unless kept)
    for seed in res.seeds:
        if spent():
            break
        engine, _ = policy.parse_plan_name(seed)
        listing_step("knobs", cp.engine_unit(engine), seed)  # not a plan's run: no quick-time wait
        try:
            spec, mapping = cp.engine_knobs(problem, h, engine)
        except RuntimeError as exc:
            res.notes.append(str(exc))
            continue
        if not spec:
            continue
        if any(t not in mapping for t, *_r in spec):
            res.notes.append(f"eng{engine}: knob numbers not learned; not refined")
            continue
        axes = [policy.knob_axis(lo, hi, st) for _t, lo, hi, st in spec]
        cur, cur_t = seed, res.quick_us[seed]
        notes = by_name[seed].notes
        for _ in range(max(1, rounds)):
            knobs = policy.parse_plan_name(cur)[1]
            if any(mapping[t] not in knobs for t, *_r in spec):
                res.notes.append(f"{cur}: a knob of eng{engine} is not in its name; not refined")
                break
            combos = policy.neighbor_settings(axes, [knobs[mapping[t]] for t, *_r in spec])
            best: tuple[str, float] | None = None
            for start in range(0, len(combos), chunk):
                if spent():
                    break
                listing_step("knobs", cp.engine_unit(engine), cur)
                g = cp._new_graph(problem, h, SOURCE)
                for c in combos[start:start + chunk]:
                    res.tried += 1
                    try:
                        g.graph.create_execution_plan(
                            engine, {t: v for (t, *_r), v in zip(spec, c, strict=True)})
                    except Exception:  # noqa: BLE001 - not a valid setting for this engine
                        continue
                cp._apply_filter(problem, g)
                for i in range(int(g.graph.get_execution_plan_count())):
                    if spent():
                        break
                    name = str(g.graph.get_plan_name_at_index(i))
                    canon = _canon(name)
                    if canon is None or canon in known:
                        continue
                    known.add(canon)
                    info, plan = cp._build_index(problem, g, i, device, SOURCE)
                    if plan is None:
                        continue
                    new_names.append(name)
                    if plan.workspace_bytes > MAX_WORKSPACE:
                        continue
                    res.built += 1
                    listing_step("time", cp.plan_unit(name), name)
                    try:
                        tq = float(timer(plan))
                    except Exception:  # noqa: BLE001 - builds but does not run: not a candidate
                        continue
                    res.quick_us[name] = tq
                    found[name] = cp.PlanInfo(info.name, SOURCE, True, info.workspace_bytes,
                                              "", notes)
                    res.origin[name] = cur
                    if best is None or tq < best[1]:
                        best = (name, tq)
            if best is None or best[1] >= cur_t * 0.99 or time.perf_counter() > deadline:
                break
            cur, cur_t = best
    listing_step("setup", "", "refinement done")
    limit = min(res.quick_us.values()) * (1.0 + margin)  # listed and new plans alike
    kept = sorted((n for n in found if res.quick_us[n] <= limit), key=res.quick_us.__getitem__)
    res.plans = [found[n] for n in kept[:keep]]
    res.origin = {n: res.origin[n] for n in kept[:keep]}
    keep_names = {p.name for p in res.plans}
    cg.forget_plans(problem, [n for n in new_names if n not in keep_names], device)
    res.seconds = time.perf_counter() - t0
    return res
