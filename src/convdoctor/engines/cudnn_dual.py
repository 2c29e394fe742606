"""The dual problem as candidates: `cudnn-dual:<plan name>`.

At stride 1 the data gradient of a convolution is a forward convolution of dy with the weight
flipped in space and channel-swapped, and the other way round (`cudnn_policy.dual_problem`). So a
stride-1 fprop or dgrad can run as a cuDNN plan of the other direction on the problem's own input
and output, the weight transformed by one gather per call (`xform`, inside the timed call, as a
route pays it). The dual problem is listed, quick-timed and knob-refined like the problem's own
(half the budgets), and its plans are offered only when their quick time (the plan alone) is within
`BAND` of the fastest plan of either kind, at most `KEEP` of them. Without quick times (knob
refinement off, as in quick tuning) its first `HEURISTIC_KEEP` plans in cuDNN's heuristic order are
offered for the harness to time. The listing record (`dual` in
`TuneResult.listing`) says what happened; a failure here never costs the problem's own candidates.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..measure.buffers import empty_for
from ..problem import DTYPE_BYTES
from . import cudnn_policy as policy
from .base import Candidate, CandidateUnsupported, Engine
from .cudnn import (
    INFERENCE_HOST_COST_S,
    TRAIN_HOST_COST_S,
    CudnnPlanRunner,
    deterministic,
    excluded_engines,
    summary,
)

if TYPE_CHECKING:
    from ..problem import ConvProblem

# A dual plan is offered when its quick time (without the weight transform) is within this of the
# fastest quick time of the problem's own and dual plans; at most KEEP of them.
BAND = 0.10
KEEP = 6
# without quick times (knob refinement off): the dual problem's first plans in heuristic order
HEURISTIC_KEEP = 3
# listing-step units of the dual problem's listing ("dual:eng69")
UNIT = "dual:"
# Host cost a dual route adds to a plan call outside a CUDA graph: an `empty_strided` and an
# `index_select` (the weight's gather) per call, which graph-batched tuning does not see. An
# estimate: the two ops' host path took 4.1 us per call on a CPU build machine (tiny tensors),
# plus a kernel launch.
EXTRA_HOST_COST_S = 8e-6


def pick_dual(quick: dict[str, float], own: dict[str, float], names: set[str]) -> list[str]:
    """The dual plans to offer: those among `names` whose quick time (`quick`, plan alone, us) is
    within BAND of the fastest quick time of either kind (`own`: the problem's own plans),
    fastest first (then by name), at most KEEP. Nothing when either side has no time."""
    if not quick or not own:
        return []
    best = min(min(quick.values()), min(own.values()))
    return sorted((n for n in quick if n in names and quick[n] <= best * (1 + BAND)),
                  key=lambda n: (quick[n], n))[:KEEP]


class DualPlanRunner(CudnnPlanRunner):
    """`cudnn-dual:<plan>`: a plan of the problem's dual (`cudnn_policy.dual_problem`) on the problem's
    own input and output buffers, with the weight transformed first (`xform`): the
    transform runs inside every timed call, as `optimize` pays it per call."""

    @staticmethod
    def _plan_of(problem: ConvProblem, candidate: Candidate) -> tuple[ConvProblem, str]:
        name = policy.dual_plan_name_of(candidate.key)
        dual = policy.dual_problem(problem)
        if name is None or dual is None:
            raise CandidateUnsupported(f"{candidate.key}: no dual problem for {problem.short()} "
                                       "(stride-1 fprop and dgrad only)")
        return dual, name

    def __init__(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> None:
        from . import xform

        super().__init__(backend, problem, candidate)
        dual = self.plan.problem
        dev = f"cuda:{self.device}"
        # one transformed-weight buffer per placement, like the workspaces
        self._wts = [empty_for(dual, "w", dev) for _ in range(max(1, self.placements))]
        self._index = xform.index_for(problem, dual, dev)
        self._transform = xform.transform  # no import on the timed path

    def run(self) -> Any:
        import torch

        wt = self._transform(self.b, self._index, self._wts[self._cur % len(self._wts)])
        return self.plan.execute(self.a, wt, self.out, workspace=self.workspace,
                                 stream=torch.cuda.current_stream(), check=False)

    def close(self) -> None:
        self._wts = [None]
        super().close()


class DualEngine(Engine):
    name = "cudnn-dual"
    by_name = True
    prefix = policy.DUAL_PREFIX
    runs_transposed = False
    summary = "a stride-1 fprop or dgrad as a cuDNN plan of its dual problem (weight transformed)"

    def offers(self, problem: ConvProblem, backend: Any, *, lean: bool = False
               ) -> list[Candidate]:
        if lean or not backend.settings.cudnn_dual or policy.dual_problem(problem) is None:
            return []
        from .cudnn_enum import excluding
        from .listing import unit_prefix

        why = getattr(backend, "listing_exclude_why", None) or {}
        units = set(getattr(backend, "listing_exclude", None) or ())
        # the dual problem's listing reports its engines as "dual:engN" (its own graph's ids)
        dual_units = {u[len(UNIT):]: why.get(u, "") for u in units if u.startswith(UNIT)}
        engines = excluded_engines(set(dual_units), {u: w for u, w in dual_units.items() if w})
        with excluding(engines), unit_prefix(UNIT):
            return _listing(problem, backend)

    def runner(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
        return DualPlanRunner(backend, problem, candidate)

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        from .cudnn_exec import DualPlanExec

        return DualPlanExec.build(key, problem, reference_s)

    def host_cost_s(self, key: str, *, train: bool) -> float:
        return (TRAIN_HOST_COST_S if train else INFERENCE_HOST_COST_S) + EXTRA_HOST_COST_S


def _candidates(problem: ConvProblem, dual: ConvProblem, plans: list[Any],
                note: Any) -> list[Candidate]:
    """Candidates of the dual plans `plans` (`PlanInfo`), their transformed weight counted as
    workspace (so a tie between equal times goes to a plan of the problem itself)."""
    wbytes = math.prod(dual.w_shape()) * DTYPE_BYTES[dual.dtype]
    out = []
    for p in plans:
        notes = (f"source={p.source}", f"dual {dual.direction} plan: weight flipped and "
                 f"channel-swapped per call (timed; its {wbytes} B buffer counted as "
                 f"workspace); {note(p)}", *(x.lower() for x in p.notes))
        out.append(Candidate(policy.dual_key(p.name), "cuda", p.workspace_bytes + wbytes,
                             deterministic(p), notes))
    return out


def _heuristic_duals(problem: ConvProblem, dual: ConvProblem, backend: Any,
                     rec: dict[str, Any]) -> list[Candidate]:
    """The dual problem's first `HEURISTIC_KEEP` built plans in cuDNN's heuristic order."""
    from .cudnn_enum import enumerate_plans

    try:
        en = enumerate_plans(dual, device=backend.device, enumerate_engines=False)
    except Exception as exc:  # noqa: BLE001 - the dual only adds candidates
        rec["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return []
    rec["enumeration"] = summary(en)
    plans = en.built()[:HEURISTIC_KEEP]
    rec["kept"] = [[policy.dual_key(p.name), None] for p in plans]
    rec["heuristic_order"] = True
    return _candidates(problem, dual, plans, lambda p: "in cuDNN's heuristic order")


def _listing(problem: ConvProblem, backend: Any) -> list[Candidate]:
    from ..measure.placement import allocate
    from . import cudnn_refine as refine
    from .cudnn_enum import enumerate_plans
    from .listing import listing_step

    s = backend.settings
    dual = policy.dual_problem(problem)
    assert dual is not None
    rec: dict[str, Any] = {"problem": dual.key()}
    backend.last_listing["dual"] = rec
    own = getattr(backend.last_refinement, "quick_us", None) or {}
    if not own and (not s.cudnn_refine or s.cudnn_refine_budget_s <= 0):
        # no quick times to compare with (knob refinement is off, as in quick tuning): the dual
        # problem's first heuristic plans are offered as they are, for the harness to time
        return _heuristic_duals(problem, dual, backend, rec)
    if not own:
        # the band compares with the problem's own quick times (its refinement's)
        rec["skipped"] = ("no quick times of the problem's own plans (refinement failed): "
                          "nothing to compare dual plans with")
        rec["kept"] = []
        return []
    try:
        # a second listing: half the enumeration and refinement budgets, so the two together
        # stay near what one listing took (the worker waits a bounded time for a listing)
        en = enumerate_plans(dual, device=backend.device, enumerate_engines=s.cudnn_enum,
                             max_extra=s.cudnn_enum_extra, time_budget_s=s.cudnn_enum_budget_s / 2)
        rec["enumeration"] = summary(en)
        listing_step("setup", "", "dual problem buffers and timer")
        sets = allocate(dual, backend.device, wanted=1).sets
        timer = refine.event_timer(dual, sets[0])
        res = refine.refine(dual, en, timer, device=backend.device,
                            budget_s=s.cudnn_refine_budget_s / 2)
        rec["refinement"] = summary(res)
    except Exception as exc:  # noqa: BLE001 - the dual only adds candidates
        rec["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return []
    quick = dict(res.quick_us)
    rec["best_own_us"] = round(min(own.values()), 2)
    if not quick:
        rec["kept"] = []
        return []
    rec["best_dual_us"] = round(min(quick.values()), 2)
    infos = {p.name: p for p in en.built()} | {p.name: p for p in res.plans}
    ranked = pick_dual(quick, own, set(infos))
    rec["kept"] = [[policy.dual_key(n), round(quick[n], 2)] for n in ranked]
    return _candidates(problem, dual, [infos[n] for n in ranked],
                       lambda p: f"plan alone {quick[p.name]:.1f} us quick")


CUDNN_DUAL = DualEngine()
