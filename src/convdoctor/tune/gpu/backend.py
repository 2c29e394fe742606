"""`CudaBackend`: the tuner's GPU backend (the Backend protocol of `convdoctor.tune.backend`).

Candidates for a problem:
- `cudnn:<plan name>`: every cuDNN engine configuration cudnn-frontend reaches (heuristic modes A, B,
  FALLBACK, plus bounded engine/knob enumeration), filtered by the numerical notes the math mode
  and determinism forbid (`policy.note_filter`);
- `cudnn-dual:<plan name>`: a stride-1 fprop or dgrad run as a plan of the other direction of its
  dual problem (`policy.dual_problem`) with the weight flipped and channel-swapped per call
  (`convdoctor.tune.xform`, timed with the plan), offered when quick times put it near the best;
- `torch:benchmark`: what PyTorch's `cudnn.benchmark=True` picks in this process, then timed;
- `torch:heuristic`: PyTorch with benchmark off (cuDNN heuristics);
- `torch:cudnn-off`: PyTorch with cuDNN disabled (its native CUDA kernels);
- `torch:heuristic+nhwc`: PyTorch's heuristic path in channels_last (2D/3D NCHW problems);
- `torch:gemm`: a 1x1 convolution (no padding, one group) as cuBLAS matrix products
  (`convdoctor.tune.gemm`), TF32 as the math mode allows, fp16/bf16 reductions in fp32;
- `torch:im2col`: a grouped (not depthwise) 1D/2D convolution as one patch copy and one batched
  cuBLAS product over the groups (`convdoctor.tune.im2col`; dgrad folds the patches back), TF32 as
  the math mode allows, fp16/bf16 reductions in fp32;
- `triton:dw_<config>`: a depthwise fprop or dgrad (1D/2D) by convdoctor's own Triton kernel
  (`convdoctor.kernels.depthwise`), one key per tile configuration, fp32 accumulation, no TF32;
- `triton:wg_<config>`: an ungrouped wgrad (1D/2D/3D, weight of at most 2^18 elements) by
  convdoctor's split-reduction implicit-GEMM Triton kernel (`convdoctor.kernels.wgrad`), one key per
  configuration, fp32 accumulation, TF32 products only where the math mode allows them;
- `triton:sc_<config>`: an ungrouped dgrad of a layer with at most 4 input channels (1D/2D/3D) by
  convdoctor's direct Triton kernel (`convdoctor.kernels.smallc`), fp32 accumulation, no TF32;
- `triton:fp_<config>`: an ungrouped fp32 fprop (1D/2D) by convdoctor's implicit-GEMM Triton
  kernel reading NCHW in place (`convdoctor.kernels.fprop`), fp32 accumulation, TF32 products only
  where the math mode allows them;
  all offered where Triton imports (`CONVDOCTOR_TRITON=0` turns them off).

Runners: fprop via torch.nn.functional.conv{1,2,3}d, dgrad via aten.convolution_backward with
output_mask (True, False, False), wgrad with (False, True, False); cuDNN plans via `ConvPlan`.
Correctness: fresh random inputs, output poisoned with NaN, compared norm-wise with a float64
reference computed by PyTorch's native CUDA kernels (cuDNN off) on the upcast inputs.

PyTorch caches its cuDNN choice per process under a key WITHOUT the benchmark flag: once a shape ran
with benchmark off, benchmark=True never searches it, and vice versa. So torch:benchmark runs in this
process (its choice is "what benchmark=True picks in this process"), and torch:heuristic runs in a
private child worker process (`convdoctor.tune.worker` with `in_process_backend`) that never runs
benchmark mode; the heuristic choice does not depend on the process. As a last guard, a runner that
would reuse the other mode's cached choice raises CandidateUnsupported.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...problem import DTYPE_BYTES
from ..backend import Candidate, CandidateUnsupported, ClockReading, Correctness
from . import policy

if TYPE_CHECKING:
    from ...problem import ConvProblem

# (problem key, device) -> which torch cuDNN mode ran first in this process
_TORCH_CUDNN_FIRST: dict[tuple[str, int], str] = {}
# The last float64 reference: every runner of a problem checks on the same fresh seed, so
# candidates of one problem share one reference computation. Key: (problem key, device, seed).
_REF_CACHE: dict[tuple[str, int, int], Any] = {}


@contextlib.contextmanager
def torch_flags(mode: str, problem: ConvProblem) -> Iterator[None]:
    """PyTorch's backend flags for a torch:* candidate, restored on exit."""
    import torch

    tf32 = problem.math == "tf32"
    old_mm = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        with torch.backends.cudnn.flags(enabled=(mode != "cudnn-off"),
                                        benchmark=(mode == "benchmark"),
                                        deterministic=problem.deterministic, allow_tf32=tf32):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_mm


def _pad_arg(problem: ConvProblem) -> list[int]:
    """F.pad argument (last dim first) for asymmetric padding."""
    out: list[int] = []
    for pre, post in zip(reversed(problem.pad_pre), reversed(problem.pad_post), strict=True):
        out += [pre, post]
    return out


