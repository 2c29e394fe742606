"""Executable cuDNN plans for one convolution problem, through cudnn-frontend's Python graph API.

`ConvPlan.build(problem, plan_name=None)` gives a plan you can run many times:

    plan = ConvPlan.build(problem)                    # best heuristic plan that passes the filters
    plan = ConvPlan.build(problem, "eng0_k2=1_k3=0")  # a named plan (e.g. from the tuning DB)
    plan.execute(x, w, y)                             # fprop; dgrad: (dy, w, dx); wgrad: (x, dy, dw)
    plan.execute({"x": x, "w": w}, y)                 # the same, tensors passed by role

`enumerate_plans(problem)` lists every plan reachable for the problem: heuristic modes A, B and
FALLBACK (deduplicated by plan name), then engine/knob enumeration (bounded), all filtered by the
numerical notes the problem forbids (`policy.note_filter`), each built so its workspace is known.

Implementation notes (cudnn-frontend 1.16, read from its source):
- A plan name (`eng<id>_k<knob>=<v>...`) identifies an engine configuration; a plan *index* is only a
  position in one graph's list. Plans are found again by name, never by index.
- The frontend keeps numerical notes in a list that is re-appended on every
  `create_execution_plan` call, so after the first manual plan the notes of index i belong to some
  other config of the graph. We therefore put the manual plans of ONE engine in one graph (notes are
  engine properties, so every entry is right) and give each engine its own graph.
- Import torch before cudnn so both use the same libcudnn.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import DependencyMissing
from ..backend import listing_step
from . import policy

if TYPE_CHECKING:
    from ...problem import ConvProblem

_LOCK = threading.RLock()
_HANDLES: dict[tuple[int, int], Any] = {}
# (device, problem key, plan name) -> ConvPlan, filled by enumerate_plans and ConvPlan.build.
_PLANS: dict[tuple[int, str, str], ConvPlan] = {}
# engine id -> why: engines a listing leaves out (neither built nor enumerated), set by the CUDA
# backend from its `listing_exclude` for one listing (`excluding`): an engine whose plan never
# returned from a build or a quick time in an earlier listing (see `..backend.listing_step`).
_EXCLUDED: dict[int, str] = {}


def engine_unit(engine: int) -> str:
    """The listing-step unit of a cuDNN engine ("eng69"): what a hang leaves out."""
    return f"eng{engine}"


def plan_unit(name: str) -> str:
    """The listing-step unit of a plan: its engine ("eng69"), or "" where the name names none
    (nothing a listing could leave out)."""
    try:
        return engine_unit(policy.parse_plan_name(name)[0])
    except ValueError:
        return ""


def unit_engine(unit: str) -> int | None:
    """The engine id of a listing-step unit ("eng69" -> 69), or None."""
    if unit.startswith("eng") and unit[3:].isdigit():
        return int(unit[3:])
    return None


@contextlib.contextmanager
def excluding(engines: dict[int, str]) -> Iterator[None]:
    """`with excluding({69: "why"}):` the listing inside leaves those engines out (on top of any
    an enclosing block leaves out)."""
    old = dict(_EXCLUDED)
    _EXCLUDED.update(engines)
    try:
        yield
    finally:
        _EXCLUDED.clear()
        _EXCLUDED.update(old)


def excluded_engine(name: str) -> str | None:
    """Why the plan `name`'s engine is left out of this listing, or None."""
    if not _EXCLUDED:
        return None
    try:
        eng = policy.parse_plan_name(name)[0]
    except ValueError:
        return None
    return _EXCLUDED.get(eng)


