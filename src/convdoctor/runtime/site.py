"""One routed convolution module: its forward is swapped for one that runs the tuned executors.

The module keeps its class, its Parameters and its buffers (so `state_dict` keys and tensors are
untouched and load into an unmodified model); only an instance attribute `forward` and a
`_convdoctor_site` are added, and `uninstall` removes exactly those.

Per call: explicit pre-padding (non-zero padding modes, asymmetric 'same') exactly as PyTorch does,
autocast casting exactly as PyTorch's autocast does for convolutions, then a dictionary lookup on
(shape, strides, dtype) of the input gives the `Route`: one chain of executors per direction
(fprop, dgrad, wgrad). With gradients needed the call goes through `_RoutedConv` (a custom autograd
Function: fprop forward, dgrad and wgrad backward); without, straight to the fprop executor. A shape
never seen gets the site's default route (PyTorch's own path, then the fallback tail), or is tuned on
first sight when the optimizer installed a tuner callback. Under torch.compile the stock forward runs
(the compiler owns engine choice inside a graph; no graph break, no crash).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch.nn.modules.conv import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    _ConvNd,
)

if TYPE_CHECKING:
    from torch.nn.modules.conv import _ConvTransposeNd

from ..engines.base import ConvArgs
from ..engines.flag_exec import default_exec, fallback_tail, flag_exec
from . import compiled as _compiled
from . import fallback as _fb

# Only modules whose forward is the stock one are routed: a subclass that overrides forward
# (weight standardization, custom padding) keeps its own semantics untouched.
_STOCK_FORWARDS = {cls.forward for cls in (Conv1d, Conv2d, Conv3d, ConvTranspose1d,
                                            ConvTranspose2d, ConvTranspose3d)}

try:
    _is_compiling: Callable[[], bool] = torch.compiler.is_compiling
except AttributeError:  # pragma: no cover - old torch
    def _is_compiling() -> bool:
        return False

DIRS = ("fprop", "dgrad", "wgrad")


def routable(module: torch.nn.Module) -> bool:
    if not isinstance(module, _ConvNd):
        return False
    if type(module).forward not in _STOCK_FORWARDS:
        return False
    w = getattr(module, "weight", None)
    if w is None or isinstance(w, torch.nn.parameter.UninitializedParameter):
        return False
    return True


class Route:
    """Executor chains for one input signature; `pos` is where each direction currently is."""

    __slots__ = ("chains", "pos", "source", "info")

    def __init__(self, chains: dict[str, list[Any]], source: str = "default",
                 info: dict[str, Any] | None = None) -> None:
        self.chains = [chains["fprop"], chains["dgrad"], chains["wgrad"]]
        self.pos = [0, 0, 0]
        self.source = source
        self.info = info or {}

    def current(self, d: int) -> Any:
        return self.chains[d][self.pos[d]]

    def native_now(self) -> bool:
        """Every direction is on PyTorch's own path as configured right now: then the forward
        records PyTorch's native autograd node (no custom Function, no per-call backward cost);
        the forward keeps its fallback chain, the backward is PyTorch's."""
        for d in (0, 1, 2):
            ex = self.chains[d][self.pos[d]]
            noop = getattr(ex, "is_noop", None)
            if noop is None or not noop():
                return False
        return True

    def keys(self) -> dict[str, str]:
        return {DIRS[i]: self.current(i).key for i in range(3)}


def build_chain(tuned: list[Any], device_type: str) -> list[Any]:
    """Tuned executors (best first), then PyTorch as configured, then the fallback tail."""
    chain: list[Any] = []
    seen: set[str] = set()
    for ex in [*tuned, default_exec(), *(flag_exec(k) for k in fallback_tail(device_type))]:
        if ex is None or ex.key in seen:
            continue
        seen.add(ex.key)
        chain.append(ex)
    return chain