def torch_conv(problem: ConvProblem, a: Any, b: Any, x_like: Any = None) -> Any:
    """Run the problem's direction with PyTorch ops under the current flags; returns the output.

    fprop(a=x, b=w) -> y; dgrad(a=dy, b=w) -> dx (x_like gives dx's shape/format);
    wgrad(a=x, b=dy) -> dw. Asymmetric padding: the input is padded explicitly (PyTorch has no
    asymmetric conv padding), dgrad's result is sliced back.
    """
    import torch
    import torch.nn.functional as F

    nd = problem.ndim
    sym = problem.symmetric_padding
    pad = list(problem.pad_pre) if sym else [0] * nd
    stride, dil, groups = list(problem.stride), list(problem.dilation), problem.groups
    aten = torch.ops.aten
    if problem.direction == "fprop":
        x = a if sym else F.pad(a, _pad_arg(problem))
        conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
        return conv(x, b, None, stride, pad, dil, groups)
    if problem.direction == "dgrad":
        w = b
        if sym:
            xl = x_like
        else:
            shape = [s + p + q for s, p, q in zip(problem.spatial, problem.pad_pre,
                                                  problem.pad_post, strict=True)]
            xl = torch.empty((problem.n, problem.c, *shape), device=a.device, dtype=a.dtype)
            if problem.layout == "nhwc" and nd in (2, 3):
                xl = xl.contiguous(memory_format=torch.channels_last if nd == 2
                                   else torch.channels_last_3d)
        dx = aten.convolution_backward(a, xl, w, None, stride, pad, dil, False, [0] * nd, groups,
                                       [True, False, False])[0]
        if not sym:
            idx = [slice(None), slice(None)] + [slice(p, p + s) for p, s in
                                                zip(problem.pad_pre, problem.spatial, strict=True)]
            dx = dx[tuple(idx)]
        return dx
    x = a if sym else F.pad(a, _pad_arg(problem))
    return aten.convolution_backward(b, x, x_like, None, stride, pad, dil, False, [0] * nd,
                                     groups, [False, True, False])[1]


def reference(problem: ConvProblem, a: Any, b: Any, x_like: Any, w_like: Any) -> Any:
    """float64 result of the problem on the upcast inputs, by PyTorch's native CUDA kernels."""
    import torch

    a64, b64 = a.double(), b.double()
    with torch.backends.cudnn.flags(enabled=False):
        if problem.direction == "wgrad":
            return torch_conv(problem, a64, b64, w_like.double())
        if problem.direction == "dgrad":
            return torch_conv(problem, a64, b64, x_like.double())
        return torch_conv(problem, a64, b64)


def compare(problem: ConvProblem, out: Any, ref: Any) -> Correctness:
    """Norm-wise relative error of `out` against the float64 `ref`; non-finite values fail."""
    import torch

    tol = policy.tolerance(problem)
    o = out.double()
    finite = bool(torch.isfinite(o).all().item())
    if not finite:
        bad = int((~torch.isfinite(o)).sum().item())
        return Correctness(False, math.inf, tol, f"{bad} of {o.numel()} outputs are NaN/Inf "
                           "(poisoned output not fully written, or overflow)")
    num = float(torch.linalg.vector_norm(o - ref).item())
    den = float(torch.linalg.vector_norm(ref).item())
    err = policy.rel_error(num, den)
    ok = err <= tol
    detail = "" if ok else f"norm-wise relative error {err:.3g} > tolerance {tol:.3g}"
    return Correctness(ok, err, tol, detail)


def _fill_random(t: Any, gen: Any) -> None:
    import torch

    tmp = torch.empty(t.shape, dtype=torch.float32, device=t.device)
    tmp.uniform_(-1.0, 1.0, generator=gen)
    t.copy_(tmp)