def import_cudnn() -> tuple[Any, Any]:
    """(torch, cudnn) with torch imported first; DependencyMissing when either is absent."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        raise DependencyMissing(f"torch is needed for the CUDA backend ({exc})",
                                hint="pip install torch (a CUDA build)") from None
    try:
        import cudnn
    except Exception as exc:  # noqa: BLE001
        raise DependencyMissing(
            f"cudnn-frontend (module `cudnn`) is needed for cuDNN engine candidates ({exc})",
            hint="pip install nvidia-cudnn-frontend (1.14-1.26)") from None
    return torch, cudnn


def cudnn_frontend_version() -> str | None:
    try:
        _, cudnn = import_cudnn()
    except DependencyMissing:
        return None
    return str(getattr(cudnn, "__version__", "unknown"))


def get_handle(device: int | None = None, stream: Any = None) -> Any:
    """One cuDNN handle per (device, stream), created once and bound to that stream."""
    torch, cudnn = import_cudnn()
    dev = _current_device(torch, device)
    if stream is None:
        stream = torch.cuda.current_stream(dev)
    ptr = int(stream.cuda_stream) if hasattr(stream, "cuda_stream") else int(stream)
    key = (dev, ptr)
    with _LOCK:
        h = _HANDLES.get(key)
        if h is None:
            with _device_ctx(torch, dev):
                h = cudnn.create_handle()
                cudnn.set_stream(handle=h, stream=ptr)
            _HANDLES[key] = h
        return h


def _device_ctx(torch: Any, dev: int) -> Any:
    """`torch.cuda.device(dev)`, or a no-op where torch has no CUDA (unit tests with fakes)."""
    import contextlib

    if not torch.cuda.is_available():
        return contextlib.nullcontext()
    return torch.cuda.device(dev)


def _current_device(torch: Any, device: int | None) -> int:
    if device is not None:
        return int(device)
    return int(torch.cuda.current_device()) if torch.cuda.is_available() else 0


def _dtype(cudnn: Any, name: str) -> Any:
    return {"float32": cudnn.data_type.FLOAT, "float16": cudnn.data_type.HALF,
            "bfloat16": cudnn.data_type.BFLOAT16}[name]


def torch_dtype(torch: Any, name: str) -> Any:
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def empty_for(problem: ConvProblem, role: str, device: Any = "cuda", dtype: Any = None) -> Any:
    """An uninitialised tensor for a role with the problem's layout (strides cuDNN expects)."""
    import torch

    shape = policy.role_shapes(problem)[role]
    strides = policy.logical_strides(problem, role)
    dt = dtype if dtype is not None else torch_dtype(torch, problem.dtype)
    return torch.empty_strided(shape, strides, dtype=dt, device=device)


@dataclass
class _Graph:
    """One cudnn-frontend graph for a problem, with its tensors and the plans it holds."""

    graph: Any
    tensors: dict[str, Any]          # role -> cudnn tensor
    handle: Any
    source: str                      # "A" | "B" | "FALLBACK" | "enum"
    names: list[str] = field(default_factory=list)


def _new_graph(problem: ConvProblem, handle: Any, source: str) -> _Graph:
    torch, cudnn = import_cudnn()
    dt = _dtype(cudnn, problem.dtype)
    f32 = cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=dt, intermediate_data_type=f32, compute_data_type=f32,
                      handle=handle)
    (a, b), out_role = policy.io_roles(problem.direction)
    tens: dict[str, Any] = {}
    for role in (a, b):
        dims, strides = policy.cudnn_dims_strides(problem, role)
        tens[role] = g.tensor(name=role, dim=dims, stride=strides, data_type=dt)
    params = policy.cudnn_conv_params(problem)
    if problem.direction == "fprop":
        out = g.conv_fprop(image=tens["x"], weight=tens["w"], compute_data_type=f32, **params)
    elif problem.direction == "dgrad":
        out = g.conv_dgrad(loss=tens["dy"], filter=tens["w"], compute_data_type=f32, **params)
    else:
        out = g.conv_wgrad(image=tens["x"], loss=tens["dy"], compute_data_type=f32, **params)
    dims, strides = policy.cudnn_dims_strides(problem, out_role)
    out.set_output(True)
    out.set_data_type(dt)
    out.set_dim(dims)
    out.set_stride(strides)
    tens[out_role] = out
    g.validate()
    g.build_operation_graph()
    return _Graph(graph=g, tensors=tens, handle=handle, source=source)


def _numeric_notes(cudnn: Any, names: tuple[str, ...]) -> list[Any]:
    out = []
    for n in names:
        note = getattr(cudnn.numerical_note, n, None)
        if note is not None:
            out.append(note)
    return out


@dataclass(frozen=True)
class PlanInfo:
    """What enumeration learned about one plan (built or not)."""

    name: str
    source: str
    built: bool
    workspace_bytes: int = 0
    reason: str = ""
    notes: tuple[str, ...] = ()


