"""Find every convolution a model runs, with the shapes it sees, without a GPU and without memory.

The model is deep-copied onto the meta device (its parameters and buffers are replaced by meta
tensors during the copy, so no weight is duplicated and the user's model is never touched), then run
on meta inputs under a `TorchFunctionMode` that records each call to conv1d/2d/3d,
conv_transpose1d/2d/3d and torch.convolution. Forward hooks keep the module path (`layer3.1.conv2`)
of the module running. A ResNet-50 at batch 256 traces in milliseconds: meta tensors carry shapes,
never data.

If an operation fails during the trace (a convolution whose input is too small, a pooling layer
whose output would be empty, a channel mismatch), the trace stops there and `TraceResult.failure`
says where and why; the convolutions seen so far are kept.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import UsageError
from .shapes import expand, output_shape

CONV_OPS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


@dataclass(frozen=True)
class ConvCall:
    """One convolution as the convolution op sees it."""

    layer: str
    op: str
    transposed: bool
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    bias: bool
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    output_padding: tuple[int, ...]
    groups: int
    padding_mode: str
    dtype: str
    weight_dtype: str
    memory_format: str
    # Extra facts (defaults keep the dataclass easy to build by hand).
    padding_str: str | None = None  # "same" / "valid" when the padding was given as a string
    unbatched: bool = False  # the input had no batch dim (x_shape shows it with N=1)
    bias_shape: tuple[int, ...] | None = None
    bias_dtype: str | None = None
    x_device: str = "meta"
    w_device: str = "meta"

    @property
    def spatial_dims(self) -> int:
        return len(self.w_shape) - 2

    def key(self) -> tuple[Any, ...]:
        """Everything that identifies the convolution problem (the layer name excluded)."""
        return (self.op, self.x_shape, self.w_shape, self.bias, self.stride, self.padding,
                self.dilation, self.output_padding, self.groups, self.dtype, self.weight_dtype,
                self.memory_format)

    def to_dict(self) -> dict[str, Any]:
        from ..report import to_jsonable

        return to_jsonable(self)


@dataclass(frozen=True)
class TraceFailure:
    layer: str
    op: str
    message: str
    exc_type: str


@dataclass
class TraceResult:
    calls: list[ConvCall] = field(default_factory=list)
    failure: TraceFailure | None = None
    input_shapes: list[tuple[int, ...]] = field(default_factory=list)


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: Any) -> Any:
    import torch

    if isinstance(name, torch.dtype):
        return name
    aliases = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
               "bf16": "bfloat16", "fp64": "float64", "double": "float64", "tf32": "float32"}
    key = aliases.get(str(name).lower(), str(name).lower()).removeprefix("torch.")
    dt = getattr(torch, key, None)
    if not isinstance(dt, torch.dtype):
        raise UsageError(f"unknown dtype {name!r}; use float32, float16, bfloat16 or float64")
    return dt


def memory_format_of(x: Any, w: Any) -> str:
    """PyTorch's choice (cudnn_conv_suggest_memory_format): channels_last if input or weight is."""
    import torch

    for t in (x, w):
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
            return "channels_last"
        if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d) and not t.is_contiguous():
            return "channels_last"
    return "contiguous"


# Argument order of each functional convolution (after input, weight, bias).
_ARGS_CONV = ("stride", "padding", "dilation", "groups")
_ARGS_CONV_T = ("stride", "padding", "output_padding", "groups", "dilation")
_ARGS_CONVOLUTION = ("stride", "padding", "dilation", "transposed", "output_padding", "groups")


def _conv_funcs() -> dict[Any, str]:
    import torch

    table: dict[Any, str] = {}
    for op in CONV_OPS:
        table[getattr(torch, op)] = op
        table[getattr(torch.nn.functional, op)] = op
    table[torch.convolution] = "convolution"
    return table