class Site:
    """The routing state of one conv module (shared, not copied, by deepcopy of the model)."""

    def __init__(self, name: str, module: _ConvNd, device_type: str) -> None:
        self.name = name
        self.device_type = device_type
        self.nd = len(module.kernel_size)
        self.transposed = bool(module.transposed)
        self.cls_forward = type(module).forward
        k, s, d = module.kernel_size, module.stride, module.dilation
        pad = module.padding
        self.pre_pad: tuple[int, ...] | None = None
        self.pad_mode = "constant"
        if module.padding_mode != "zeros":
            self.pre_pad = tuple(module._reversed_padding_repeated_twice)
            self.pad_mode = module.padding_mode
            inner = (0,) * self.nd
        elif pad == "valid":
            inner = (0,) * self.nd
        elif pad == "same":
            totals = [dl * (kk - 1) for dl, kk in zip(d, k, strict=True)]
            left = [t // 2 for t in totals]
            right = [t - t // 2 for t in totals]
            if left == right:
                inner = tuple(left)
            else:
                # F.pad order: last dim first, (left, right) per dim.
                pp: list[int] = []
                for lo, hi in zip(reversed(left), reversed(right), strict=True):
                    pp += [lo, hi]
                self.pre_pad = tuple(pp)
                inner = (0,) * self.nd
        else:
            inner = tuple(pad)  # type: ignore[arg-type]
        self.args = ConvArgs(stride=tuple(s), padding=tuple(inner), dilation=tuple(d),
                             transposed=self.transposed,
                             output_padding=tuple(module.output_padding),
                             groups=int(module.groups))
        self.default_route = Route({dd: build_chain([], device_type) for dd in DIRS})
        self.routes: dict[tuple[Any, ...], Route] = {}
        # Routes for CUDA graph capture: ranked without the host cost of a plan call, which a
        # replay does not pay (optimize swaps them in to capture, then keeps them alive: the
        # graph uses their plans and workspaces). Empty when they equal `routes`.
        self.graph_routes: dict[tuple[Any, ...], Route] = {}
        self.enabled = True
        self.recording: list[dict[str, Any]] | None = None
        self.on_new_shape: Callable[[Site, tuple[Any, ...], dict[str, Any]], Route | None] | None
        self.on_new_shape = None
        self.id = _compiled.register_site(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Site:
        return self

    def __reduce__(self) -> Any:
        raise TypeError("an optimized model cannot be pickled as a whole: save its state_dict(), "
                        "or call convdoctor.restore(model) first")

    # ------------------------------------------------------------------ forward
    def forward(self, m: _ConvNd, x: torch.Tensor, output_size: Any = None) -> torch.Tensor:
        compiling = _is_compiling()
        if not self.enabled or (compiling and (not _compiled.available() or (
                self.transposed and output_size is not None))):
            if self.transposed:
                return self.cls_forward(m, x, output_size)
            return self.cls_forward(m, x)
        w = m.weight
        b = m.bias
        if self.pre_pad is not None:
            x = F.pad(x, self.pre_pad, mode=self.pad_mode)
        args = self.args
        if self.transposed:
            if m.padding_mode != "zeros":
                return self.cls_forward(m, x, output_size)  # raises PyTorch's own error
            if output_size is not None:
                # casts: self.transposed, so m is a ConvTranspose module (it has _output_padding),
                # whose padding is always a tuple of ints (never a string such as "same")
                op = cast("_ConvTransposeNd", m)._output_padding(
                    x, output_size, list(m.stride), list(cast("tuple[int, ...]", m.padding)),
                    list(m.kernel_size), self.nd, list(m.dilation))
                args = replace(args, output_padding=tuple(op))
        unbatched = x.dim() == self.nd + 1
        if unbatched:
            x = x.unsqueeze(0)
        dev = self.device_type
        if torch.is_autocast_enabled(dev):
            y = self._autocast_call(m, x, w, b, args, dev, compiling)
        elif compiling:  # an opaque custom op: the route is looked up when the graph runs
            y = torch.ops.convdoctor.routed_conv(x, w, b, self.id)
        else:
            y = self._call(x, w, b, args)
        return y.squeeze(0) if unbatched else y

    def _autocast_call(self, m: _ConvNd, x: torch.Tensor, w: torch.Tensor,
                       b: torch.Tensor | None, args: ConvArgs, dev: str,
                       compiling: bool = False) -> torch.Tensor:
        dt = torch.get_autocast_dtype(dev)

        def cast(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None or not t.is_floating_point() or t.dtype == torch.float64 or t.dtype == dt:
                return t
            return t.to(dt)

        with torch.autocast(dev, enabled=False):
            if compiling:
                return torch.ops.convdoctor.routed_conv(  # type: ignore[no-any-return]
                    cast(x), cast(w), cast(b), self.id)
            return self._call(cast(x), cast(w), cast(b), args)  # type: ignore[arg-type]

    def _call(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              args: ConvArgs) -> torch.Tensor:
        key = (x.shape, x.stride(), x.dtype)
        route = self.routes.get(key)
        if route is None:
            route = self._new_shape(key, x, w)
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or w.requires_grad or (b is not None and b.requires_grad))
        if needs_grad and not route.native_now():
            y = _RoutedConv.apply(x, w, b, self, route, args)
        else:
            y = self.run_fprop(route, x, w, b, args)
        if self.recording is not None:
            self.recording.append(_record(key, x, w, b, y, args, needs_grad))
        return y  # type: ignore[no-any-return]

    def route_for(self, x: torch.Tensor, w: torch.Tensor) -> Route:
        key = (x.shape, x.stride(), x.dtype)
        route = self.routes.get(key)
        return route if route is not None else self._new_shape(key, x, w)

    def _new_shape(self, key: tuple[Any, ...], x: torch.Tensor, w: torch.Tensor) -> Route:
        route: Route | None = None
        if self.on_new_shape is not None and self.recording is None:
            try:
                route = self.on_new_shape(self, key, _facts(x, w, self.args))
            except Exception:  # tuning on first sight must never fail the step
                route = None
        if route is None:
            route = self.default_route
        if self.recording is None:
            self.routes[key] = route
        return route

    # ------------------------------------------------------------------ executors with fallback
    def _run(self, route: Route, d: int, fn: Callable[[Any], Any]) -> Any:
        chain = route.chains[d]
        i = route.pos[d]
        first_exc: BaseException | None = None
        failed_key = ""
        hook = _fb.get_fault_hook()
        while True:
            ex = chain[i]
            try:
                if hook is not None:
                    hook(self.name, DIRS[d], ex.key)
                out = fn(ex)
            except Exception as exc:  # noqa: BLE001 - classified below; never swallowed silently
                kind = _fb.classify(exc)
                if kind == "unrecoverable":
                    diag = _fb.diagnose(exc)
                    raise _fb.UnrecoverableConvError(
                        f"convdoctor: {DIRS[d]} of {self.name} hit an unrecoverable CUDA error on "
                        f"{ex.key}: {exc}" + (f"\n  diagnosis: {diag}" if diag else "")
                        + "\n  The CUDA context is unusable after this error: restart the process."
                    ) from exc
                default_i = _index_of(chain, "torch:default")
                if kind == "other":
                    if i >= default_i:
                        raise  # PyTorch's own path raises it too: the caller's error
                    nxt = default_i
                else:
                    nxt = i + 1
                    if nxt >= len(chain):
                        raise
                if first_exc is None:
                    first_exc, failed_key = exc, ex.key
                i = nxt
                continue
            if first_exc is not None:
                route.pos[d] = i
                _fb.warn_once(self.name, DIRS[d], failed_key, chain[i].key, first_exc)
            return out

    def run_fprop(self, route: Route, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                  args: ConvArgs) -> torch.Tensor:
        if _fb._fault_hook is None:  # fast path: no closure, no hook; failures take the slow path
            try:
                return route.chains[0][route.pos[0]].fprop(x, w, b, args)  # type: ignore[no-any-return]
            except Exception:  # noqa: BLE001 - retried (and classified) by _run below
                pass
        return self._run(route, 0, lambda ex: ex.fprop(x, w, b, args))  # type: ignore[no-any-return]

    def run_backward(self, route: Route, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                     bias_sizes: list[int] | None, args: ConvArgs,
                     need: tuple[bool, bool, bool]) -> tuple[Any, Any, Any]:
        need_x, need_w, need_b = need
        if need_x and (need_w or need_b) and route.current(1) is route.current(2):
            if _fb._fault_hook is None:
                try:
                    return route.chains[1][route.pos[1]].backward(  # type: ignore[no-any-return]
                        gy, x, w, bias_sizes, args, need)
                except Exception:  # noqa: BLE001 - retried (and classified) by _run below
                    pass
            return self._run(route, 1, lambda ex: ex.backward(gy, x, w, bias_sizes, args, need))
        gx = gw = gb = None
        if need_x:
            gx = self._run(route, 1, lambda ex: ex.backward(gy, x, w, None, args,
                                                            (True, False, False)))[0]
        if need_w or need_b:
            _, gw, gb = self._run(route, 2, lambda ex: ex.backward(
                gy, x, w, bias_sizes, args, (False, need_w, need_b)))
        return gx, gw, gb


def _index_of(chain: list[Any], key: str) -> int:
    for i, ex in enumerate(chain):
        if ex.key == key:
            return i
    return len(chain)


class _RoutedConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, site: Site,
                route: Route, args: ConvArgs) -> torch.Tensor:
        y = site.run_fprop(route, x, w, b, args)
        ctx.save_for_backward(x, w)
        ctx.site = site
        ctx.route = route
        ctx.args = args
        ctx.bias_sizes = None if b is None else [int(b.shape[0])]
        return y

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> tuple[Any, ...]:
        x, w = ctx.saved_tensors
        need = (bool(ctx.needs_input_grad[0]), bool(ctx.needs_input_grad[1]),
                bool(ctx.needs_input_grad[2]))
        gx, gw, gb = ctx.site.run_backward(ctx.route, gy, x, w, ctx.bias_sizes, ctx.args, need)
        return gx, gw, gb, None, None, None


def _layout(t: torch.Tensor) -> str:
    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(
            memory_format=torch.channels_last):
        return "channels_last"
    if t.dim() == 5 and not t.is_contiguous() and t.is_contiguous(
            memory_format=torch.channels_last_3d):
        return "channels_last_3d"
    return "contiguous"


def _facts(x: torch.Tensor, w: torch.Tensor, args: ConvArgs) -> dict[str, Any]:
    return {"x_shape": tuple(x.shape), "w_shape": tuple(w.shape), "dtype": str(x.dtype),
            "weight_dtype": str(w.dtype), "memory_format": _layout(x), "stride": args.stride,
            "padding": args.padding, "dilation": args.dilation, "groups": args.groups,
            "transposed": args.transposed, "output_padding": args.output_padding,
            "device": x.device.type}


def _record(key: tuple[Any, ...], x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
            y: torch.Tensor, args: ConvArgs, needs_grad: bool) -> dict[str, Any]:
    f = _facts(x, w, args)
    f.update(key=key, y_shape=tuple(y.shape), bias=b is not None,
             x_requires_grad=bool(x.requires_grad), w_requires_grad=bool(w.requires_grad),
             grad=needs_grad)
    return f


# ---------------------------------------------------------------------- install / uninstall
_SITE_ATTR = "_convdoctor_site"
_PREV_ATTR = "_convdoctor_prev_forward"
_MISSING = object()


def _routed_forward(self: _ConvNd, input: torch.Tensor, output_size: Any = None) -> torch.Tensor:
    site: Site = self.__dict__[_SITE_ATTR]
    return site.forward(self, input, output_size)


def install(module: _ConvNd, name: str, device_type: str) -> Site:
    site = Site(name, module, device_type)
    prev = module.__dict__.get("forward", _MISSING)
    object.__setattr__(module, _PREV_ATTR, prev)
    object.__setattr__(module, _SITE_ATTR, site)
    object.__setattr__(module, "forward", types.MethodType(_routed_forward, module))
    return site


def site_of(module: torch.nn.Module) -> Site | None:
    return module.__dict__.get(_SITE_ATTR)


def uninstall(module: torch.nn.Module) -> bool:
    d = module.__dict__
    if _SITE_ATTR not in d:
        return False
    prev = d.pop(_PREV_ATTR, _MISSING)
    d.pop("forward", None)
    if prev is not _MISSING:
        d["forward"] = prev
    d.pop(_SITE_ATTR, None)
    return True
