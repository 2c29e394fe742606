"""Whole-model CUDA graphs: replay the model's forward (and its backward when training) as captured
CUDA graphs for the one input signature `optimize` was given; every other call runs eagerly.

Why: convolutional models are often host-bound on an H100 (a ResNet-50 bf16 training step issued
19.4 ms of CPU work for a 19.5 ms step); a replayed graph launches the whole forward or backward
with one call. Numerics are unchanged: the graph holds exactly the kernels the eager step
launched (the routed convolutions included), recorded once.

How (the recipe of torch.cuda.make_graphed_callables, written out so that outputs and gradients are
COPIED out of the graph's static buffers; make_graphed_callables hands out views of them, which the
next replay overwrites, so an output kept across steps or a gradient accumulated over two backward
calls would be silently wrong):
- warm-up on a side stream (3 forward/backward passes), batch-norm buffers put back afterwards;
- capture the forward into one graph and `torch.autograd.grad` of its outputs (with static incoming
  gradients) into a second graph, both in one memory pool;
- a custom autograd Function copies the inputs in, replays the forward graph and returns copies of
  the outputs; its backward copies the incoming gradients in, replays the backward graph and returns
  copies of the input and parameter gradients (accumulated into `.grad` by autograd as usual).
Replay only when the call matches the capture exactly: the same tensor shapes, dtypes, devices,
strides and requires_grad, the same parameter and buffer storage, the same `model.training`, grad
mode and CUDA autocast state (off, or on with the captured dtype), not under torch.compile,
inference mode or another capture, and no earlier replayed forward still waiting for its backward
(the graph's saved activations are the last replay's); otherwise eager.

Under autocast the warm-up and the capture run with autocast's cast cache off (as
torch.cuda.make_graphed_callables requires): the graph then holds the weight casts themselves,
so every replay casts the parameters' current values, as an eager autocast step does.
"""

from __future__ import annotations

import operator
import weakref
from typing import Any

import torch

from .quiet import own_steps

_WARMUP = 3

# Bumped whenever any module in the process registers a parameter, buffer or submodule (by
# assignment or register_*), through torch's global registration hooks: a StorageGuard re-walks
# its model only then. None: the hooks are not available, every check walks the model.
_GEN: list[int] | None = None


def _bump(*_args: Any) -> None:
    if _GEN is not None:
        _GEN[0] += 1


def _generation() -> int | None:
    global _GEN
    if _GEN is None:
        from torch.nn.modules import module as _m

        names = ("register_module_parameter_registration_hook",
                 "register_module_buffer_registration_hook",
                 "register_module_module_registration_hook")
        fns = [getattr(_m, n, None) for n in names]
        if not all(callable(f) for f in fns):
            return None
        _GEN = [0]
        for f in fns:
            f(_bump)  # type: ignore[misc]
    return _GEN[0]