class _Runner:
    """Shared parts: inputs by role on the problem's shared buffer placements (`placement.py`),
    L2-flushed event timing (one timer per placement), the NaN-poisoned check."""

    # the harness passes its round number as `slot` (see `Harness._timed`)
    slotted = True

    def __init__(self, backend: CudaBackend, problem: ConvProblem, candidate: Candidate) -> None:
        import torch

        self.candidate = candidate
        self.problem = problem
        self.device = backend.device
        dev = f"cuda:{self.device}"
        (ra, rb), rout = policy.io_roles(problem.direction)
        self.roles = (ra, rb, rout)
        self._sets: list[dict[str, Any]] | None = backend.placements_for(problem).sets
        self._cur = 0
        self._gen = torch.Generator(device=dev)
        self._seed = 1234
        self._gen.manual_seed(self._seed)
        _fill_random(self.a, self._gen)
        _fill_random(self.b, self._gen)
        self._timers: dict[int, Any] = {}
        self.timing_mode = ""

    @property
    def placements(self) -> int:
        return len(self._sets or ())

    def _role(self, role: str) -> Any:
        if self._sets is None:
            return None
        return self._sets[self._cur].get(role)

    @property
    def a(self) -> Any:
        return self._role(self.roles[0])

    @property
    def b(self) -> Any:
        return self._role(self.roles[1])

    @property
    def out(self) -> Any:
        return self._role(self.roles[2])

    @property
    def x_like(self) -> Any:
        return self._role("x") if self.problem.direction == "dgrad" else None

    @property
    def w_like(self) -> Any:
        return self._role("w") if self.problem.direction == "wgrad" else None

    # subclasses: run once, writing/returning the output
    def run(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def warmup(self) -> None:
        import torch

        self.run()
        torch.cuda.synchronize(self.device)

    def time(self, reps: int, slot: int | None = None) -> list[float]:
        """`reps` samples on placement `slot` (modulo the count; None: the first)."""
        from .timing import LaunchTimer

        n = self.placements
        self._cur = (int(slot) % n) if (slot is not None and n) else 0
        try:
            timer = self._timers.get(self._cur)
            if timer is None:
                # created (and its batch graph captured) while this placement is current
                timer = self._timers[self._cur] = LaunchTimer(self.run, device=self.device)
            out = timer.time(int(reps))
        finally:
            cur, self._cur = self._cur, 0
        info = timer.info
        self.timing_mode = (f"{info.mode} x{info.batch} spin {info.cover_s * 1e6:.0f}us "
                            f"retakes {info.retakes} uncovered {info.uncovered} "
                            f"max spin {info.max_cover_s * 1e6:.0f}us shrinks {info.shrinks} "
                            f"placement {cur + 1}/{n}")
        return out

    def _poisoned_run(self) -> Any:
        self.out.fill_(float("nan"))
        return self.run()

    def check(self) -> Correctness:
        import torch

        self._seed += 1
        self._gen.manual_seed(self._seed)
        _fill_random(self.a, self._gen)
        _fill_random(self.b, self._gen)
        try:
            out = self._poisoned_run()
            torch.cuda.synchronize(self.device)
        except Exception as exc:  # noqa: BLE001
            return Correctness(False, math.inf, policy.tolerance(self.problem),
                               f"run failed: {type(exc).__name__}: {exc}"[:400])
        key = (self.problem.key(), self.device, self._seed)
        ref = _REF_CACHE.get(key)
        if ref is None:
            _REF_CACHE.clear()
            ref = reference(self.problem, self.a, self.b, self.x_like, self.w_like)
            _REF_CACHE[key] = ref
        return compare(self.problem, out, ref)

    def close(self) -> None:
        for t in self._timers.values():
            t.close()
        self._timers = {}
        self._sets = None  # the placements stay with the backend for the problem's other runners


class CudnnPlanRunner(_Runner):
    def __init__(self, backend: CudaBackend, problem: ConvProblem, candidate: Candidate) -> None:
        from .cudnn_plan import ConvPlan

        plan_problem, name = self._plan_of(problem, candidate)
        try:
            self.plan = ConvPlan.build(plan_problem, name, device=backend.device)
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

        from .placement import workspace_offsets

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

        from . import wsguard

        self._guarded = True
        if not wsguard.wanted(self.plan.workspace_bytes):
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


class DualPlanRunner(CudnnPlanRunner):
    """`cudnn-dual:<plan>`: a plan of the problem's dual (`policy.dual_problem`) on the problem's
    own input and output buffers, with the weight transformed first (`convdoctor.tune.xform`): the
    transform runs inside every timed call, as `optimize` pays it per call."""

    @staticmethod
    def _plan_of(problem: ConvProblem, candidate: Candidate) -> tuple[ConvProblem, str]:
        name = policy.dual_plan_name_of(candidate.key)
        dual = policy.dual_problem(problem)
        if name is None or dual is None:
            raise CandidateUnsupported(f"{candidate.key}: no dual problem for {problem.short()} "
                                       "(stride-1 fprop and dgrad only)")
        return dual, name

    def __init__(self, backend: CudaBackend, problem: ConvProblem, candidate: Candidate) -> None:
        from .. import xform
        from .cudnn_plan import empty_for

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


class TorchRunner(_Runner):
    def __init__(self, backend: CudaBackend, problem: ConvProblem, candidate: Candidate) -> None:
        import torch

        self.mode, _, alt = candidate.key.split(":", 1)[1].partition("+")
        # the other layout to run in (converted in and back inside the timed run), or None
        self.alt: Any = None
        if alt:
            if alt != "nhwc" or problem.ndim not in (2, 3) or problem.layout == "nhwc":
                raise CandidateUnsupported(f"{candidate.key} applies to 2D/3D NCHW problems only")
            self.alt = torch.channels_last if problem.ndim == 2 else torch.channels_last_3d
        super().__init__(backend, problem, candidate)
        if self.mode in ("benchmark", "heuristic"):
            # PyTorch's choice cache key includes the memory format: the other layout is its own key
            k = (problem.key() + (f"+{alt}" if alt else ""), backend.device)
            first = _TORCH_CUDNN_FIRST.get(k)
            if first is not None and first != self.mode:
                self.close()
                raise CandidateUnsupported(
                    f"torch:{self.mode} cannot be measured in this process: torch:{first} already "
                    "ran this problem here and PyTorch reuses its cached cuDNN choice (its cache "
                    "key ignores the benchmark flag); run it in a fresh worker process")
            _TORCH_CUDNN_FIRST[k] = self.mode
            # The choice is made now: benchmark=True searches on this first call.
            self.run()
            torch.cuda.synchronize(backend.device)

    def run(self) -> Any:
        like = self.x_like if self.problem.direction == "dgrad" else self.w_like
        if self.alt is not None:
            return self._run_alt(like)
        with torch_flags(self.mode, self.problem):
            return torch_conv(self.problem, self.a, self.b, like)

    def _run_alt(self, like: Any) -> Any:
        import torch

        fmt = self.alt
        a = self.a.contiguous(memory_format=fmt)
        b = self.b.contiguous(memory_format=fmt)
        lk = None if like is None else like.contiguous(memory_format=fmt)
        with torch_flags(self.mode, self.problem):
            out = torch_conv(replace(self.problem, layout="nhwc"), a, b, lk)
        return out.contiguous(memory_format=torch.contiguous_format)

    def _poisoned_run(self) -> Any:
        # PyTorch allocates its own output: poison the caching allocator's block of that size
        # first (allocate, fill with NaN, free), so the output reuses NaN-filled memory.
        import torch

        from .cudnn_plan import empty_for

        _, _, rout = self.roles
        p = empty_for(self.problem, rout, f"cuda:{self.device}")
        p.fill_(float("nan"))
        del p
        torch.cuda.synchronize(self.device)
        return self.run()


class GemmRunner(TorchRunner):
    """`torch:gemm`: the direction as matrix products (`convdoctor.tune.gemm`)."""

    def __init__(self, backend: CudaBackend, problem: ConvProblem, candidate: Candidate) -> None:
        if not policy.gemm_eligible(problem):
            raise CandidateUnsupported("torch:gemm applies to 1x1 convolutions with no padding "
                                       "and one group only")
        _Runner.__init__(self, backend, problem, candidate)
        self.cl = problem.layout == "nhwc" and problem.ndim in (2, 3)
        self.tf32 = problem.math == "tf32"

    def run(self) -> Any:
        from .. import gemm

        p = self.problem
        with gemm.reduced_precision(self.tf32):
            if p.direction == "fprop":
                return gemm.fprop(self.a, self.b, p.stride, channels_last=self.cl)
            if p.direction == "dgrad":
                return gemm.dgrad(self.a, self.b, p.spatial, p.stride, channels_last=self.cl)
            return gemm.wgrad(self.a, self.b, p.stride, channels_last=self.cl)


class _TritonRunner(_Runner):
    """A candidate run by one of convdoctor's Triton kernels (`convdoctor.kernels.<KERNEL>`),
    writing into the problem's output buffer; the kernel is compiled (Triton JIT) on prepare,
    before any timing or graph capture, so compile time is listing time, never timed."""

    KERNEL = ""

    def __init__(self, backend: CudaBackend, problem: ConvProblem, candidate: Candidate) -> None:
        import importlib

        import torch

        self.kernel: Any = importlib.import_module(f"convdoctor.kernels.{self.KERNEL}")
        why = self.kernel.unavailable() or self.kernel.unfit(problem)
        if why:
            raise CandidateUnsupported(f"{candidate.key}: {why}")
        self.config = self.kernel.config_of(candidate.key) or ""
        try:
            self.kernel.parse_config(self.config)
        except ValueError as exc:
            raise CandidateUnsupported(f"{candidate.key}: {exc}") from None
        self.tf32 = problem.math == "tf32"
        super().__init__(backend, problem, candidate)
        try:
            self.run()
            torch.cuda.synchronize(backend.device)
        except Exception as exc:  # noqa: BLE001 - a kernel that does not compile or launch
            self.close()
            raise CandidateUnsupported(
                f"{candidate.key} failed: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:300]}") from None


class TritonDwRunner(_TritonRunner):
    """`triton:dw_<config>`: the depthwise kernel (fprop or dgrad)."""

    KERNEL = "depthwise"

    def run(self) -> Any:
        p = self.problem
        return self.kernel.run(p.direction, self.a, self.b, self.out, stride=p.stride,
                               pad_pre=p.pad_pre, dilation=p.dilation, config=self.config)


class TritonWgRunner(_TritonRunner):
    """`triton:wg_<config>`: the wgrad kernel into the dw buffer (its fp32 partial sums, when the
    reduction is split, are allocated per call and timed with it)."""

    KERNEL = "wgrad"

    def run(self) -> Any:
        p = self.problem
        return self.kernel.run(self.a, self.b, self.out, stride=p.stride, pad_pre=p.pad_pre,
                               dilation=p.dilation, config=self.config, tf32=self.tf32)


class TritonScRunner(_TritonRunner):
    """`triton:sc_<config>`: the small-C dgrad kernel into the dx buffer."""

    KERNEL = "smallc"

    def run(self) -> Any:
        p = self.problem
        return self.kernel.run(self.a, self.b, self.out, stride=p.stride, pad_pre=p.pad_pre,
                               dilation=p.dilation, config=self.config)


class TritonFpRunner(_TritonRunner):
    """`triton:fp_<config>`: the forward implicit-GEMM kernel into the y buffer."""

    KERNEL = "fprop"

    def run(self) -> Any:
        p = self.problem
        return self.kernel.run(self.a, self.b, self.out, stride=p.stride, pad_pre=p.pad_pre,
                               dilation=p.dilation, config=self.config, tf32=self.tf32)


def triton_enabled() -> bool:
    """`CONVDOCTOR_TRITON=0` keeps convdoctor's Triton kernels out of the candidates."""
    import os

    return os.environ.get("CONVDOCTOR_TRITON", "1").strip() not in ("0", "off", "false", "no")


class Im2colRunner(TorchRunner):
    """`torch:im2col`: the direction as a patch copy and one batched product over the groups."""

    def __init__(self, backend: CudaBackend, problem: ConvProblem, candidate: Candidate) -> None:
        why = policy.im2col_unfit(problem)
        if why:
            raise CandidateUnsupported(f"torch:im2col: {why}")
        _Runner.__init__(self, backend, problem, candidate)
        self.tf32 = problem.math == "tf32"

    def run(self) -> Any:
        from .. import gemm, im2col

        p = self.problem
        args = (p.stride, p.pad_pre, p.pad_post, p.dilation, p.groups)
        with gemm.reduced_precision(self.tf32):
            if p.direction == "fprop":
                return im2col.fprop(self.a, self.b, *args)
            if p.direction == "dgrad":
                return im2col.dgrad(self.a, self.b, p.spatial, *args)
            return im2col.wgrad(self.a, self.b, p.w_shape(), *args)


# A dual plan is offered when its quick time (without the weight transform) is within this of the
# fastest quick time of the problem's own and dual plans; at most DUAL_KEEP of them.
DUAL_BAND = 0.10
DUAL_KEEP = 6
# listing-step units of the dual problem's listing ("dual:eng69")
DUAL_UNIT = "dual:"


def pick_dual(quick: dict[str, float], own: dict[str, float], names: set[str]) -> list[str]:
    """The dual plans to offer: those among `names` whose quick time (`quick`, plan alone, us) is
    within DUAL_BAND of the fastest quick time of either kind (`own`: the problem's own plans),
    fastest first (then by name), at most DUAL_KEEP. Nothing when either side has no time."""
    if not quick or not own:
        return []
    best = min(min(quick.values()), min(own.values()))
    return sorted((n for n in quick if n in names and quick[n] <= best * (1 + DUAL_BAND)),
                  key=lambda n: (quick[n], n))[:DUAL_KEEP]


def _deterministic(plan: Any) -> bool:
    """A listed plan (`cudnn_plan.PlanInfo`) is deterministic: its engine's notes are known and
    do not say otherwise."""
    return "NONDETERMINISTIC" not in plan.notes and "notes-unknown" not in plan.notes


def refine_args_from_env() -> dict[str, Any]:
    """refine.refine's walk settings from the environment: CONVDOCTOR_CUDNN_REFINE_SEEDS
    (max_seeds), _BAND (seed_band), _ROUNDS (rounds); unset ones keep refine's defaults. For
    experiments (`scripts/gpu/refine_stability.py` compares settings in fresh processes); they
    are not part of the database key, so tune into a scratch `--db` (or `--no-db`) with them."""
    out: dict[str, Any] = {}
    for var, arg, kind in (("SEEDS", "max_seeds", int), ("BAND", "seed_band", float),
                           ("ROUNDS", "rounds", int)):
        v = _env_num(f"CONVDOCTOR_CUDNN_REFINE_{var}", None, kind)
        if v is None:
            continue
        if v < (0 if var == "BAND" else 1):
            from ...errors import UsageError

            raise UsageError(f"CONVDOCTOR_CUDNN_REFINE_{var}={v} is out of range "
                             f"({'0 or more' if var == 'BAND' else '1 or more'})")
        out[arg] = v
    return out


def _env_num(name: str, default: Any, kind: Any) -> Any:
    import os

    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        from ...errors import UsageError

        raise UsageError(f"{name}={raw!r} is not a number") from None


def _summary(obj: Any) -> dict[str, Any]:
    """`obj.summary()` for the listing record, or why it failed: the record must never cost the
    listing."""
    try:
        return dict(obj.summary())
    except Exception as exc:  # noqa: BLE001
        return {"record_error": f"{type(exc).__name__}: {exc}"[:200]}


def excluded_engines(units: set[str], why: dict[str, str] | None = None) -> dict[int, str]:
    """cuDNN engine id -> why, for the listing-step units that name an engine ("eng69" -> 69);
    `why`: unit -> reason (from the worker's parent); other units are not engines."""
    from .cudnn_plan import unit_engine

    out: dict[int, str] = {}
    for u in units:
        eng = unit_engine(u)
        if eng is not None:
            out[eng] = (why or {}).get(u) or "a step of an earlier listing with this engine failed"
    return out


class CudaBackend:
    """Tuning backend for one CUDA device: cuDNN plans via cudnn-frontend + PyTorch's paths."""

    name = "cuda"

    def __init__(self, device: int | None = None, *, enumerate_engines: bool | None = None,
                 max_extra: int | None = None, enum_budget_s: float | None = None,
                 isolate_heuristic: bool = True) -> None:
        """Engine/knob enumeration beyond the heuristic lists is bounded by `max_extra` plans
        (default 8) and `enum_budget_s` seconds (default 2) per problem; environment overrides:
        CONVDOCTOR_CUDNN_ENUM=0 (off), CONVDOCTOR_CUDNN_ENUM_EXTRA, CONVDOCTOR_CUDNN_ENUM_BUDGET_S.
        CONVDOCTOR_CUDNN_MAX_PLANS=N caps the cuDNN candidates per problem (heuristic rank order,
        a quarter of the cap for enumerated plans) to bound tuning time; default: no cap."""
        import os

        import torch

        if not torch.cuda.is_available():
            from ...errors import DependencyMissing

            raise DependencyMissing("the CUDA tuning backend needs a CUDA build of torch that sees "
                                    "a GPU", hint="run `convdoctor doctor` to see why none is seen")
        self.device = torch.cuda.current_device() if device is None else int(device)
        env = os.environ
        if enumerate_engines is None:
            enumerate_engines = env.get("CONVDOCTOR_CUDNN_ENUM", "1").strip() not in ("0", "no",
                                                                                    "off")
        if max_extra is None:
            max_extra = _env_num("CONVDOCTOR_CUDNN_ENUM_EXTRA", 8, int)
        if enum_budget_s is None:
            enum_budget_s = _env_num("CONVDOCTOR_CUDNN_ENUM_BUDGET_S", 2.0, float)
        # optional cap on cuDNN candidates per problem (heuristic rank order kept): 0 = no cap
        self.max_plans = _env_num("CONVDOCTOR_CUDNN_MAX_PLANS", 0, int)
        # knob-space refinement around the fastest plans (`refine.py`): on unless
        # CONVDOCTOR_CUDNN_REFINE=0; CONVDOCTOR_CUDNN_REFINE_BUDGET_S bounds it (default 6 s)
        self.refine = env.get("CONVDOCTOR_CUDNN_REFINE", "1").strip() not in ("0", "no", "off")
        self.refine_budget_s = _env_num("CONVDOCTOR_CUDNN_REFINE_BUDGET_S", 6.0, float)
        # where the knob walks start and how far they go (refine.refine's max_seeds, seed_band,
        # rounds): CONVDOCTOR_CUDNN_REFINE_SEEDS / _BAND / _ROUNDS; unset = refine's defaults
        self.refine_args = refine_args_from_env()
        # `cudnn-dual:` candidates (stride-1 fprop/dgrad as the other direction of the dual
        # problem): on unless CONVDOCTOR_CUDNN_DUAL=0
        self.dual = env.get("CONVDOCTOR_CUDNN_DUAL", "1").strip() not in ("0", "no", "off")
        self.last_refinement: Any = None
        self.enumerate_engines = bool(enumerate_engines)
        self.max_extra = int(max_extra)
        self.enum_budget_s = float(enum_budget_s)
        self._clock: Any = None
        self._env: dict[str, str] | None = None
        self.last_enumeration: Any = None
        self.last_listing: dict[str, Any] = {}
        self.cudnn_error = ""
        self._placements: Any = None
        self.isolate_heuristic = isolate_heuristic
        self._child: Any = None
        # units ("eng69") the next listings leave out: set by the worker from its parent's
        # request after a step of an earlier listing never returned (`..backend.listing_step`)
        self.listing_exclude: set[str] = set()
        self.listing_exclude_why: dict[str, str] = {}

    def _heuristic_child(self) -> Any:
        """The private worker process that measures torch:heuristic (started on first use)."""
        if self._child is None:
            from ..worker import WorkerBackend

            self._child = WorkerBackend("convdoctor.tune.gpu.backend:in_process_backend",
                                        timeout_s=120.0)
        return self._child

    def shutdown(self) -> None:
        if self._child is not None:
            self._child.shutdown()
            self._child = None

    # ------------------------------------------------------------ identity
    def environment(self) -> dict[str, str]:
        if self._env is not None:
            return dict(self._env)
        import torch

        from .cudnn_plan import cudnn_frontend_version

        props = torch.cuda.get_device_properties(self.device)
        env = {
            "gpu_name": str(props.name),
            "sm_count": str(props.multi_processor_count),
            "compute_capability": f"{props.major}.{props.minor}",
            "driver": self._nvml().driver_version() or "unknown",
            "cuda_runtime": str(torch.version.cuda or "unknown"),
            "cudnn": str(torch.backends.cudnn.version() or "unknown"),
            "cudnn_frontend": cudnn_frontend_version() or "absent",
            "torch": str(torch.__version__),
        }
        try:
            from .cudnn_plan import import_cudnn

            _, cudnn = import_cudnn()
            env["cudnn_frontend_backend"] = str(cudnn.backend_version())
        except Exception:  # noqa: BLE001
            pass
        self._env = env
        return dict(env)

    def _nvml(self) -> Any:
        if self._clock is None:
            from .nvml import NvmlClock

            self._clock = NvmlClock(self.device)
        return self._clock

    def clock(self) -> ClockReading | None:
        return self._nvml().read()  # type: ignore[no-any-return]

    # ------------------------------------------------------------ candidates
    def torch_candidates(self, problem: ConvProblem) -> list[Candidate]:
        det = problem.deterministic
        asym = () if problem.symmetric_padding else ("asymmetric padding: explicit F.pad "
                                                     "included in the time",)
        # PyTorch picks the cuDNN engine of these paths in each process: not pinned (Candidate)
        out = [
            Candidate("torch:benchmark", "cuda", 0, det,
                      ("PyTorch cudnn.benchmark=True choice in this process",) + asym,
                      pinned=False),
            Candidate("torch:heuristic", "cuda", 0, det,
                      ("PyTorch cuDNN heuristics (benchmark=False), in a child process",) + asym,
                      pinned=False),
        ]
        if problem.layout == "nchw" and problem.ndim in (2, 3):
            out += [Candidate(k, "cuda", 0, det, ("PyTorch cuDNN heuristics run in channels_last: "
                                                  "converted in and back, both timed",) + asym,
                              pinned=False)
                    for k in policy.LAYOUT_KEYS]
        if policy.gemm_eligible(problem):
            # cuBLAS gives the same bits run to run on one stream (its documented reproducibility)
            out.append(Candidate("torch:gemm", "cuda", 0, True,
                                 ("1x1 convolution as cuBLAS matrix products; a strided input's "
                                  "subsampling copy (and wgrad's NCHW transposes) timed",)))
        if policy.im2col_unfit(problem) is None:
            # one cuBLAS product, fold sums by gathering: the same bits run to run
            out.append(Candidate("torch:im2col", "cuda", policy.im2col_bytes(problem), True,
                                 ("grouped convolution as a patch copy and one batched cuBLAS "
                                  "product over the groups; the copy (and dgrad's fold) timed",)))
        if triton_enabled():
            from ...kernels import depthwise

            configs = policy.triton_dw_configs(problem)
            if configs and depthwise.unavailable() is None:
                # a fixed order of fp32 adds, no atomics: the same bits run to run
                out += [Candidate(policy.TRITON_PREFIX + c, "cuda", 0, True,
                                  ("depthwise direct kernel (Triton, convdoctor.kernels."
                                   "depthwise), fp32 accumulation",)) for c in configs]
            from ...kernels import wgrad

            configs = policy.triton_wg_configs(problem)
            if configs and wgrad.unavailable() is None:
                sms = int(self.environment()["sm_count"])
                positions = problem.n * math.prod(problem.out_spatial())
                # fixed-order fp32 sums per chunk, then one torch.sum over the chunks: the same
                # bits run to run
                out += [Candidate(policy.TRITON_WG_PREFIX + c, "cuda",
                                  wgrad.workspace_bytes(problem.k, problem.c, problem.kernel,
                                                        positions, c, sms), True,
                                  ("split-reduction implicit-GEMM wgrad (Triton, convdoctor."
                                   "kernels.wgrad), fp32 accumulation",)) for c in configs]
            from ...kernels import smallc

            configs = policy.triton_sc_configs(problem)
            if configs and smallc.unavailable() is None:
                # a fixed order of fp32 adds, no atomics: the same bits run to run
                out += [Candidate(policy.TRITON_SC_PREFIX + c, "cuda", 0, True,
                                  ("direct small-C dgrad kernel (Triton, convdoctor.kernels."
                                   "smallc), fp32 accumulation",)) for c in configs]
            from ...kernels import fprop

            configs = policy.triton_fp_configs(problem)
            if configs and fprop.unavailable() is None:
                # a fixed order of fp32 sums per output, no atomics: the same bits run to run
                out += [Candidate(policy.TRITON_FP_PREFIX + c, "cuda", 0, True,
                                  ("forward implicit-GEMM kernel reading NCHW in place (Triton, "
                                   "convdoctor.kernels.fprop), fp32 accumulation",))
                        for c in configs]
        if not (problem.deterministic and problem.direction != "fprop"):
            out.append(Candidate("torch:cudnn-off", "cuda", 0, problem.direction == "fprop",
                                 ("PyTorch native CUDA kernels (cuDNN disabled)",) + asym))
        return out

    def cudnn_candidates(self, problem: ConvProblem, *, lean: bool = False) -> list[Candidate]:
        """cuDNN plans: the heuristic lists, engine/knob enumeration and knob refinement (`lean`:
        the heuristic lists only)."""
        from ..backend import listing_step, unit_prefix
        from .cudnn_plan import excluding

        units = set(getattr(self, "listing_exclude", None) or ())
        why = getattr(self, "listing_exclude_why", None) or {}
        # the dual problem's listing reports its engines as "dual:engN" (its own graph's ids)
        dual_units = {u[len(DUAL_UNIT):]: why.get(u, "") for u in units if u.startswith(DUAL_UNIT)}
        engines = excluded_engines(units, why)
        dual_engines = excluded_engines(set(dual_units), {u: w for u, w in dual_units.items() if w})
        with excluding(engines):
            out = self._cudnn_candidates(problem, lean=lean)
        if not lean:
            with excluding(dual_engines), unit_prefix(DUAL_UNIT):
                out += self._dual_candidates(problem)
        listing_step("setup", "", "listing done")
        left = [f"eng{e}" for e in sorted(engines)] + [f"{DUAL_UNIT}eng{e}"
                                                       for e in sorted(dual_engines)]
        if left:
            self.last_listing["left_out"] = left
        return out

    def _cudnn_candidates(self, problem: ConvProblem, *, lean: bool) -> list[Candidate]:
        from ...errors import DependencyMissing
        from .cudnn_plan import enumerate_plans

        self.last_enumeration = self.last_refinement = None
        self.last_listing = {"lean": lean}
        try:
            en = enumerate_plans(problem, device=self.device,
                                 enumerate_engines=self.enumerate_engines and not lean,
                                 max_extra=self.max_extra, time_budget_s=self.enum_budget_s)
        except DependencyMissing as exc:
            self.cudnn_error = str(exc)
            self.last_listing["error"] = self.cudnn_error
            return []
        except Exception as exc:  # noqa: BLE001 - graph not supported by cuDNN at all
            self.cudnn_error = f"{type(exc).__name__}: {exc}"[:400]
            self.last_listing["error"] = self.cudnn_error
            return []
        self.last_enumeration = en
        self.last_listing["enumeration"] = _summary(en)
        out = []
        built = en.built()
        if self.max_plans > 0:
            # keep the heuristic ranks first, and always some enumerated plans when there are any
            enum = [p for p in built if p.source == "enum"]
            heur = [p for p in built if p.source != "enum"]
            n_enum = min(len(enum), max(0, self.max_plans // 4)) if heur else len(enum)
            built = heur[: self.max_plans - n_enum] + enum[:n_enum]
        if not lean:
            built = built + self._refined(problem, en)
            if self.last_refinement is not None:
                self.last_listing["refinement"] = _summary(self.last_refinement)
        for p in built:
            det = _deterministic(p)
            notes = (f"source={p.source}",) + tuple(n.lower() for n in p.notes)
            ref = self.last_refinement
            if ref is not None and p.name in ref.origin:
                seed = ref.origin[p.name]
                notes += (f"one knob from {seed}: quick {ref.quick_us[p.name]:.1f} us vs "
                          f"{ref.quick_us[seed]:.1f} us",)
            out.append(Candidate(policy.cudnn_key(p.name), "cuda", p.workspace_bytes, det, notes))
        return out

    def _dual_candidates(self, problem: ConvProblem) -> list[Candidate]:
        """`cudnn-dual:` plans: the dual problem's plans (`policy.dual_problem`; stride-1 fprop
        and dgrad), listed, quick-timed and knob-refined like the problem's own, and offered only
        when their quick time (the plan alone) is within DUAL_BAND of the fastest plan of either
        kind, at most DUAL_KEEP of them: the harness then times them with the weight transform
        inside the call. The listing record (`dual` in `TuneResult.listing`) says what happened;
        a failure here never costs the problem's own candidates."""
        dual = policy.dual_problem(problem)
        if dual is None or not self.dual:
            return []
        from ..backend import listing_step
        from . import refine
        from .cudnn_plan import enumerate_plans
        from .placement import allocate

        rec: dict[str, Any] = {"problem": dual.key()}
        self.last_listing["dual"] = rec
        own = getattr(self.last_refinement, "quick_us", None) or {}
        if not own:
            # the band compares with the problem's own quick times (its refinement's)
            rec["skipped"] = ("no quick times of the problem's own plans (refinement off or "
                              "failed): nothing to compare dual plans with")
            rec["kept"] = []
            return []
        try:
            # a second listing: half the enumeration and refinement budgets, so the two together
            # stay near what one listing took (the worker waits LIST_TIMEOUT_S for a listing)
            en = enumerate_plans(dual, device=self.device, enumerate_engines=self.enumerate_engines,
                                 max_extra=self.max_extra, time_budget_s=self.enum_budget_s / 2)
            rec["enumeration"] = _summary(en)
            listing_step("setup", "", "dual problem buffers and timer")
            sets = allocate(dual, self.device, wanted=1).sets
            timer = refine.event_timer(dual, sets[0])
            res = refine.refine(dual, en, timer, device=self.device,
                                budget_s=self.refine_budget_s / 2, **self.refine_args)
            rec["refinement"] = _summary(res)
        except Exception as exc:  # noqa: BLE001 - the dual only adds candidates
            rec["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            return []
        quick = dict(res.quick_us)
        rec["best_own_us"] = round(min(own.values()), 2)
        if not quick:
            rec["kept"] = []
            return []
        best_dual = min(quick.values())
        rec["best_dual_us"] = round(best_dual, 2)
        infos = {p.name: p for p in en.built()} | {p.name: p for p in res.plans}
        ranked = pick_dual(quick, own, set(infos))
        rec["kept"] = [[policy.dual_key(n), round(quick[n], 2)] for n in ranked]
        # the transformed weight is a buffer of the candidate's own, like a workspace (and a tie
        # between equal times goes to the smaller one: a plan of the problem itself)
        wbytes = math.prod(dual.w_shape()) * DTYPE_BYTES[dual.dtype]
        out = []
        for n in ranked:
            p = infos[n]
            det = _deterministic(p)
            notes = (f"source={p.source}", f"dual {dual.direction} plan: weight flipped and "
                     f"channel-swapped per call (timed; its {wbytes} B buffer counted as "
                     f"workspace); plan alone {quick[n]:.1f} us quick",
                     *(x.lower() for x in p.notes))
            out.append(Candidate(policy.dual_key(n), "cuda", p.workspace_bytes + wbytes, det,
                                 notes))
        return out

    def _refined(self, problem: ConvProblem, en: Any) -> list[Any]:
        """Plans one knob away from the fastest ones (`refine.py`), or [] when refinement is off
        or fails (the failure is kept in `last_refinement`'s notes, never raised)."""
        self.last_refinement = None
        if not self.refine or self.refine_budget_s <= 0:
            return []
        from ..backend import listing_step
        from . import refine

        try:
            listing_step("setup", "", "refinement buffers and timer")
            sets = self.placements_for(problem).sets
            timer = refine.event_timer(problem, sets[0])
            res = refine.refine(problem, en, timer, device=self.device,
                                budget_s=self.refine_budget_s,
                                **self.refine_args)
        except Exception as exc:  # noqa: BLE001 - refinement only adds candidates
            res = refine.Refinement(plans=[], notes=[f"refinement failed: {type(exc).__name__}: "
                                                     f"{' '.join(str(exc).split())[:200]}"])
        self.last_refinement = res
        return list(res.plans)

    def candidates(self, problem: ConvProblem) -> list[Candidate]:
        self.release(problem)
        return self.torch_candidates(problem) + self.cudnn_candidates(problem)

    def listing_info(self) -> dict[str, Any]:
        """What the last listing did (JSON-safe; `TuneResult.listing`): whether it was the short
        list, cuDNN's error if it listed nothing, the enumeration's plan counts and seconds, and
        the knob refinement's seeds, plans tried/built/kept, seconds and notes."""
        return dict(getattr(self, "last_listing", None) or {})

    def lean_candidates(self, problem: ConvProblem) -> list[Candidate]:
        """PyTorch's paths and cuDNN's heuristic plans only (no enumeration, no refinement): what
        the harness falls back to when the full listing failed or hung."""
        self.release(problem)
        return self.torch_candidates(problem) + self.cudnn_candidates(problem, lean=True)

    def release(self, problem: ConvProblem | None = None) -> None:
        """Free what earlier problems left behind before tuning `problem`: their cached cuDNN
        plans (and graphs) and the allocator's unused cached blocks. A worker tunes problem after
        problem; without this its memory grew until later problems failed every candidate with
        CUDA out-of-memory (seen on the H100: no winner for the last problems of a 28-problem
        run)."""
        import torch

        from .cudnn_plan import drop_plans

        drop_plans(None if problem is None else problem.key())
        self._placements = None
        _REF_CACHE.clear()
        torch.cuda.empty_cache()

    def placements_for(self, problem: ConvProblem) -> Any:
        """The problem's buffer placements, shared by all its runners in this process (made on
        first use; a new problem replaces the previous problem's, whose runners keep theirs alive
        until they close)."""
        from .placement import allocate

        cur = self._placements
        if cur is None or cur.key != problem.key():
            self._placements = None
            cur = self._placements = allocate(problem, self.device)
        return cur

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> Any:
        import torch

        with torch.cuda.device(self.device):
            if candidate.key.startswith(policy.TWIN_PREFIX):
                inner = candidate.key[len(policy.TWIN_PREFIX):]
                if not inner or inner.startswith(policy.TWIN_PREFIX) or inner == "torch:benchmark":
                    raise CandidateUnsupported(f"{candidate.key}: no twin of {inner!r} in the "
                                               "heuristic process")
                return self._heuristic_child().prepare(problem, replace(candidate, key=inner))
            if candidate.key.startswith(policy.CUDNN_PREFIX):
                return CudnnPlanRunner(self, problem, candidate)
            if candidate.key.startswith(policy.DUAL_PREFIX):
                return DualPlanRunner(self, problem, candidate)
            if candidate.key.startswith(policy.TRITON_PREFIX):
                return TritonDwRunner(self, problem, candidate)
            if candidate.key.startswith(policy.TRITON_WG_PREFIX):
                return TritonWgRunner(self, problem, candidate)
            if candidate.key.startswith(policy.TRITON_SC_PREFIX):
                return TritonScRunner(self, problem, candidate)
            if candidate.key.startswith(policy.TRITON_FP_PREFIX):
                return TritonFpRunner(self, problem, candidate)
            if candidate.key == "torch:heuristic" and self.isolate_heuristic:
                return self._heuristic_child().prepare(problem, candidate)
            runner: Any = (GemmRunner if candidate.key in policy.GEMM_KEYS else
                           Im2colRunner if candidate.key in policy.IM2COL_KEYS else TorchRunner
                           if candidate.key in policy.TORCH_KEYS + policy.LAYOUT_KEYS else None)
            if runner is not None:
                try:
                    return runner(self, problem, candidate)
                except CandidateUnsupported:
                    raise
                except RuntimeError as exc:
                    raise CandidateUnsupported(
                        f"{candidate.key} failed: {' '.join(str(exc).split())[:300]}") from None
        raise CandidateUnsupported(f"unknown candidate {candidate.key!r} for the CUDA backend")


def in_process_backend() -> CudaBackend:
    """The backend of the torch:heuristic child worker: everything runs in that process."""
    return CudaBackend(enumerate_engines=False, isolate_heuristic=False)