class ConvPlan:
    """An executable cuDNN plan for one problem (a built engine configuration of a graph)."""

    def __init__(self, problem: ConvProblem, graph: _Graph, index: int, name: str,
                 workspace_bytes: int, device: int) -> None:
        self.problem = problem
        self._g = graph
        self.index = index
        self.name = name
        self.workspace_bytes = int(workspace_bytes)
        self.device = device
        self.source = graph.source
        self._workspace: Any = None
        (a, b), out_role = policy.io_roles(problem.direction)
        self.input_roles = (a, b)
        self.output_role = out_role
        t = graph.tensors
        self._roles_t = (t[a], t[b], t[out_role])
        self._stream_handles: dict[int, Any] = {}
        self._pointers: bool | None = None  # does the frontend take int device pointers?

    @property
    def key(self) -> str:
        return policy.cudnn_key(self.name)

    # ------------------------------------------------------------ building
    @classmethod
    def build(cls, problem: ConvProblem, plan_name: str | None = None, handle: Any = None,
              *, device: int | None = None) -> ConvPlan:
        """The named plan (None: the best heuristic plan that passes the note filter).

        Looks in heuristic modes A, B, FALLBACK, then in the enumerated configs of the plan's
        engine. Raises LookupError when no such plan exists for this problem here, and
        RuntimeError (with cuDNN's message) when it exists but does not build.
        """
        torch, _ = import_cudnn()
        dev = _current_device(torch, device)
        hit = _PLANS.get((dev, problem.key(), plan_name or ""))
        if hit is not None:
            return hit
        h = handle if handle is not None else get_handle(dev)
        with _device_ctx(torch, dev):
            if plan_name is None:
                for mode in policy.HEUR_MODES:
                    for _info, plan in _mode_plans(problem, h, mode, dev, stop_at_first=True):
                        if plan is not None:
                            with _LOCK:
                                _PLANS[(dev, problem.key(), "")] = plan
                            return plan
                raise RuntimeError(f"no cuDNN plan builds for {problem.short()} "
                                   "(heuristic modes A, B, FALLBACK all failed)")
            policy.parse_plan_name(plan_name)  # ValueError for a malformed name
            last = ""
            for mode in policy.HEUR_MODES:
                for info, plan in _mode_plans(problem, h, mode, dev, only=plan_name):
                    if info.name == plan_name:
                        if plan is not None:
                            return plan
                        last = info.reason
            named = _named_plan(problem, h, plan_name, dev)
            if named is not None:
                info, plan = named
                if plan is not None:
                    return plan
                last = info.reason
            engine, _ = policy.parse_plan_name(plan_name)
            for info, plan in _engine_plans(problem, h, engine, dev):
                if info.name == plan_name:
                    if plan is not None:
                        return plan
                    last = info.reason
        if last:
            raise RuntimeError(f"cuDNN plan {plan_name} does not build for {problem.short()}: {last}")
        raise LookupError(f"cuDNN plan {plan_name} is not offered for {problem.short()} by this "
                          "cuDNN (heuristics and enumeration of its engine)")

    # ------------------------------------------------------------ running
    def workspace(self) -> Any:
        """The plan's own workspace buffer (allocated once)."""
        if self._workspace is None:
            import torch

            self._workspace = torch.empty(max(1, self.workspace_bytes), dtype=torch.uint8,
                                          device=f"cuda:{self.device}")
        return self._workspace

    def adopt_workspace(self, ws: Any) -> None:
        """Make `ws` (a uint8 CUDA buffer of at least `workspace_bytes`) the plan's own workspace:
        `convdoctor.optimize`'s workspace guard keeps the buffer where the plan runs at its speed,
        and a later `workspace()` (another executor of this cached plan) gets that one."""
        if ws.numel() < self.workspace_bytes:
            raise ValueError(f"workspace of {ws.numel()} B, the plan needs {self.workspace_bytes}")
        self._workspace = ws

    def release_workspace(self) -> None:
        """Drop the plan's own workspace buffer (a later `workspace()` allocates it again). The
        tuner calls this when it is done with a plan: a cached plan must not pin its workspace
        (some engines take hundreds of MiB; tuning many problems in one process ran out of
        memory on an 80 GB H100 before this)."""
        self._workspace = None

    def check_tensor(self, role: str, t: Any) -> None:
        shape = policy.role_shapes(self.problem)[role]
        strides = policy.logical_strides(self.problem, role)
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{role} has shape {tuple(t.shape)}, the plan needs {shape}")
        got = tuple(t.stride())
        for size, s_got, s_want in zip(shape, got, strides, strict=True):
            if size > 1 and s_got != s_want:
                raise ValueError(f"{role} has strides {got}, the plan ({self.problem.layout}) "
                                 f"needs {strides}")
        if not t.is_cuda:
            raise ValueError(f"{role} is on {t.device}, the plan runs on cuda:{self.device}")

    def execute(self, *args: Any, workspace: Any = None, stream: Any = None,
                check: bool = True) -> Any:
        """Run the plan. `execute(a, b, out)` in the direction's order (fprop x, w, y; dgrad
        dy, w, dx; wgrad x, dy, dw) or `execute({role: tensor, ...}, out)`. Returns `out`."""
        if len(args) == 2 and isinstance(args[0], dict):
            inputs, out = args
            a, b = inputs[self.input_roles[0]], inputs[self.input_roles[1]]
        elif len(args) == 3:
            a, b, out = args
        else:
            raise TypeError("execute(a, b, out) or execute({role: tensor}, out)")
        if check:
            self.check_tensor(self.input_roles[0], a)
            self.check_tensor(self.input_roles[1], b)
            self.check_tensor(self.output_role, out)
        ws = workspace if workspace is not None else self.workspace()
        h = self._g.handle if stream is None else get_handle(self.device, stream)
        t = self._g.tensors
        self._g.graph.execute_plan_at_index(
            {t[self.input_roles[0]]: a, t[self.input_roles[1]]: b, t[self.output_role]: out},
            ws, self.index, handle=h)
        return out

    def launch(self, a: Any, b: Any, out: Any, workspace: Any, stream_ptr: int) -> None:
        """Run the plan on the raw CUDA stream `stream_ptr` with no checks: the per-call path of
        `convdoctor.optimize` (tensors already in the plan's layout, workspace prebuilt).

        Hands cuDNN device pointers rather than tensors where the frontend takes them (1.16
        does: measured on an H100, 12.3 us per call with pointers vs 15.6 us with tensors, whose
        `__dlpack__` costs ~2.8 us each); the first call finds out and older frontends get tensors.
        The switch to tensors is kept only when the tensor call then succeeds: when both fail the
        failure is real (a cuDNN error for the fallback chain to handle), it is raised, and the
        next call tries pointers again instead of staying on the slower path for good.
        """
        h = self._stream_handles.get(stream_ptr)
        if h is None:
            h = self._stream_handles[stream_ptr] = get_handle(self.device, stream_ptr)
        ta, tb, to = self._roles_t
        tensors = {ta: a, tb: b, to: out}
        if self._pointers is False:
            self._g.graph.execute_plan_at_index(tensors, workspace, self.index, handle=h)
            return
        pack = {ta: a.data_ptr(), tb: b.data_ptr(), to: out.data_ptr()}
        try:
            self._g.graph.execute_plan_at_index(pack, workspace.data_ptr(), self.index, handle=h)
            self._pointers = True
            return
        except (TypeError, RuntimeError) as exc:
            if self._pointers:  # pointers worked before: this is a real failure
                raise
            first = exc
        # pointers never worked yet: maybe this frontend wants objects with __dlpack__ (which
        # exception an older frontend raises for ints is not known, hence RuntimeError too)
        try:
            self._g.graph.execute_plan_at_index(tensors, workspace, self.index, handle=h)
        except Exception as exc:
            raise exc from first  # both failed: keep the pointer call's error in the chain
        self._pointers = False

    def __repr__(self) -> str:
        return (f"ConvPlan({self.name!r}, source={self.source}, workspace={self.workspace_bytes}, "
                f"problem={self.problem.short()!r})")


