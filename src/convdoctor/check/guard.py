"""validate(model): a runtime guard that checks each convolution's real inputs before dispatch.

Forward pre-hooks on every Conv/ConvTranspose module build a ConvCall from the real input and the
module's weight (shapes, dtypes, devices, memory format: no data is read) and run the error rules of
the device the tensors are on. A bad call raises `ConvConfigError` naming the layer, the problem and
the fix, instead of a cuDNN status code deep inside the library. Verdicts are cached per module and
input signature, so steady-state cost is one dict lookup per convolution. Functional convolutions
(F.conv2d called directly) are checked with `validate(model, functional=True)`.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from ..errors import ConvdoctorError
from ..report import Finding, render_findings
from .checker import check_call, rules
from .trace import ConvCall, dtype_name, memory_format_of

_ATTR = "_convdoctor_validate_handles"


class ConvConfigError(ConvdoctorError, RuntimeError):
    """A convolution PyTorch/cuDNN would reject: `.layer`, `.findings` (each with id, message, fix)."""

    def __init__(self, layer: str, findings: list[Finding]) -> None:
        self.layer = layer
        self.findings = findings
        first = findings[0]
        super().__init__(f"convolution {layer!r}: {first.id}: {first.title}\n"
                         + render_findings(findings))


def _call_for(name: str, mod: Any, x: Any) -> ConvCall:
    import torch

    w = mod.weight
    nsp = w.dim() - 2
    padding_mode = getattr(mod, "padding_mode", "zeros")
    transposed = bool(getattr(mod, "transposed", False))
    xs = tuple(int(s) for s in x.shape)
    unbatched = len(xs) == w.dim() - 1
    if unbatched:
        xs = (1, *xs)
    pad_attr = mod.padding
    padding_str = pad_attr if isinstance(pad_attr, str) else None
    padding = tuple(pad_attr) if not isinstance(pad_attr, str) else (0,) * nsp
    if padding_str == "same":
        total = [d * (k - 1) for d, k in zip(mod.dilation, w.shape[2:], strict=False)]
        padding = tuple(t // 2 for t in total)
        xs = xs[:2] + tuple(s + t % 2 for s, t in zip(xs[2:], total, strict=False))
    if padding_mode != "zeros" and padding_str is None and len(xs) == w.dim():
        xs = xs[:2] + tuple(s + 2 * p for s, p in zip(xs[2:], padding, strict=False))
        padding = (0,) * nsp
    b = mod.bias
    from .shapes import output_shape

    y: tuple[int, ...] = ()
    if len(xs) == w.dim():
        y = output_shape(xs, tuple(w.shape), stride=tuple(mod.stride), padding=padding,
                         dilation=tuple(mod.dilation), groups=mod.groups, transposed=transposed,
                         output_padding=tuple(mod.output_padding))
    return ConvCall(
        layer=name, op=("conv_transpose" if transposed else "conv") + f"{nsp}d", transposed=transposed,
        x_shape=xs, w_shape=tuple(int(s) for s in w.shape), y_shape=y, bias=b is not None,
        stride=tuple(mod.stride), padding=padding, dilation=tuple(mod.dilation),
        output_padding=tuple(mod.output_padding), groups=int(mod.groups), padding_mode=padding_mode,
        dtype=dtype_name(x.dtype), weight_dtype=dtype_name(w.dtype),
        memory_format=memory_format_of(x, w) if isinstance(x, torch.Tensor) else "contiguous",
        padding_str=padding_str, unbatched=unbatched,
        bias_shape=None if b is None else tuple(int(s) for s in b.shape),
        bias_dtype=None if b is None else dtype_name(b.dtype),
        x_device=str(x.device), w_device=str(w.device))


def _pad_mode_findings(name: str, mod: Any, x: Any) -> list[Finding]:
    """F.pad limits for non-zero padding modes (reflect: pad < size; circular: pad <= size)."""
    mode = getattr(mod, "padding_mode", "zeros")
    if mode not in ("reflect", "circular") or isinstance(mod.padding, str):
        return []
    spatial = tuple(int(s) for s in x.shape[-len(mod.padding):])
    bad = [(s, p) for s, p in zip(spatial, mod.padding, strict=False)
           if (p >= s if mode == "reflect" else p > s) and p > 0]
    if not bad:
        return []
    need = [p + 1 if mode == "reflect" else p for p in mod.padding]
    return [Finding("input-too-small", "error", f"{mode} padding {tuple(mod.padding)} too large for input "
                    f"{'x'.join(map(str, spatial))}",
                    f"padding_mode={mode!r} needs each padded spatial size "
                    f"{'>' if mode == 'reflect' else '>='} the padding.",
                    f"feed at least {'x'.join(map(str, need))} or use padding_mode='zeros'/'replicate'",
                    layer=name, data={"x_shape": list(x.shape), "padding": list(mod.padding)})]


def _functional_guard(model: Any, performance: bool) -> list[Any]:
    """Hooks that check direct F.conv* calls too: a TorchFunctionMode is active during the forward."""
    import torch
    from torch.overrides import TorchFunctionMode

    from .trace import _conv_funcs, call_from_args

    funcs = _conv_funcs()
    names = {id(m): n for n, m in model.named_modules()}
    stack: list[Any] = []
    cache: dict[tuple[Any, ...], list[Finding] | None] = {}

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            op = funcs.get(func)
            top = stack[-1] if stack else None
            if op is not None and not isinstance(top, torch.nn.modules.conv._ConvNd) and len(args) >= 2:
                x, w = args[0], args[1]
                key = (op, id(top), tuple(x.shape), x.dtype, x.device, tuple(w.shape), w.dtype, w.device,
                       repr(args[2:]), repr(sorted(kwargs.items(), key=lambda kv: kv[0]))[:500]
                       if kwargs else "")
                hit: list[Finding] | None | Literal[False] = cache.get(key, False)
                if hit is False:
                    parent = names.get(id(top), "") if top is not None else ""
                    layer = f"{parent}.<functional:{op}>" if parent else f"<functional:{op}>"
                    call = call_from_args(op, args, kwargs, layer=layer)
                    device = "cuda" if x.device.type == "cuda" else "cpu"
                    errs = [f for f in check_call(call, device=device, performance=performance)
                            if f.severity == "error"]
                    hit = errs or None
                    cache[key] = hit
                if hit:
                    raise ConvConfigError(hit[0].layer or op, hit)
            return func(*args, **kwargs)

    mode = _Mode()
    active: list[Any] = []

    def push(m: Any, _a: Any) -> None:
        stack.append(m)

    def pop(m: Any, _a: Any, _o: Any) -> None:
        if stack and stack[-1] is m:
            stack.pop()

    def enter(_m: Any, _a: Any) -> None:
        stack.clear()
        mode.__enter__()
        active.append(mode)

    def leave(_m: Any, _a: Any, _o: Any) -> None:
        if active:
            active.pop()
            mode.__exit__(None, None, None)
        stack.clear()

    handles = [model.register_forward_pre_hook(enter)]
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(push))
        handles.append(m.register_forward_hook(pop, always_call=True))
    handles.append(model.register_forward_hook(leave, always_call=True))
    return handles


def validate(model: Any, *, performance: bool = False, max_shapes: int | None = None,
             functional: bool = False) -> Any:
    """Install the guard on every convolution module of `model` (in place) and return the model.

    `performance=True` also emits the warnings (channels_last, tensor-core alignment, ...) once per
    layer and shape as Python warnings. With torch.backends.cudnn.benchmark on, a warning is emitted
    when one layer sees more than `max_shapes` distinct input shapes (each costs a new benchmark).
    `functional=True` also checks direct F.conv*/torch.conv* calls inside the forward (through a
    TorchFunctionMode active during the forward: every op then pays a Python dispatch, so it is off by
    default). `unvalidate(model)` removes the guard.
    """
    import torch

    unvalidate(model)
    limit = max_shapes or rules()["benchmark"]["distinct_shapes_warn"]
    per_ms = rules()["benchmark"]["first_call_ms_per_shape"]
    handles = []
    cudnn_version: list[int | None] = []

    def make_hook(name: str) -> Any:
        cache: dict[tuple[Any, ...], list[Finding] | None] = {}

        def hook(mod: Any, args: tuple[Any, ...]) -> None:
            if not args or not isinstance(args[0], torch.Tensor):
                return
            x = args[0]
            w = mod.weight
            key = (tuple(x.shape), x.dtype, x.device, w.dtype, w.device, tuple(w.shape),
                   x.is_contiguous(), None if mod.bias is None else mod.bias.dtype)
            hit: list[Finding] | None | Literal[False] = cache.get(key, False)
            if hit is False:
                device = "cuda" if x.device.type == "cuda" else "cpu"
                if device == "cuda" and not cudnn_version:
                    try:
                        cudnn_version.append(torch.backends.cudnn.version())
                    except Exception:  # noqa: BLE001
                        cudnn_version.append(None)
                call = _call_for(name, mod, x)
                fs = _pad_mode_findings(name, mod, x) + check_call(call, device=device, performance=performance,
                                cudnn_version=cudnn_version[0] if cudnn_version else None)
                errors = [f for f in fs if f.severity == "error"]
                hit = errors or None
                cache[key] = hit
                for f in fs:
                    if f.severity == "warning":
                        warnings.warn(f"convdoctor: {name}: {f.id}: {f.title}. fix: {f.fix}", stacklevel=3)
                if (device == "cuda" and torch.backends.cudnn.benchmark
                        and sum(1 for k in cache if k[2].type == "cuda") == limit + 1):
                    warnings.warn(
                        f"convdoctor: {name} has seen {limit + 1} distinct input shapes with "
                        f"torch.backends.cudnn.benchmark=True; each new shape is benchmarked again "
                        f"(~{per_ms} ms per shape and layer measured on an H100). Pad or bucket input "
                        "sizes, or turn benchmark off for dynamic shapes.", stacklevel=3)
            if hit:
                raise ConvConfigError(name, hit)

        return hook

    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.modules.conv._ConvNd):
            handles.append(mod.register_forward_pre_hook(make_hook(name or type(mod).__name__)))
    if functional:
        handles.extend(_functional_guard(model, performance))
    object.__setattr__(model, _ATTR, handles)
    return model


def unvalidate(model: Any) -> Any:
    for h in getattr(model, _ATTR, []) or []:
        h.remove()
    if hasattr(model, _ATTR):
        object.__delattr__(model, _ATTR)
    return model
