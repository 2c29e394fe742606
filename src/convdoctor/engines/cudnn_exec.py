"""cuDNN plans (cudnn-frontend) as runtime executors of one direction, prebuilt at optimize time.

A `PlanExec` wraps one `cudnn_graph.ConvPlan` for one problem and direction:
the plan, its workspace and the expected output shape/strides are made once; per call we only check
strides (a copy when the caller's layout differs from the plan's), allocate the output and run the
plan on the current stream (so it works under CUDA graph capture). Bias add (fprop) and bias grad
(wgrad) are done with PyTorch ops. Plans are only used for ordinary (not transposed) convolutions.
"""

from __future__ import annotations

from typing import Any

import torch

from ..measure import wsguard
from ..measure.buffers import empty_for, io_roles, logical_strides, role_shapes
from . import cudnn_policy as policy
from . import xform
from .base import ConvArgs
from .cudnn_enum import build_plan


class PlanExec:
    kind = "cudnn"

    def __init__(self, key: str, problem: Any, plan: Any, reference_s: float | None = None
                 ) -> None:
        self.key = key
        self.problem = problem
        self.direction = problem.direction
        self.plan = plan
        self.workspace = plan.workspace()
        # what the workspace guard did (None: not guarded; see `guard_workspace`), and why it
        # could not run when it failed
        self.guard: Any = None
        self.guard_error = ""
        shapes = role_shapes(problem)
        self._shape = {r: tuple(s) for r, s in shapes.items()}
        self._strides = {r: tuple(logical_strides(problem, r)) for r in shapes}
        self._bias_dims = [0, *range(2, 2 + problem.ndim)]
        if reference_s is not None:
            self.guard_workspace(reference_s)

    @classmethod
    def build(cls, key: str, problem: Any, reference_s: float | None = None) -> PlanExec:
        name = policy.plan_name_of(key)
        if name is None:
            raise ValueError(f"{key} is not a cudnn plan key")
        return cls(key, problem, build_plan(problem, name), reference_s)

    def guard_workspace(self, reference_s: float) -> Any:
        """`measure.wsguard`: time what a call of this executor runs (`_guard_call`,
        on the current stream, as a route runs it) with the workspace on scratch tensors of the
        problem; more than the tolerance slower than `reference_s` (the tuned time), try fresh
        workspaces and keep the fastest (the plan adopts it). Plans whose workspace is under
        `wsguard.GUARD_MIN_BYTES` are left alone, and so is everything inside a CUDA graph
        capture. The guard is optional: a failure (out of memory, ...) keeps the workspace, sets
        `guard_error` and returns None. Returns the `GuardResult` (None: not guarded)."""
        plan = self.plan
        if not wsguard.wanted(plan.workspace_bytes) or (
                torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            return None
        dev = self.workspace.device
        nbytes = max(1, plan.workspace_bytes)
        try:
            (ra, rb), ro = io_roles(self.problem.direction)
            a, b = (empty_for(self.problem, r, dev).uniform_(-1, 1) for r in (ra, rb))
            out = empty_for(self.problem, ro, dev)

            def time_of(ws: torch.Tensor) -> float:
                return wsguard.time_with(lambda: self._guard_call(a, b, out, ws),
                                         device=plan.device)

            def fresh() -> torch.Tensor:
                return torch.empty(nbytes, dtype=torch.uint8, device=dev)

            ws, res = wsguard.choose(self.workspace, fresh, time_of, reference_s=reference_s)
        except Exception as exc:  # noqa: BLE001 - an optional check; the plan runs unguarded
            self.guard_error = f"{type(exc).__name__}: {exc}"[:300]
            return None
        if res.replaced:
            plan.adopt_workspace(ws)
        self.workspace = ws
        self.guard = res
        return res

    def _guard_call(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                    ws: torch.Tensor) -> None:
        """One call as `_run` makes it, with workspace `ws` (the guard's timed call)."""
        self.plan.launch(a, b, out, ws, _raw_stream(out.device.index))

    def _fit(self, role: str, t: torch.Tensor) -> torch.Tensor:
        want = self._strides[role]
        if tuple(t.stride()) == want or _same_where_it_matters(t, self._shape[role], want):
            return t
        out = torch.empty_strided(self._shape[role], want, dtype=t.dtype, device=t.device)
        out.copy_(t)
        return out

    def _weight(self, w: torch.Tensor) -> torch.Tensor:
        """The weight as the plan takes it (`DualPlanExec`: transformed)."""
        return self._fit("w", w)

    def _out(self, role: str, like: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(self._shape[role], self._strides[role], dtype=like.dtype,
                                   device=like.device)

    def _run(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        self.plan.launch(a, b, out, self.workspace, _raw_stream(out.device.index))

    def fprop(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              a: ConvArgs) -> torch.Tensor:
        if self.direction != "fprop":
            raise RuntimeError(f"cudnn plan {self.key} is a {self.direction} plan, not fprop")
        x, w = self._fit("x", x), self._weight(w)
        y = self._out("y", x)
        self._run(x, w, y)
        if b is not None:
            y.add_(b.view(1, -1, *([1] * self.problem.ndim)))
        return y

    def backward(self, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                 bias_sizes: list[int] | None, a: ConvArgs, mask: tuple[bool, bool, bool]
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        gx = gw = gb = None
        if mask[0]:
            if self.direction != "dgrad":
                raise RuntimeError(f"cudnn plan {self.key} is a {self.direction} plan, not dgrad")
            dy, ww = self._fit("dy", gy), self._weight(w)
            gx = self._out("dx", dy)
            self._run(dy, ww, gx)
        if mask[1] or mask[2]:
            if mask[1]:
                if self.direction != "wgrad":
                    raise RuntimeError(
                        f"cudnn plan {self.key} is a {self.direction} plan, not wgrad")
                xx, dy = self._fit("x", x), self._fit("dy", gy)
                gw = self._out("dw", dy)
                self._run(xx, dy, gw)
            if mask[2]:
                gb = gy.sum(dim=self._bias_dims)
        return gx, gw, gb

    def describe(self) -> str:
        return f"{self.key} (cuDNN plan, workspace {self.plan.workspace_bytes} B)"

    def __repr__(self) -> str:
        return f"PlanExec({self.key!r}, {self.direction})"


class DualPlanExec(PlanExec):
    """`cudnn-dual:<plan>`: a stride-1 fprop or dgrad run by a plan of its dual problem (the other
    direction, `cudnn_policy.dual_problem`) on the caller's own input and output,
    with the weight flipped and channel-swapped first by one gather (`xform`), as
    the tuner timed it."""

    def __init__(self, key: str, problem: Any, plan: Any, reference_s: float | None = None
                 ) -> None:
        super().__init__(key, problem, plan)  # guarded below, once the transform is ready
        dual = plan.problem
        self._wt_shape = tuple(dual.w_shape())
        self._wt_strides = tuple(logical_strides(dual, "w"))
        self._index = xform.index_for(problem, dual, device=f"cuda:{plan.device}")
        if reference_s is not None:
            self.guard_workspace(reference_s)

    @classmethod
    def build(cls, key: str, problem: Any, reference_s: float | None = None) -> DualPlanExec:
        name = policy.dual_plan_name_of(key)
        dual = policy.dual_problem(problem)
        if name is None or dual is None:
            raise ValueError(f"{key} does not apply to {problem.short()} (a cudnn-dual plan runs "
                             "stride-1 fprop and dgrad only)")
        return cls(key, problem, build_plan(dual, name), reference_s)

    def _guard_call(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                    ws: torch.Tensor) -> None:
        # the tuned time of a dual route includes the weight's transform: so does the guard's
        self.plan.launch(a, self._weight(b), out, ws, _raw_stream(out.device.index))

    def _weight(self, w: torch.Tensor) -> torch.Tensor:
        # detached: `index_select(out=)` refuses inputs that need grad (double backward, where
        # the backward runs with grad on and the weight requires it)
        w = self._fit("w", w.detach())
        wt = torch.empty_strided(self._wt_shape, self._wt_strides, dtype=w.dtype, device=w.device)
        return xform.transform(w, self._index, wt)

    def describe(self) -> str:
        return (f"{self.key} (cuDNN {self.plan.problem.direction} plan of the dual problem, "
                f"workspace {self.plan.workspace_bytes} B)")

    def __repr__(self) -> str:
        return f"DualPlanExec({self.key!r}, {self.direction})"


def _raw_stream(device: int | None) -> int:
    """The current CUDA stream of `device` as a raw pointer. `torch.cuda.current_stream()` builds
    a Stream object (6.4 us per call on the H100 host, a third of a small layer's plan call);
    PyTorch's own raw getter (what torch.compile's generated code calls) takes well under 1 us."""
    return _RAW(torch.cuda.current_device() if device is None else device)


def _raw_fallback(device: int) -> int:
    return int(torch.cuda.current_stream(device).cuda_stream)


_RAW = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _raw_fallback


def _same_where_it_matters(t: torch.Tensor, shape: tuple[int, ...], want: tuple[int, ...]) -> bool:
    """Strides of size-1 dims do not matter (the plan never steps along them)."""
    if tuple(t.shape) != shape:
        return False
    return all(sz <= 1 or s == w for sz, s, w in zip(shape, t.stride(), want, strict=True))