# ---------------------------------------------------------------- enumeration
def _apply_filter(problem: ConvProblem, g: _Graph) -> None:
    _, cudnn = import_cudnn()
    notes = _numeric_notes(cudnn, policy.note_filter(problem).numeric)
    if notes:
        g.graph.deselect_numeric_notes(notes)


def _build_index(problem: ConvProblem, g: _Graph, i: int, dev: int,
                 source: str) -> tuple[PlanInfo, ConvPlan | None]:
    name = str(g.graph.get_plan_name_at_index(i))
    why = excluded_engine(name)
    if why is not None:
        return PlanInfo(name, source, False, 0, f"left out: {why}"), None
    listing_step("build", plan_unit(name), name)
    try:
        g.graph.build_plan_at_index(i)
    except Exception as exc:  # noqa: BLE001 - cuDNN says why (deselected by notes, unsupported...)
        msg = " ".join(str(exc).split())[:300]
        if "Deselecting" in msg:
            msg = "dropped by the numerical-note filter (" + ", ".join(
                policy.note_filter(problem).numeric) + ")"
        return PlanInfo(name, source, False, 0, msg), None
    ws = int(g.graph.get_workspace_size_plan_at_index(i))
    plan = ConvPlan(problem, g, i, name, ws, dev)
    with _LOCK:
        _PLANS.setdefault((dev, problem.key(), name), plan)
        plan = _PLANS[(dev, problem.key(), name)]
    return PlanInfo(name, source, True, ws), plan


