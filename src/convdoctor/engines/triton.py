"""convdoctor's own Triton kernels as engines: one `TritonEngine` per kernel module.

A kernel module (`convdoctor.kernels.<name>`) declares its engine at its end:

    ENGINE = TritonEngine(name="triton-fp", module=__name__, prefix=PREFIX,
                          directions=("fprop",), what="forward implicit-GEMM", ...)

and provides `unavailable()`, `unfit(problem)`, `config_of(key)`, `parse_config(name)`,
`offered(problem) -> configs` and `compute(direction, a, b, out, *, stride, pad_pre, dilation,
config, tf32)`, which computes `out` from the direction's two inputs (fprop x, w -> y; dgrad dy,
w -> dx; wgrad x, dy -> dw) in any dense layout. That one launch path is what the tuner times
(`TritonRunner`, on the problem's buffers; the kernel compiles when the runner is built, so compile
time is listing time, never timed) and what the runtime runs (`TritonExec`, which allocates the
output, adds the bias and its gradient). Adding a kernel is its module plus one entry in
`registry.ENGINES`.

An executor is built for one problem and one direction, like a cuDNN plan: asked for another
direction it raises, and the route falls back (`runtime.fallback`). The kernels accumulate in
fp32; fp32 products round to TF32 only where a kernel says so and the math mode (tuner) or
PyTorch's TF32 flag for convolutions at call time (runtime) allows it. Ordinary (not transposed)
convolutions only. Triton is imported lazily; without it nothing is offered.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base import Candidate, CandidateUnsupported, ConvArgs, Engine
from .runner import BufferRunner

if TYPE_CHECKING:
    from ..problem import ConvProblem

# Host cost of a Triton route per eager call: Triton's Python launcher plus the executor's checks
# and output allocation. Measured on an H100 host (Triton 3.6.0, back-to-back eager calls of a tiny
# depthwise layer): the executor's fprop 63.5 us per call, F.conv2d 15.0 us, so 48.5 us more.
# Nothing inside a CUDA graph.
HOST_COST_S = 50e-6


class TritonEngine(Engine):
    """The engine of one Triton kernel module (see the module docstring)."""

    device = "cuda"
    runs_transposed = False
    by_name = True

    def __init__(self, *, name: str, module: str, prefix: str, directions: tuple[str, ...],
                 what: str, note: str, deterministic: bool = True,
                 workspace: Callable[[ConvProblem, str, int], int] | None = None) -> None:
        self.name = name
        self.module = module
        self.prefix = prefix
        self.directions = directions
        self.what = what
        self.note = note
        self.deterministic = deterministic
        self.workspace = workspace
        self.summary = f"convdoctor's {what} Triton kernel ({', '.join(directions)})"

    @property
    def kernel(self) -> Any:
        return importlib.import_module(self.module)

    def offers(self, problem: ConvProblem, backend: Any, *, lean: bool = False
               ) -> list[Candidate]:
        settings = getattr(backend, "settings", None)
        if settings is not None and not settings.triton:
            return []
        k = self.kernel
        configs = k.offered(problem)
        if not configs or k.unavailable() is not None:
            return []
        sms = 0
        if self.workspace is not None:
            sms = int(backend.environment()["sm_count"])
        return [Candidate(self.prefix + c, "cuda",
                          self.workspace(problem, c, sms) if self.workspace is not None else 0,
                          self.deterministic, (self.note,)) for c in configs]

    def runner(self, backend: Any, problem: ConvProblem, candidate: Candidate) -> Any:
        return TritonRunner(self, backend, problem, candidate)

    def executor(self, key: str, problem: ConvProblem, reference_s: float | None = None) -> Any:
        return TritonExec(self, key, problem)

    def host_cost_s(self, key: str, *, train: bool) -> float:
        return HOST_COST_S

    def config(self, key: str, problem: ConvProblem) -> str:
        """The key's configuration, checked: ValueError when the key, the configuration or the
        problem is not this kernel's, or Triton cannot run here."""
        k = self.kernel
        config = k.config_of(key)
        if config is None:
            raise ValueError(f"{key} is not a {self.what} kernel key")
        k.parse_config(config)
        why = k.unfit(problem) or k.unavailable()
        if why:
            raise ValueError(f"{key}: {why}")
        return str(config)


class TritonRunner(BufferRunner):
    """The tuner's runner: the kernel's launch on the problem's buffers."""

    def __init__(self, engine: TritonEngine, backend: Any, problem: ConvProblem,
                 candidate: Candidate) -> None:
        import torch

        try:
            self.config = engine.config(candidate.key, problem)
        except ValueError as exc:
            raise CandidateUnsupported(str(exc)) from None
        self.launch = engine.kernel.compute
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

    def run(self) -> Any:
        p = self.problem
        return self.launch(p.direction, self.a, self.b, self.out, stride=p.stride,
                           pad_pre=p.pad_pre, dilation=p.dilation, config=self.config,
                           tf32=self.tf32)


