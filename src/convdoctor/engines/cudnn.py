"""cuDNN engine configurations as candidates: `cudnn:<plan name>`, run through cudnn-frontend.

The listing offers every plan cudnn-frontend reaches for the problem: heuristic modes A, B and
FALLBACK, bounded engine/knob enumeration (`cudnn_enum`), and knob settings one step away from the
fastest plans (`cudnn_refine`), all filtered by the numerical notes the problem's math mode and
determinism forbid (`cudnn_policy.note_filter`). The tuner times a plan on the problem's buffers
with one workspace per placement (`CudnnPlanRunner`); the runtime runs the same plan object
(`cudnn_exec.PlanExec`), its workspace held to the tuned time by the workspace guard.

A plan route pays more host time per eager call than PyTorch's own dispatch (`host_cost_s`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..measure import wsguard
from . import cudnn_policy as policy
from .base import Candidate, CandidateUnsupported, Engine
from .cudnn_enum import build_plan
from .runner import BufferRunner

if TYPE_CHECKING:
    from ..problem import ConvProblem

# Host cost per call of running a cuDNN plan from Python instead of PyTorch's own dispatch,
# measured on an H100 host (benchmarks/bench_optimize.py overhead()): a plan direction in training
# costs ~60-80 us more than a flag route (the custom autograd Function); without autograd
# (inference) the forward calls the plan straight from the module's forward and cost 4.8-5.4 us
# more (25.99 -> 31.35 us, 40.57 -> 45.37 us): twice that is charged.
TRAIN_HOST_COST_S = 80e-6
INFERENCE_HOST_COST_S = 10e-6


def summary(obj: Any) -> dict[str, Any]:
    """`obj.summary()` for the listing record, or why it failed: the record must never cost the
    listing."""
    try:
        return dict(obj.summary())
    except Exception as exc:  # noqa: BLE001
        return {"record_error": f"{type(exc).__name__}: {exc}"[:200]}


def deterministic(plan: Any) -> bool:
    """A listed plan (`cudnn_graph.PlanInfo`) is deterministic: its engine's notes are known and
    do not say otherwise."""
    return "NONDETERMINISTIC" not in plan.notes and "notes-unknown" not in plan.notes


def excluded_engines(units: set[str], why: dict[str, str] | None = None) -> dict[int, str]:
    """cuDNN engine id -> why, for the listing-step units that name an engine ("eng69" -> 69);
    `why`: unit -> reason (from the worker's parent); other units are not engines."""
    from .cudnn_enum import unit_engine

    out: dict[int, str] = {}
    for u in units:
        eng = unit_engine(u)
        if eng is not None:
            out[eng] = (why or {}).get(u) or "a step of an earlier listing with this engine failed"
    return out


class CudnnPlanRunner(BufferRunner):
    """`cudnn:<plan>`: the plan on the problem's buffers, one workspace per placement slot, held
    to the fastest by the workspace guard when the harness settles its finalists."""

    def __init__(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> None:
        plan_problem, name = self._plan_of(problem, candidate)
        self.guard_enabled = bool(getattr(getattr(backend, "settings", None), "ws_guard", True))
        try:
            self.plan = build_plan(plan_problem, name, device=backend.device)
        except (LookupError, RuntimeError, ValueError) as exc:
            raise CandidateUnsupported(str(exc)) from None
        super().__init__(backend, problem, candidate)
        self._ws_views = self._workspaces()
        self._ws_forced: Any = None   # the workspace under test while the guard times one
        self._ws_spares: list[Any] = []  # fresh workspaces the guard kept for slow slots
        self.ws_guard: list[Any] = []  # wsguard.GuardResult per placement slot, once guarded
        self._guarded = False

    @staticmethod
    def _plan_of(problem: ConvProblem, candidate: Candidate) -> tuple[ConvProblem, str]:
        name = policy.plan_name_of(candidate.key)
        if name is None:
            raise CandidateUnsupported(f"{candidate.key} is not a cuDNN plan key")
        return problem, name

    def _workspaces(self) -> list[Any]:
        """One workspace per placement, at different addresses inside one buffer (see
        `placement.workspace_offsets`): some plans' speed depends on where their workspace lies."""
        import torch

        from ..measure.placement import workspace_offsets

        n = max(1, self.placements)
        nbytes = max(1, self.plan.workspace_bytes)
        offs = workspace_offsets(self.plan.workspace_bytes, n)
        buf = torch.empty(offs[-1] + nbytes, dtype=torch.uint8, device=f"cuda:{self.device}")
        return [buf[o:o + nbytes] for o in offs]

    @property
    def workspace(self) -> Any:
        if self._ws_forced is not None:
            return self._ws_forced
        views = self._ws_views
        return views[self._cur % len(views)]

    def _guard_workspaces(self) -> None:
        """`wsguard`: each placement slot's workspace, timed on the first placement's tensors, is
        held to the fastest of them and of one fresh workspace; a slot more than the tolerance
        slower gets a fresh workspace that is not (or the fastest of `wsguard.TRIES`), as
        `optimize` replaces a slow one. So the slots vary the tensors' placement (which a user
        cannot choose) and not the workspace's (which the runtime does). Every buffer tried stays
        allocated until all slots are decided (a freed one would come back to the next slot), and
        the slots' timers are dropped afterwards (a CUDA graph batch holds the workspace address
        it was captured with). Out of memory while guarding leaves the slots as they were."""
        import torch

        self._guarded = True
        if not wsguard.wanted(self.plan.workspace_bytes, self.guard_enabled):
            return
        nbytes = max(1, self.plan.workspace_bytes)
        dev = f"cuda:{self.device}"
        tried: list[Any] = []

        def fresh() -> Any:
            ws = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            tried.append(ws)
            return ws

        def time_of(ws: Any) -> float:
            self._ws_forced = ws
            try:
                return wsguard.time_with(self.run, device=self.device, samples=3)
            finally:
                self._ws_forced = None

        try:
            times = [time_of(v) for v in self._ws_views]
            ref = min([*times, time_of(fresh())])
            views = list(self._ws_views)
            results = []
            for i, v in enumerate(views):
                ws, res = wsguard.choose(v, fresh, time_of, reference_s=ref, first_s=times[i])
                if res.replaced:
                    views[i] = ws
                results.append(res)
        except torch.OutOfMemoryError:
            return  # unguarded: the slots keep their workspaces
        finally:
            for t in self._timers.values():
                t.close()
            self._timers = {}
        keep = {id(v) for v in views}
        self._ws_spares = [t for t in tried if id(t) in keep]
        self._ws_views = views
        self.ws_guard = results
        tried.clear()  # the rejected ones go back to the allocator now

    def settle(self) -> None:
        """Called by the harness for finalists, before sampling: the workspace guard."""
        if not self._guarded:
            self._guard_workspaces()

    def time(self, reps: int, slot: int | None = None) -> list[float]:
        out = super().time(reps, slot)
        moved = [i for i, r in enumerate(self.ws_guard) if r.replaced]
        if moved:
            self.timing_mode += " wsguard " + " ".join(
                f"{i + 1}:{self.ws_guard[i].times_s[0] * 1e6:.0f}->"
                f"{self.ws_guard[i].times_s[self.ws_guard[i].kept] * 1e6:.0f}us" for i in moved)
        return out

    def run(self) -> Any:
        import torch

        return self.plan.execute(self.a, self.b, self.out, workspace=self.workspace,
                                 stream=torch.cuda.current_stream(), check=False)

    def close(self) -> None:
        self._ws_views = [None]
        self._ws_spares = []
        self._ws_forced = None
        super().close()


class CudnnEngine(Engine):
    name = "cudnn"
    by_name = True
    prefix = policy.CUDNN_PREFIX
    runs_transposed = False
    summary = ("cuDNN engine configurations through cudnn-frontend: heuristic lists, engine/knob "
               "enumeration, knob refinement")

    def offers(self, problem: ConvProblem, backend: Any, *, lean: bool = False
               ) -> list[Candidate]:
        from .cudnn_enum import excluding

        why = getattr(backend, "listing_exclude_why", None) or {}
        engines = excluded_engines(set(getattr(backend, "listing_exclude", None) or ()), why)
        with excluding(engines):
            return _listing(problem, backend, lean=lean)

    def runner(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
        return CudnnPlanRunner(backend, problem, candidate)

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        from .cudnn_exec import PlanExec

        return PlanExec.build(key, problem, reference_s)

    def host_cost_s(self, key: str, *, train: bool) -> float:
        return TRAIN_HOST_COST_S if train else INFERENCE_HOST_COST_S


def _listing(problem: ConvProblem, backend: Any, *, lean: bool) -> list[Candidate]:
    """The heuristic lists, enumeration and (unless `lean`) knob refinement; what happened goes
    into `backend.last_listing`, the enumeration and refinement into `backend.last_enumeration`
    and `backend.last_refinement`. A cuDNN that lists nothing leaves its error in
    `backend.cudnn_error` and offers nothing."""
    from ..errors import DependencyMissing
    from .cudnn_enum import enumerate_plans

    s = backend.settings
    backend.last_enumeration = backend.last_refinement = None
    backend.last_listing["lean"] = lean
    try:
        # a cap keeps only some enumerated plans next to heuristic ones; with no heuristic plan,
        # enumeration may fill the cap
        en = enumerate_plans(problem, device=backend.device,
                             enumerate_engines=s.cudnn_enum and not lean,
                             max_extra=s.cudnn_enum_extra, time_budget_s=s.cudnn_enum_budget_s,
                             max_extra_alone=s.cudnn_max_plans or None)
    except DependencyMissing as exc:
        backend.cudnn_error = str(exc)
        backend.last_listing["error"] = backend.cudnn_error
        return []
    except Exception as exc:  # noqa: BLE001 - graph not supported by cuDNN at all
        backend.cudnn_error = f"{type(exc).__name__}: {exc}"[:400]
        backend.last_listing["error"] = backend.cudnn_error
        return []
    backend.last_enumeration = en
    backend.last_listing["enumeration"] = summary(en)
    built = en.built()
    if s.cudnn_max_plans > 0:
        # keep the heuristic ranks first, and always some enumerated plans when there are any
        enum = [p for p in built if p.source == "enum"]
        heur = [p for p in built if p.source != "enum"]
        n_enum = min(len(enum), max(0, s.cudnn_max_plans // 4)) if heur else len(enum)
        built = heur[: s.cudnn_max_plans - n_enum] + enum[:n_enum]
    if not lean:
        built = built + _refined(problem, backend, en)
        if backend.last_refinement is not None:
            backend.last_listing["refinement"] = summary(backend.last_refinement)
    out = []
    ref = backend.last_refinement
    for p in built:
        notes = (f"source={p.source}",) + tuple(n.lower() for n in p.notes)
        if ref is not None and p.name in ref.origin:
            seed = ref.origin[p.name]
            notes += (f"one knob from {seed}: quick {ref.quick_us[p.name]:.1f} us vs "
                      f"{ref.quick_us[seed]:.1f} us",)
        out.append(Candidate(policy.cudnn_key(p.name), "cuda", p.workspace_bytes,
                             deterministic(p), notes))
    return out


def _refined(problem: ConvProblem, backend: Any, en: Any) -> list[Any]:
    """Plans one knob away from the fastest ones (`cudnn_refine`), or [] when refinement is off
    or fails (the failure is kept in `backend.last_refinement`'s notes, never raised)."""
    from . import cudnn_refine as refine
    from .listing import listing_step

    s = backend.settings
    backend.last_refinement = None
    if not s.cudnn_refine or s.cudnn_refine_budget_s <= 0:
        return []
    try:
        listing_step("setup", "", "refinement buffers and timer")
        sets = backend.placements_for(problem).sets
        timer = refine.event_timer(problem, sets[0])
        res = refine.refine(problem, en, timer, device=backend.device,
                            budget_s=s.cudnn_refine_budget_s)
    except Exception as exc:  # noqa: BLE001 - refinement only adds candidates
        res = refine.Refinement(plans=[], notes=[f"refinement failed: {type(exc).__name__}: "
                                                 f"{' '.join(str(exc).split())[:200]}"])
    backend.last_refinement = res
    return list(res.plans)


CUDNN = CudnnEngine()