def _mode_plans(problem: ConvProblem, h: Any, mode: str, dev: int, *, stop_at_first: bool = False,
                only: str | None = None, skip: set[str] | None = None,
                deadline: float | None = None):  # type: ignore[no-untyped-def]
    """Yield (PlanInfo, ConvPlan|None) for a heuristic mode's list, in heuristic rank order."""
    _, cudnn = import_cudnn()
    try:
        g = _new_graph(problem, h, mode)
        g.graph.create_execution_plans([getattr(cudnn.heur_mode, mode)])
    except Exception as exc:  # noqa: BLE001
        yield PlanInfo(f"<heur {mode}>", mode, False, 0,
                       f"heuristic query failed: {' '.join(str(exc).split())[:300]}"), None
        return
    _apply_filter(problem, g)
    n = int(g.graph.get_execution_plan_count())
    for i in range(n):
        name = str(g.graph.get_plan_name_at_index(i))
        if (only is not None and name != only) or (skip is not None and name in skip):
            continue  # not wanted, or already built from an earlier mode's graph
        if deadline is not None and time.perf_counter() > deadline:
            yield PlanInfo(name, mode, False, 0, "not built: enumeration time budget spent"), None
            continue
        info, plan = _build_index(problem, g, i, dev, mode)
        yield info, plan
        if stop_at_first and plan is not None:
            return


def _engine_plans(problem: ConvProblem, h: Any, engine: int, dev: int, *, per_knob: int = 3,
                  limit: int = 6, skip: set[str] | None = None,
                  first_combo: list[dict[Any, int]] | None = None):  # type: ignore[no-untyped-def]
    """Yield (PlanInfo, ConvPlan|None) for bounded knob settings of one engine (its own graph)."""
    if engine in _EXCLUDED:
        return
    listing_step("engine", engine_unit(engine))
    try:
        g = _new_graph(problem, h, "enum")
        knobs = g.graph.get_knobs_for_engine(engine)
    except Exception as exc:  # noqa: BLE001
        yield PlanInfo(f"eng{engine}", "enum", False, 0,
                       f"engine does not take this graph: {' '.join(str(exc).split())[:200]}"), None
        return
    # knob types the frontend cannot name come back as NOT_SET: leave those at cuDNN's default
    spec = [(k.type, int(k.min_value), int(k.max_value), int(k.stride)) for k in knobs
            if not str(k.type).endswith("NOT_SET")]
    added = 0
    for combo in policy.knob_combinations(spec, per_knob=per_knob, limit=limit):
        try:
            g.graph.create_execution_plan(engine, combo)
            added += 1
            if first_combo is not None and not first_combo:
                first_combo.append(combo)
        except Exception:  # noqa: BLE001 - this knob setting is not valid for the engine
            continue
    if not added:
        return
    _apply_filter(problem, g)
    for i in range(int(g.graph.get_execution_plan_count())):
        if skip is not None and str(g.graph.get_plan_name_at_index(i)) in skip:
            continue
        yield _build_index(problem, g, i, dev, "enum")