class StorageGuard:
    """Are the model's parameters and buffers still the tensors, and storage, a graph captured?

    A replay reads the captured addresses, so a tensor replaced in any parameter or buffer slot
    (assignment, `p.data = ...`, `bias = None`, `model.to(...)` with or without
    `set_overwrite_module_params_on_conversion`, `torch.func.functional_call`) must send the call
    to the eager path. Walking the model's modules for this on every call cost 356 us per call for
    ResNet-50 (320 tensors) on the CI host, host time a GPU-bound replay waits for. The guard keeps
    every slot (the module's `_parameters` / `_buffers` dict, the key, the tensor) and checks that
    each slot still holds its tensor at its data pointer (`benchmarks/bench_graph_guard.py`); it
    walks the model again only after a parameter, buffer or submodule registration anywhere in the
    process (torch's global registration hooks; without them, on every call), which is what adds
    keys or modules. Not seen: a submodule deleted with `del` (no hook fires) whose forward the
    model's own code skips afterwards. Replaced tensors stay referenced while the graph does."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.gen = _generation()  # before the walk: a registration during it re-walks later
        self.slots = self._slots()
        self._dicts = [d for d, _, _ in self.slots]
        self._keys = [k for _, k, _ in self.slots]
        self._held = [t for _, _, t in self.slots]
        self._tensors = [t for t in self._held if t is not None]
        self.ptrs = [t.data_ptr() for t in self._tensors]

    def _slots(self) -> list[tuple[dict[str, Any], str, Any]]:
        return [(d, k, t) for m in self.model.modules() for d in (m._parameters, m._buffers)
                for k, t in d.items()]

    def ok(self) -> bool:
        gen = _generation()
        if gen is None or gen != self.gen:
            now = self._slots()
            if len(now) != len(self.slots) or any(
                    a[0] is not b[0] or a[1] != b[1] or a[2] is not b[2]
                    for a, b in zip(now, self.slots, strict=True)):
                return False
            self.gen = gen
        # every slot still holds its tensor (C-level loops: this runs before every replay)
        if not all(map(operator.is_, map(dict.get, self._dicts, self._keys), self._held)):
            return False
        return list(map(torch.Tensor.data_ptr, self._tensors)) == self.ptrs


def amp_state(device_type: str = "cuda") -> tuple[bool, Any]:
    """(autocast on, its dtype) for `device_type` now."""
    on = torch.is_autocast_enabled(device_type)
    return on, (torch.get_autocast_dtype(device_type) if on else None)


def _amp_context(state: tuple[bool, Any]) -> Any:
    """The captured autocast state with the cast cache off (a cached cast made outside a capture
    cannot be used inside it), or nothing to change when autocast is off."""
    import contextlib

    on, dtype = state
    return torch.autocast("cuda", dtype=dtype, cache_enabled=False) if on \
        else contextlib.nullcontext()


def _sig(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device, t.requires_grad)


class GraphedForward:
    """The replacement `forward` of a model with captured graphs (installed by `install`)."""

    def __init__(self, model: torch.nn.Module, orig_forward: Any, args: tuple[torch.Tensor, ...],
                 train: bool) -> None:
        self.model = model
        self.orig_forward = orig_forward
        self.train = bool(train)
        self.enabled = True
        self.replays = 0
        self.eager_calls = 0
        # The graph's saved activations belong to the LAST forward replay: while a replayed
        # forward still waits for its backward, further calls run eagerly (weakref to its node).
        self._pending: Any = None
        self.params = [p for p in model.parameters() if p.requires_grad] if train else []
        self._storage = StorageGuard(model)
        self._sig = tuple(_sig(a) for a in args)
        self._amp = amp_state()
        self._training = model.training
        self._capture(args)

    # ------------------------------------------------------------------ capture
    def _capture(self, args: tuple[torch.Tensor, ...]) -> None:
        with own_steps():
            self._capture_graphs(args)
        # The captured forward's autograd graph is no longer needed (a replay runs kernels, and
        # `_Replay` is the autograd node). Kept, it would keep the parameters' gradient
        # accumulators made on the capture's side stream alive, and every later eager backward
        # on another stream would warn that their streams do not match.
        self.static_out = [o.detach() for o in self.static_out]
        self.out_spec = self._pack(self.static_out)

    def _capture_graphs(self, args: tuple[torch.Tensor, ...]) -> None:
        dev = args[0].device
        saved = [(b, b.detach().clone()) for b in self.model.buffers()]
        self.static_in = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
        grad_in = [a for a in self.static_in if a.requires_grad] + self.params
        if self._amp[0]:
            # casts the caller's autocast cached in eager steps (on the default stream) make the
            # backward's capture fail (cudaErrorStreamCaptureImplicit, seen on an H100): dropped,
            # the next eager step casts again
            torch.clear_autocast_cache()
        try:
            side = torch.cuda.Stream(device=dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side), torch.set_grad_enabled(self.train), \
                    _amp_context(self._amp):
                for _ in range(_WARMUP):
                    outs = self._flat(self.orig_forward(*self.static_in))
                    if self.train:
                        req = [o for o in outs if o.requires_grad]
                        torch.autograd.grad(req, grad_in, [torch.ones_like(o) for o in req],
                                            allow_unused=True)
                    del outs
            torch.cuda.current_stream(dev).wait_stream(side)
            torch.cuda.synchronize(dev)
            self.pool = torch.cuda.graph_pool_handle()
            self.fwd = torch.cuda.CUDAGraph()
            with torch.set_grad_enabled(self.train), _amp_context(self._amp), \
                    torch.cuda.graph(self.fwd, pool=self.pool, stream=side):
                out = self.orig_forward(*self.static_in)
            self.out_spec = out
            self.static_out = self._flat(out)
            self.bwd = None
            if self.train:
                self.req_idx = [i for i, o in enumerate(self.static_out) if o.requires_grad]
                req = [self.static_out[i] for i in self.req_idx]
                if not req:
                    raise RuntimeError("no output requires grad")
                self.static_gout = [torch.empty_like(o) for o in req]
                self.bwd = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.bwd, pool=self.pool, stream=side):
                    grads = torch.autograd.grad(req, grad_in, self.static_gout,
                                                allow_unused=True)
                self.static_grads = list(grads)
            torch.cuda.synchronize(dev)
        finally:
            with torch.no_grad():
                for b, v in saved:
                    b.copy_(v)

    @staticmethod
    def _flat(out: Any) -> list[torch.Tensor]:
        if isinstance(out, torch.Tensor):
            return [out]
        if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
            return list(out)
        raise TypeError("graphs need a model that returns a tensor or a tuple/list of tensors, "
                        f"not {type(out).__name__}")

    def _pack(self, flat: list[torch.Tensor]) -> Any:
        if isinstance(self.out_spec, torch.Tensor):
            return flat[0]
        return type(self.out_spec)(flat)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # a copied model runs eagerly (graphs belong to the original's storage)
        import copy

        return copy.deepcopy(self.orig_forward, memo)

    # ------------------------------------------------------------------ dispatch
    def matches(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        # first: under torch.compile nothing below is traced (is_inference_mode_enabled would
        # break the graph), and the compiled model runs eagerly through the compiler
        if torch.compiler.is_compiling():
            return False
        if not self.enabled or kwargs or len(args) != len(self._sig):
            return False
        if self.model.training != self._training or torch.is_grad_enabled() != self.train:
            return False
        if torch.is_inference_mode_enabled() or amp_state() != self._amp:
            return False
        if torch.cuda.is_current_stream_capturing():
            return False
        if self._pending is not None and self._pending() is not None:
            return False
        for a, s in zip(args, self._sig, strict=True):
            if not isinstance(a, torch.Tensor) or _sig(a) != s:
                return False
        return self._storage.ok()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.matches(args, kwargs):
            self.eager_calls += 1
            return self.orig_forward(*args, **kwargs)
        self.replays += 1
        if not self.train:
            for s, a in zip(self.static_in, args, strict=True):
                if s.data_ptr() != a.data_ptr():
                    s.copy_(a)
            self.fwd.replay()
            return self._pack([o.clone() for o in self.static_out])
        outs = _Replay.apply(self, *args, *self.params)
        return self._pack(list(outs))


class _Replay(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, g: GraphedForward, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.g = g
        g._pending = weakref.ref(ctx)
        for s, a in zip(g.static_in, inputs[:len(g.static_in)], strict=True):
            if s.data_ptr() != a.data_ptr():
                s.copy_(a)
        g.fwd.replay()
        outs = tuple(o.clone() for o in g.static_out)
        ctx.mark_non_differentiable(*[o for i, o in enumerate(outs) if i not in g.req_idx])
        return outs

    @staticmethod
    def backward(ctx: Any, *gouts: torch.Tensor | None) -> tuple[Any, ...]:
        g: GraphedForward = ctx.g
        if g._pending is None or g._pending() is not ctx:
            raise RuntimeError(
                "convdoctor graphs: this backward belongs to a forward replay whose saved "
                "activations were overwritten (backward called twice with retain_graph=True "
                "after another replay); run the model with optimize(..., graphs=False)")
        g._pending = None
        for s, i in zip(g.static_gout, g.req_idx, strict=True):
            go = gouts[i]
            if go is None:
                s.zero_()
            elif s.data_ptr() != go.data_ptr():
                s.copy_(go)
        assert g.bwd is not None  # a training capture always has its backward graph
        g.bwd.replay()
        grads = iter(None if t is None else t.clone() for t in g.static_grads)
        out: list[Any] = [None]  # g
        for s in g.static_in:
            out.append(next(grads) if s.requires_grad else None)
        out += [next(grads) for _ in g.params]
        return tuple(out)


def install(model: torch.nn.Module, args: tuple[torch.Tensor, ...], train: bool
            ) -> GraphedForward:
    """Capture graphs of `model` for `args` and make them its forward; raises when not capturable
    (the model is left as it was)."""
    had = "forward" in model.__dict__
    orig = model.__dict__.get("forward", model.forward)
    g = GraphedForward(model, orig, args, train)
    g.had_forward = had  # type: ignore[attr-defined]
    model.forward = g  # type: ignore[method-assign]
    return g


def attach(model: torch.nn.Module, g: GraphedForward) -> None:
    """Make an already captured `g` (detached by `uninstall`) the model's forward again."""
    model.forward = g  # type: ignore[method-assign]


def uninstall(model: torch.nn.Module) -> bool:
    g = model.__dict__.get("forward")
    if not isinstance(g, GraphedForward):
        return False
    if getattr(g, "had_forward", False):
        model.forward = g.orig_forward  # type: ignore[method-assign]
    else:
        del model.__dict__["forward"]
    return True


def installed(model: torch.nn.Module) -> GraphedForward | None:
    g = model.__dict__.get("forward")
    return g if isinstance(g, GraphedForward) else None
