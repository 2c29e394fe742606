"""Executable cuDNN plans for one convolution problem, through cudnn-frontend's Python graph API.

    plan = build_plan(problem)                    # `cudnn_enum`: best heuristic plan past the filters
    plan = build_plan(problem, "eng0_k2=1_k3=0")  # a named plan (e.g. from the tuning database)
    plan.execute(x, w, y)                         # fprop; dgrad: (dy, w, dx); wgrad: (x, dy, dw)
    plan.execute({"x": x, "w": w}, y)             # the same, tensors passed by role

Implementation notes (cudnn-frontend 1.16, read from its source):
- A plan name (`eng<id>_k<knob>=<v>...`) identifies an engine configuration; a plan *index* is only a
  position in one graph's list. Plans are found again by name, never by index.
- The frontend keeps numerical notes in a list that is re-appended on every
  `create_execution_plan` call, so after the first manual plan the notes of index i belong to some
  other config of the graph. The manual plans of ONE engine therefore share one graph (notes are
  engine properties, so every entry is right) and each engine gets its own graph.
- Import torch before cudnn so both use the same libcudnn.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import DependencyMissing
from ..measure.buffers import io_roles
from . import cudnn_policy as policy

if TYPE_CHECKING:
    from ..problem import ConvProblem

_LOCK = threading.RLock()
_HANDLES: dict[tuple[int, int], Any] = {}
# (device, problem key, plan name) -> ConvPlan, filled by enumerate_plans and ConvPlan.build.
_PLANS: dict[tuple[int, str, str], ConvPlan] = {}
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
    (a, b), out_role = io_roles(problem.direction)
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
        (a, b), out_role = io_roles(problem.direction)
        self.input_roles = (a, b)
        self.output_role = out_role
        t = graph.tensors
        self._roles_t = (t[a], t[b], t[out_role])
        self._stream_handles: dict[int, Any] = {}
        self._pointers: bool | None = None  # does the frontend take int device pointers?

    @property
    def key(self) -> str:
        return policy.cudnn_key(self.name)

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


def cached_plan(problem: ConvProblem, name: str, device: int) -> ConvPlan | None:
    return _PLANS.get((device, problem.key(), name))


def forget_plans(problem: ConvProblem, names: list[str], device: int) -> None:
    """Drop these plans of the problem from the cache (a holder elsewhere keeps its own)."""
    with _LOCK:
        for n in names:
            _PLANS.pop((device, problem.key(), n), None)