# (problem key, engine id) -> (frontend knob specs, frontend knob type -> cuDNN knob number)
_KNOB_MAPS: dict[tuple[str, int], tuple[list[tuple[Any, int, int, int]], dict[Any, int]]] = {}


def engine_knobs(problem: ConvProblem, h: Any, engine: int
                 ) -> tuple[list[tuple[Any, int, int, int]], dict[Any, int]]:
    """An engine's knobs as (frontend type, min, max, stride), and which plan-name knob number
    (`k<n>`) each type is. The Python API numbers knob types differently from the backend
    numbers in plan names: a type's number comes from its name (`policy.knob_number_by_name`),
    and for names the table lacks it is learned from plan names (`policy.knob_number_map`): one
    plan with every knob at its minimum, then one per knob with only that knob moved.
    Raises RuntimeError when the engine does not take the problem's graph."""
    hit = _KNOB_MAPS.get((problem.key(), engine))
    if hit is not None:
        return hit
    try:
        g = _new_graph(problem, h, "enum")
        knobs = g.graph.get_knobs_for_engine(engine)
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError(f"engine {engine} does not take this graph: "
                           f"{' '.join(str(exc).split())[:200]}") from None
    spec = [(k.type, int(k.min_value), int(k.max_value), int(k.stride)) for k in knobs
            if not str(k.type).endswith("NOT_SET")]
    mapping: dict[Any, int] = {}
    for t, *_r in spec:
        n = policy.knob_number_by_name(t)
        if n is not None:
            mapping[t] = n
    if len(mapping) == len(spec):
        out = (spec, mapping)
        with _LOCK:
            _KNOB_MAPS[(problem.key(), engine)] = out
        return out
    base = {t: lo for t, lo, _hi, _st in spec}

    def name_for(combo: dict[Any, int]) -> dict[int, int] | None:
        try:
            g.graph.create_execution_plan(engine, combo)
        except Exception:  # noqa: BLE001 - this setting is not valid for the engine
            return None
        name = str(g.graph.get_plan_name_at_index(int(g.graph.get_execution_plan_count()) - 1))
        try:
            return policy.parse_plan_name(name)[1]
        except ValueError:
            return None

    base_knobs = name_for(base)
    if base_knobs is not None:
        changed: dict[Any, dict[int, int]] = {}
        for t, lo, hi, st in spec:
            if hi <= lo or st <= 0:
                if len(spec) == len(base_knobs) == 1:  # the only knob: nothing else it can be
                    changed[t] = {}
                continue
            for v in (lo + st, hi):
                got = name_for({**base, t: v})
                if got is not None:
                    changed[t] = got
                    break
        mapping = {**policy.knob_number_map(base_knobs, changed), **mapping}
        # a knob that cannot move (min == max) still shows in names: give it the number left over
        left = [n for n in base_knobs if n not in mapping.values()]
        fixed = [t for t, lo, hi, _st in spec if t not in mapping and hi <= lo]
        if len(left) == 1 and len(fixed) == 1:
            mapping[fixed[0]] = left[0]
    out = (spec, mapping)
    with _LOCK:
        _KNOB_MAPS[(problem.key(), engine)] = out
    return out


def _named_plan(problem: ConvProblem, h: Any, name: str, dev: int, source: str = "enum"
                ) -> tuple[PlanInfo, ConvPlan | None] | None:
    """Build exactly the engine configuration `name` (its own graph), or None when the engine's
    knobs cannot be read or the plan cuDNN builds is named differently (a knob of the name that
    the frontend cannot set, left at cuDNN's choice, came out another value)."""
    engine, knobs = policy.parse_plan_name(name)
    try:
        spec, mapping = engine_knobs(problem, h, engine)
    except RuntimeError:
        return None
    by_number = {n: t for t, n in mapping.items()}
    # knobs the frontend cannot set (NOT_SET types) are left at cuDNN's choice: the name check
    # below accepts the plan only when that choice is the one the name asks for
    combo = {by_number[n]: v for n, v in knobs.items() if n in by_number}
    try:
        g = _new_graph(problem, h, source)
        g.graph.create_execution_plan(engine, combo)
    except Exception as exc:  # noqa: BLE001 - cuDNN refuses this knob setting here
        return PlanInfo(name, source, False, 0,
                        f"engine config not accepted: {' '.join(str(exc).split())[:200]}"), None
    if policy.parse_plan_name(str(g.graph.get_plan_name_at_index(0))) != (engine, knobs):
        return None  # (the same configuration may list its knobs in another order)
    _apply_filter(problem, g)
    return _build_index(problem, g, 0, dev, source)