def _format_of(t: Any) -> Any:
    """The memory format `t` is dense in (channels-last where it is that and not contiguous)."""
    import torch

    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if t.dim() == 5 and not t.is_contiguous() and t.is_contiguous(
            memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.contiguous_format


def _dense(t: Any) -> Any:
    """`t` if it is contiguous or channels-last - the layouts the tuner timed - else a contiguous
    copy (any other stride pattern would compile a kernel of its own)."""
    import torch

    if t.is_contiguous() or _format_of(t) != torch.contiguous_format:
        return t
    return t.contiguous()


class TritonExec:
    """The runtime's executor: the kernel's launch on the caller's tensors, for the direction
    the key was tuned for."""

    kind = "triton"

    def __init__(self, engine: TritonEngine, key: str, problem: ConvProblem) -> None:
        self.config = engine.config(key, problem)
        self.engine = engine
        self.launch = engine.kernel.compute
        self.key = key
        self.problem = problem
        self.direction = problem.direction
        self._w_shape = tuple(problem.w_shape())
        self._bias_dims = [0, *range(2, 2 + problem.ndim)]

    @classmethod
    def build(cls, engine: TritonEngine, key: str, problem: ConvProblem) -> TritonExec:
        return cls(engine, key, problem)

    def is_noop(self) -> bool:
        return False

    def _check(self, x: Any, w: Any, a: ConvArgs, *others: Any) -> None:
        """The call is the tuned problem's kind: not transposed, its groups, rank and weight
        shape, one dtype."""
        p = self.problem
        why = ("transposed" if a.transposed else
               f"groups={a.groups}, tuned with groups={p.groups} (ungrouped: 1)"
               if a.groups != p.groups else
               f"a {x.dim()}-dim input" if x.dim() != p.ndim + 2 else
               f"weight {tuple(w.shape)}, tuned for {self._w_shape}"
               if tuple(w.shape) != self._w_shape else
               "tensors of several dtypes" if len({t.dtype for t in (x, w, *others)}) != 1
               else "")
        if why:
            raise RuntimeError(f"{self.key}: {why}: not the {p.direction} problem it was tuned "
                               f"for ({p.short()})")

    def _geometry(self, a: ConvArgs) -> dict[str, Any]:
        from .gemm_math import conv_tf32_allowed

        return {"stride": a.stride, "pad_pre": a.padding, "dilation": a.dilation,
                "config": self.config, "tf32": conv_tf32_allowed()}

    def fprop(self, x: Any, w: Any, b: Any, a: ConvArgs) -> Any:
        import torch

        if self.direction != "fprop":
            raise RuntimeError(f"{self.key} was tuned for {self.direction}, not fprop")
        self._check(x, w, a)
        nd = x.dim() - 2
        out = [(int(x.shape[2 + i]) + 2 * a.padding[i] - a.dilation[i] * (int(w.shape[2 + i]) - 1)
                - 1) // a.stride[i] + 1 for i in range(nd)]
        if min(out) < 1 or x.shape[0] == 0:
            raise RuntimeError(f"{self.key}: input {tuple(x.shape)} and weight {tuple(w.shape)} "
                               "give no output")
        if b is not None and (b.dtype != x.dtype or b.numel() != w.shape[0]):
            raise RuntimeError(f"{self.key}: a bias of {b.dtype} x {b.numel()} for a "
                               f"{x.dtype} layer of {w.shape[0]} output channels")
        # channels-last where x or w is, as PyTorch's CUDA convolution (and its fake kernel under
        # torch.compile) returns it
        fmt = _format_of(x)
        if fmt == torch.contiguous_format:
            fmt = _format_of(w)
        y = torch.empty((x.shape[0], w.shape[0], *out), dtype=x.dtype, device=x.device,
                        memory_format=fmt)
        self.launch("fprop", _dense(x), _dense(w), y, **self._geometry(a))
        if b is not None:
            y.add_(b.reshape(1, -1, *([1] * nd)))
        return y

    def backward(self, gy: Any, x: Any, w: Any, bias_sizes: list[int] | None, a: ConvArgs,
                 mask: tuple[bool, bool, bool]) -> tuple[Any, Any, Any]:
        import torch

        d = self.direction
        if d == "fprop" or (d == "dgrad" and mask[1]) or (d == "wgrad" and mask[0]):
            what = {"fprop": "forward calls", "dgrad": "dx", "wgrad": "dw"}[d]
            raise RuntimeError(f"{self.key} was tuned for {d}; it computes {what} only")
        self._check(x, w, a, gy)
        gx = gw = gb = None
        gy = _dense(gy)
        if d == "dgrad" and mask[0]:
            gx = torch.empty(x.shape, dtype=gy.dtype, device=gy.device,
                             memory_format=_format_of(x))
            self.launch("dgrad", gy, _dense(w), gx, **self._geometry(a))
        if d == "wgrad" and mask[1]:
            gw = torch.empty(w.shape, dtype=w.dtype, device=w.device, memory_format=_format_of(w))
            self.launch("wgrad", _dense(x), gy, gw, **self._geometry(a))
        if mask[2]:
            gb = gy.sum(dim=self._bias_dims)
        return gx, gw, gb

    def describe(self) -> str:
        return f"{self.key} (convdoctor's {self.engine.what} Triton kernel)"

    def __repr__(self) -> str:
        return f"TritonExec({self.key!r})"


def positions(problem: ConvProblem) -> int:
    """Output positions of all samples (the wgrad kernel's reduction length)."""
    return problem.n * math.prod(problem.out_spatial())