def _bind(op: str, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = ("input", "weight", "bias") + (
        _ARGS_CONVOLUTION if op == "convolution" else _ARGS_CONV_T if "transpose" in op else _ARGS_CONV)
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    return bound


def call_from_args(op: str, args: Sequence[Any], kwargs: dict[str, Any], *, layer: str,
                   padding_mode: str = "zeros") -> ConvCall:
    """A ConvCall from the arguments of a functional convolution (tensors real, fake or meta)."""
    b = _bind(op, args, kwargs)
    x, w, bias = b["input"], b["weight"], b.get("bias")
    transposed = bool(b.get("transposed", False)) if op == "convolution" else "transpose" in op
    nsp = max(w.dim() - 2, 1)
    if op == "convolution":
        op = ("conv_transpose" if transposed else "conv") + f"{nsp}d"
    x_shape = tuple(int(s) for s in x.shape)
    unbatched = len(x_shape) == w.dim() - 1
    if unbatched:
        x_shape = (1, *x_shape)
    stride = expand(b.get("stride", 1), nsp, "stride")
    dilation = expand(b.get("dilation", 1), nsp, "dilation")
    output_padding = expand(b.get("output_padding", 0), nsp, "output_padding")
    groups = int(b.get("groups", 1))
    pad_arg = b.get("padding", 0)
    padding_str = None
    if isinstance(pad_arg, str):
        padding_str = pad_arg
        ks = tuple(int(k) for k in w.shape[2:])
        if pad_arg == "same" and len(x_shape) == len(ks) + 2:
            # ATen (_convolution_mode): symmetric part as padding, the odd extra on the right of the input.
            total = [d * (k - 1) for d, k in zip(dilation, ks, strict=True)]
            padding = tuple(t // 2 for t in total)
            x_shape = x_shape[:2] + tuple(s + (t % 2) for s, t in zip(x_shape[2:], total, strict=True))
        else:
            padding = (0,) * nsp
    else:
        padding = expand(pad_arg, nsp, "padding")
    w_shape = tuple(int(s) for s in w.shape)
    y_shape: tuple[int, ...] = ()
    if len(x_shape) == len(w_shape) and len(w_shape) >= 3:
        y_shape = output_shape(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, transposed=transposed, output_padding=output_padding)
    return ConvCall(
        layer=layer, op=op, transposed=transposed, x_shape=x_shape, w_shape=w_shape, y_shape=y_shape,
        bias=bias is not None, stride=stride, padding=padding, dilation=dilation,
        output_padding=output_padding, groups=groups, padding_mode=padding_mode,
        dtype=dtype_name(x.dtype), weight_dtype=dtype_name(w.dtype),
        memory_format=memory_format_of(x, w), padding_str=padding_str, unbatched=unbatched,
        bias_shape=None if bias is None else tuple(int(s) for s in bias.shape),
        bias_dtype=None if bias is None else dtype_name(bias.dtype),
        x_device=str(x.device), w_device=str(w.device),
    )


class _Recorder:
    """Module-path bookkeeping plus the TorchFunctionMode that records convolutions."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.stack: list[Any] = []
        self.calls: list[ConvCall] = []
        self.failure: TraceFailure | None = None
        self.functional_count: dict[str, int] = {}
        self.funcs = _conv_funcs()
        self.weight_ids: dict[str, int] = {}

    def current(self) -> tuple[str, Any]:
        if not self.stack:
            return "", None
        mod = self.stack[-1]
        return self.names.get(id(mod), type(mod).__name__), mod

    def layer_for(self, op: str) -> tuple[str, str]:
        import torch

        path, mod = self.current()
        if isinstance(mod, torch.nn.modules.conv._ConvNd):
            return path or "<model>", getattr(mod, "padding_mode", "zeros")
        k = self.functional_count.get(path, 0)
        self.functional_count[path] = k + 1
        name = f"<functional:{op}#{k}>"
        return (f"{path}.{name}" if path else name), "zeros"

    def mode(self) -> Any:
        import torch
        from torch.overrides import TorchFunctionMode

        rec = self

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                op = rec.funcs.get(func)
                if op is not None:
                    call = None
                    try:
                        layer, pmode = rec.layer_for(op)
                        call = call_from_args(op, args, kwargs, layer=layer, padding_mode=pmode)
                        w_arg = args[1] if len(args) > 1 else kwargs.get("weight")
                        rec.weight_ids[layer] = id(w_arg)
                    except Exception as exc:  # noqa: BLE001 - arguments the op will reject anyway
                        if rec.failure is None:
                            rec.failure = TraceFailure(rec.current()[0], op, str(exc), type(exc).__name__)
                    try:
                        out = func(*args, **kwargs)
                    except Exception as exc:
                        if call is not None:
                            rec.calls.append(call)
                        if rec.failure is None:
                            rec.failure = TraceFailure(call.layer if call else rec.current()[0], op,
                                                       _first_line(exc), type(exc).__name__)
                        raise
                    if call is not None:
                        if isinstance(out, torch.Tensor) and call.memory_format == "channels_last":
                            # Meta kernels return contiguous outputs; CUDA/CPU convs keep channels_last.
                            fmt = torch.channels_last if out.dim() == 4 else torch.channels_last_3d
                            if out.dim() in (4, 5):
                                out = out.contiguous(memory_format=fmt)
                        if isinstance(out, torch.Tensor):
                            y = tuple(int(s) for s in out.shape)
                            if call.unbatched:
                                y = (1, *y)
                            call = replace(call, y_shape=y)
                        rec.calls.append(call)
                    return out
                try:
                    return func(*args, **kwargs)
                except Exception as exc:
                    if rec.failure is None:
                        name = getattr(func, "__name__", str(func))
                        rec.failure = TraceFailure(rec.current()[0], name, _first_line(exc),
                                                   type(exc).__name__)
                    raise

        return _Mode()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _flat(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)):
        return [v for o in obj for v in _flat(o)]
    if isinstance(obj, dict):
        return [v for o in obj.values() for v in _flat(o)]
    return [obj]


def meta_copy(model: Any) -> Any:
    """A deep copy of `model` whose parameters and buffers are meta tensors (no data copied)."""
    import torch
    from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

    memo: dict[int, Any] = {}
    for p in model.parameters(recurse=True):
        # requires_grad off: shapes do not depend on it, and it lets us trace integer dtypes
        if isinstance(p, UninitializedParameter):   # a lazy module's: shaped by the first forward
            memo[id(p)] = UninitializedParameter(requires_grad=False, device="meta", dtype=p.dtype)
            continue
        memo[id(p)] = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device="meta"),
                                         requires_grad=False)
    for b in model.buffers(recurse=True):
        if isinstance(b, UninitializedBuffer):
            memo[id(b)] = UninitializedBuffer(requires_grad=False, device="meta", dtype=b.dtype)
            continue
        memo[id(b)] = torch.empty(b.shape, dtype=b.dtype, device="meta")
    try:
        return copy.deepcopy(model, memo)
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"cannot copy the model for tracing ({type(exc).__name__}: {exc})",
                         hint="convdoctor traces a deep copy so your model is never modified; "
                              "make the model deep-copyable (no open files or locks as attributes)") from exc


def _to_meta_inputs(example_inputs: Any, dtype: Any, memory_format: Any) -> Any:
    import torch

    def conv(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            dt = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
            m = torch.empty(t.shape, dtype=dt, device="meta")
            if memory_format is not None and m.dim() in (4, 5):
                m = m.contiguous(memory_format=memory_format[m.dim()])
            return m
        if isinstance(t, (list, tuple)):
            return type(t)(conv(v) for v in t)
        if isinstance(t, dict):
            return {k: conv(v) for k, v in t.items()}
        return t

    return conv(example_inputs)


def trace(model: Any, example_inputs: Any = None, *, input_shape: Sequence[int] | None = None,
          dtype: Any = "float32", memory_format: str = "contiguous", train: bool = True) -> TraceResult:
    """Run `model` on meta tensors and record every convolution; never raises for model errors."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"expected a torch.nn.Module, got {type(model).__name__}")
    if example_inputs is None and input_shape is None:
        raise UsageError("give example inputs or an input shape (e.g. --input-shape 8,3,224,224)")
    dt = None if dtype is None else torch_dtype(dtype)
    if memory_format not in ("contiguous", "channels_last"):
        raise UsageError(f"memory_format must be 'contiguous' or 'channels_last', got {memory_format!r}")
    mf = {4: torch.channels_last, 5: torch.channels_last_3d} if memory_format == "channels_last" else None
    if example_inputs is None:
        shape = tuple(int(s) for s in input_shape)  # type: ignore[union-attr]
        if any(s < 0 for s in shape):
            raise UsageError(f"input shape {shape} has a negative size")
        example_inputs = (torch.empty(shape, dtype=dt or torch.float32, device="meta"),)
    elif isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    in_device = next((str(t.device) for t in _flat(example_inputs) if isinstance(t, torch.Tensor)), "meta")
    # a lazy module's parameters get their shapes from the first forward (the trace, on meta)
    uninit = torch.nn.parameter.UninitializedParameter
    orig_param_device = {(n, tuple(p.shape)): str(p.device) for n, p in model.named_parameters()
                         if not isinstance(p, uninit)}
    inputs = _to_meta_inputs(example_inputs, dt, mf)
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    mcopy = meta_copy(model)
    if dt is not None:  # _apply, not .to(): .to() refuses integer dtypes, which we want to check
        mcopy._apply(lambda t: t.to(dt) if (t.is_floating_point() or t.is_complex()) else t)
    if mf is not None:
        for mod in mcopy.modules():
            for name, p in list(mod.named_parameters(recurse=False)):
                if not isinstance(p, uninit) and p.dim() in (4, 5):
                    setattr(mod, name, torch.nn.Parameter(p.detach().contiguous(memory_format=mf[p.dim()]),
                                                          requires_grad=p.requires_grad))
    mcopy.train(train)
    names = {id(m): n for n, m in mcopy.named_modules()}
    rec = _Recorder(names)
    handles = []
    for mod in mcopy.modules():
        handles.append(mod.register_forward_pre_hook(_push(rec)))
        handles.append(mod.register_forward_hook(_pop(rec)))
    result = TraceResult(input_shapes=[tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)])
    try:
        with rec.mode(), torch.set_grad_enabled(train):
            mcopy(*inputs)
    except Exception as exc:  # noqa: BLE001 - a failing model is a finding, not a crash
        if rec.failure is None:
            rec.failure = TraceFailure(rec.current()[0], "forward", _first_line(exc), type(exc).__name__)
    finally:
        for h in handles:
            h.remove()
    # Devices as the user's tensors have them (the trace itself runs on meta): the input's device
    # for activations, each parameter's own device for weights.
    pdev = {id(p): orig_param_device.get((n, tuple(p.shape)), "meta")
            for n, p in mcopy.named_parameters() if not isinstance(p, uninit)}
    wdev = {c.layer: pdev.get(rec.weight_ids.get(c.layer, -1), "meta") for c in rec.calls}
    if in_device != "meta" or any(v != "meta" for v in wdev.values()):
        default_w = in_device
        rec.calls = [replace(c, x_device=in_device if in_device != "meta" else wdev[c.layer],
                             w_device=wdev[c.layer] if wdev[c.layer] != "meta" else default_w)
                     for c in rec.calls]
    result.calls = rec.calls
    result.failure = rec.failure
    return result


def _push(rec: _Recorder) -> Callable[..., None]:
    def hook(mod: Any, _args: Any) -> None:
        rec.stack.append(mod)

    return hook


def _pop(rec: _Recorder) -> Callable[..., None]:
    def hook(mod: Any, _args: Any, _out: Any) -> None:
        if rec.stack and rec.stack[-1] is mod:
            rec.stack.pop()

    return hook


def trace_convs(model: Any, example_inputs: Any = None, *, input_shape: Sequence[int] | None = None,
                dtype: Any = "float32", memory_format: str = "contiguous",
                train: bool = True) -> list[ConvCall]:
    """Every convolution `model` runs on these inputs, in call order (meta tensors: no GPU, no memory).

    Raises UsageError when the model cannot run on the inputs (run `convdoctor check` to see why).
    """
    res = trace(model, example_inputs, input_shape=input_shape, dtype=dtype,
                memory_format=memory_format, train=train)
    if res.failure is not None:
        where = f" in {res.failure.layer}" if res.failure.layer else ""
        raise UsageError(f"the model fails on this input{where} ({res.failure.op}): {res.failure.message}",
                         hint="run `convdoctor check` on the model for the diagnosis and the fix")
    return res.calls