def probe_engine_notes(problem: ConvProblem, h: Any, engine: int, combo: dict[Any, int],
                       notes: tuple[str, ...] = ("NONDETERMINISTIC", "TENSOR_CORE")
                       ) -> set[str] | None:
    """Which of `notes` an engine carries (same no-build trick as `probe_notes`); None if unknown."""
    _, cudnn = import_cudnn()
    found: set[str] = set()
    for note in notes:
        enum = getattr(cudnn.numerical_note, note, None)
        if enum is None:
            return None
        try:
            g = _new_graph(problem, h, "enum")
            g.graph.create_execution_plan(engine, combo)
            g.graph.deselect_numeric_notes([enum])
            g.graph.deselect_workspace_greater_than(-1)
        except Exception:  # noqa: BLE001
            return None
        try:
            g.graph.build_plan_at_index(0)
            return None  # built despite a -1 workspace limit: the trick does not apply here
        except Exception as exc:  # noqa: BLE001
            msg = str(exc)
            if "Deselecting" in msg:
                found.add(note)
            elif "workspace" not in msg.lower():
                return None
    return found


PROBED_NOTES = ("NONDETERMINISTIC", "TENSOR_CORE")


def probe_notes(problem: ConvProblem, h: Any, mode: str,
                notes: tuple[str, ...] = PROBED_NOTES) -> dict[str, set[str]]:
    """Plan name -> which of `notes` its engine carries, for one heuristic mode's list.

    The Python API has no per-plan numerical-note getter, so for each note we query the heuristics
    on a fresh graph, deselect that note and set a workspace limit of -1: every plan then fails its
    support check without being built, with "Deselecting" when it carries the note and a workspace
    message when it does not (cudnn-frontend plans.h, check_support_at_index, cuDNN >= 9.2).
    """
    _, cudnn = import_cudnn()
    out: dict[str, set[str]] = {}
    for note in notes:
        enum = getattr(cudnn.numerical_note, note, None)
        if enum is None:
            continue
        try:
            g = _new_graph(problem, h, mode)
            g.graph.create_execution_plans([getattr(cudnn.heur_mode, mode)])
            g.graph.deselect_numeric_notes([enum])
            g.graph.deselect_workspace_greater_than(-1)
        except Exception:  # noqa: BLE001
            continue
        for i in range(int(g.graph.get_execution_plan_count())):
            name = str(g.graph.get_plan_name_at_index(i))
            out.setdefault(name, set())
            try:
                g.graph.build_plan_at_index(i)
            except Exception as exc:  # noqa: BLE001
                if "Deselecting" in str(exc):
                    out[name].add(note)
    return out


@dataclass
class Enumeration:
    """Every plan enumeration saw for a problem: built ones first in rank order, then the rest."""

    problem_key: str
    plans: list[PlanInfo]
    seconds: float
    engine_count: int = 0
    enum_added: int = 0

    def built(self) -> list[PlanInfo]:
        return [p for p in self.plans if p.built]

    def summary(self) -> dict[str, Any]:
        """A JSON-safe record for the tuning result (`TuneResult.listing`)."""
        return {"plans": len(self.plans), "built": len(self.built()),
                "engines": self.engine_count, "enum_added": self.enum_added,
                "seconds": round(self.seconds, 3)}


def enumerate_plans(problem: ConvProblem, *, device: int | None = None, handle: Any = None,
                    enumerate_engines: bool = True, max_extra: int = 24,
                    time_budget_s: float = 8.0, probe: bool = True,
                    build_budget_s: float = 45.0) -> Enumeration:
    """Plans for the problem: heuristic modes A, B, FALLBACK (deduplicated by name), then up to
    `max_extra` more from engine/knob enumeration within `time_budget_s` more seconds. Building stops
    after `build_budget_s` in all (runtime-compiled engines can take long to build); plans not
    built for that reason are listed with that reason."""
    torch, _ = import_cudnn()
    dev = _current_device(torch, device)
    h = handle if handle is not None else get_handle(dev)
    t0 = time.perf_counter()
    seen: dict[str, PlanInfo] = {}
    order: list[str] = []
    engine_count = 0
    extra = 0

    def note(info: PlanInfo) -> bool:
        old = seen.get(info.name)
        if old is None:
            seen[info.name] = info
            order.append(info.name)
            return True
        if info.built and not old.built:
            seen[info.name] = info
        return False

    engine_notes: dict[int, set[str]] = {}
    with _device_ctx(torch, dev):
        for mode in policy.HEUR_MODES:
            listing_step("setup", "", f"heuristic mode {mode}")  # the query blames no engine
            done = {n for n, i in seen.items() if i.built}
            for info, _plan in _mode_plans(problem, h, mode, dev, skip=done,
                                           deadline=t0 + build_budget_s):
                note(info)
            if probe:
                listing_step("setup", "", f"behaviour notes of mode {mode}")
                for name, mode_notes in probe_notes(problem, h, mode).items():
                    try:
                        eng, _ = policy.parse_plan_name(name)
                    except ValueError:
                        continue
                    engine_notes.setdefault(eng, set()).update(mode_notes)
        t_enum = time.perf_counter()
        if enumerate_engines and max_extra > 0:
            listing_step("setup", "", "engine count")
            try:
                g = _new_graph(problem, h, "enum")
                engine_count = int(g.graph.get_engine_count())
            except Exception:  # noqa: BLE001
                engine_count = 0
            for engine in range(engine_count):
                now = time.perf_counter()
                if extra >= max_extra or now - t_enum > time_budget_s or now - t0 > build_budget_s:
                    break
                done = {n for n, i in seen.items() if i.built}
                combos: list[dict[Any, int]] = []
                for info, _plan in _engine_plans(problem, h, engine, dev, skip=done,
                                                 first_combo=combos):
                    if info.name.startswith("eng") and note(info) and info.built:
                        extra += 1
                        if probe and engine not in engine_notes and combos:
                            found = probe_engine_notes(problem, h, engine, combos[0])
                            if found is not None:
                                engine_notes[engine] = found
                    if extra >= max_extra:
                        break
    plans = []
    for n in order:
        info = seen[n]
        try:
            eng, _ = policy.parse_plan_name(n)
        except ValueError:
            plans.append(info)
            continue
        found = engine_notes.get(eng)
        tags = tuple(sorted(found)) if found is not None else ("notes-unknown",)
        plans.append(PlanInfo(info.name, info.source, info.built, info.workspace_bytes,
                              info.reason, tags))
    plans.sort(key=lambda p: (not p.built,))  # stable: rank order kept within built / not built
    return Enumeration(problem.key(), plans, time.perf_counter() - t0, engine_count, extra)


def cached_plan(problem: ConvProblem, name: str, device: int) -> ConvPlan | None:
    return _PLANS.get((device, problem.key(), name))


def clear_cache() -> None:
    with _LOCK:
        _PLANS.clear()
        _KNOB_MAPS.clear()


def forget_plans(problem: ConvProblem, names: list[str], device: int) -> None:
    """Drop these plans of the problem from the cache (a holder elsewhere keeps its own)."""
    with _LOCK:
        for n in names:
            _PLANS.pop((device, problem.key(), n), None)


def drop_plans(keep_problem_key: str | None = None) -> int:
    """Forget every cached plan except those of `keep_problem_key` (None: all); returns how many
    were dropped. Plans still referenced elsewhere (a runtime route) stay valid: only the cache's
    reference goes."""
    with _LOCK:
        gone = [k for k in _PLANS if k[1] != keep_problem_key]
        for k in gone:
            del _PLANS[k]
        for mk in [mk for mk in _KNOB_MAPS if mk[0] != keep_problem_key]:
            del _KNOB_MAPS[mk]
    return len(gone)
