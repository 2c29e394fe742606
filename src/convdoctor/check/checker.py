"""The rules: does this convolution run (device="cpu": PyTorch on the CPU; device="cuda": PyTorch with
cuDNN on a CUDA GPU), and if it runs, is it slow or risky?

Shape and parameter rules mirror PyTorch's own checks in aten/src/ATen/native/Convolution.cpp
(`check_shape_forward`, `ConvParams::is_*`, `_convolution_mode` for string padding, the empty-input
check in `_convolution`) and the transposed-conv checks in NaiveConvolutionTranspose2d.cpp /
NaiveConvolutionTranspose3d.cpp. Tables (dtype support, limits) are in data/rules.json. Pure Python:
no torch import (the ConvCall/shape arithmetic is torch-free too).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

from ..report import Finding, Report
from .shapes import expand, numel, output_shape
from .trace import ConvCall

DEVICES = ("cuda", "cpu")
_PT = "PyTorch aten/src/ATen/native/Convolution.cpp (check_shape_forward / ConvParams)"


@functools.lru_cache(maxsize=1)
def rules() -> dict[str, Any]:
    text = resources.files("convdoctor.check").joinpath("data/rules.json").read_text(encoding="utf-8")
    return json.loads(text)


def _dtype_name(dt: Any) -> str:
    s = str(dt).removeprefix("torch.")
    aliases = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
               "bf16": "bfloat16", "fp64": "float64", "double": "float64"}
    return aliases.get(s.lower(), s.lower())


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(str(s) for s in shape)


def _data(call: ConvCall) -> dict[str, Any]:
    return {"op": call.op, "x_shape": list(call.x_shape), "w_shape": list(call.w_shape),
            "y_shape": list(call.y_shape), "stride": list(call.stride), "padding": list(call.padding),
            "dilation": list(call.dilation), "groups": call.groups,
            "output_padding": list(call.output_padding), "dtype": call.dtype,
            "weight_dtype": call.weight_dtype, "memory_format": call.memory_format,
            "padding_mode": call.padding_mode, **({"padding_str": call.padding_str} if call.padding_str else {})}


def make_call(x_shape: Sequence[int], w_shape: Sequence[int], *, stride: Any = 1, padding: Any = 0,
              dilation: Any = 1, groups: int = 1, dtype: Any = "float32", weight_dtype: Any = None,
              transposed: bool = False, output_padding: Any = 0, memory_format: str = "contiguous",
              bias: bool = False, bias_shape: Sequence[int] | None = None, bias_dtype: Any = None,
              layer: str = "", device: str = "meta", weight_device: str | None = None) -> ConvCall:
    """A ConvCall from plain shapes and parameters (what `check_conv` checks)."""
    x = tuple(int(s) for s in x_shape)
    w = tuple(int(s) for s in w_shape)
    nsp = max(len(w) - 2, 1)
    unbatched = len(x) == len(w) - 1
    if unbatched:
        x = (1, *x)
    padding_str = padding if isinstance(padding, str) else None
    st = expand(stride, nsp, "stride")
    dil = expand(dilation, nsp, "dilation")
    op_ = expand(output_padding, nsp, "output_padding")
    if padding_str is not None:
        if padding_str == "same" and len(x) == len(w):
            total = [d * (k - 1) for d, k in zip(dil, w[2:], strict=True)]
            pad = tuple(t // 2 for t in total)
            x = x[:2] + tuple(s + t % 2 for s, t in zip(x[2:], total, strict=True))
        else:
            pad = (0,) * nsp
    else:
        pad = expand(padding, nsp, "padding")
    y: tuple[int, ...] = ()
    if len(x) == len(w) and len(w) >= 3:
        y = output_shape(x, w, stride=st, padding=pad, dilation=dil, groups=int(groups),
                         transposed=transposed, output_padding=op_)
    if bias and bias_shape is None:
        bias_shape = ((w[1] * groups) if transposed else w[0],) if len(w) >= 2 else (0,)
    dt = _dtype_name(dtype)
    return ConvCall(
        layer=layer, op=("conv_transpose" if transposed else "conv") + f"{nsp}d", transposed=transposed,
        x_shape=x, w_shape=w, y_shape=y, bias=bias or bias_shape is not None, stride=st, padding=pad,
        dilation=dil, output_padding=op_, groups=int(groups), padding_mode="zeros", dtype=dt,
        weight_dtype=_dtype_name(weight_dtype) if weight_dtype is not None else dt,
        memory_format=memory_format, padding_str=padding_str, unbatched=unbatched,
        bias_shape=None if bias_shape is None else tuple(int(s) for s in bias_shape),
        bias_dtype=None if bias_shape is None else (_dtype_name(bias_dtype) if bias_dtype else dt),
        x_device=device, w_device=weight_device or device,
    )


def check_call(call: ConvCall, *, device: str = "cuda", allow_tf32: bool | None = None,
               cudnn_version: int | None = None, performance: bool = True) -> list[Finding]:
    """Every finding for one convolution. Errors first decide the verdict; warnings only if it runs.

    The checks run in PyTorch's order: its own argument checks (parameters, channels, sizes,
    dtypes), then, for a call that reaches a kernel (no empty batch or channels), the backend's
    (dilation, output_padding, dtype and device agreement, dtype support, output size), then
    large tensors and performance on CUDA."""
    if device not in DEVICES:
        from ..errors import UsageError

        raise UsageError(f"device must be 'cuda' or 'cpu', got {device!r}")
    out = _Findings(call)
    x, w = call.x_shape, call.w_shape
    if not (len(w) in (3, 4, 5) and len(x) == len(w)):
        _dims_error(call, out)
        return out.items
    _parameter_errors(call, out)
    _channel_errors(call, out)
    if not out.items and not call.transposed:
        _size_errors(call, out)
    _empty_weight_findings(call, device, out)
    _dtype_errors(call, device, out)
    if out.has_error() or _empty_input(call, out):
        return out.items
    _kernel_argument_errors(call, out)
    if _cuda_empty_output(call, device):
        # CUDA returns an empty output here before choosing a kernel, so no dtype-support check
        # (on an H100, int8/int16 transposed convs with an empty output ran).
        return out.items
    _kernel_support_errors(call, device, out)
    if device == "cuda":
        out.items.extend(_large_tensor_findings(call, out.data, out.layer, cudnn_version))
    if performance and device == "cuda" and not out.has_error():
        out.items.extend(_performance_findings(call, out.data, out.layer, allow_tf32))
    return out.items


class _Findings:
    """The findings of one call so far, and how to add an error to them."""

    def __init__(self, call: ConvCall) -> None:
        self.items: list[Finding] = []
        self.layer = call.layer or None
        self.data = _data(call)

    def err(self, fid: str, title: str, message: str, fix: str, source: str = _PT,
            **extra: Any) -> None:
        self.items.append(Finding(fid, "error", title, message, fix, sources=(source,),
                                  layer=self.layer, data={**self.data, **extra}))

    def has_error(self) -> bool:
        return any(f.severity == "error" for f in self.items)


def _dims_error(call: ConvCall, out: _Findings) -> None:
    x, w = call.x_shape, call.w_shape
    expect = f"{len(w) - 1}D (unbatched) or {len(w)}D (batched)" if len(w) in (3, 4, 5) else "3-5D"
    out.err("invalid-parameter", f"input has {len(x) - (1 if call.unbatched else 0)} dims, weight has {len(w)}",
            f"{call.op} expects a {expect} input for a weight of shape {_fmt(w)}; got input {_fmt(x)}.",
            "reshape the input (N, C, *spatial) or use the conv of the right dimensionality "
            "(Conv1d for (N, C, L), Conv2d for (N, C, H, W), Conv3d for (N, C, D, H, W))")


def _parameter_errors(call: ConvCall, out: _Findings) -> None:
    """Checks PyTorch makes before choosing a backend (Convolution.cpp: _convolution,
    ConvParams::is_*_neg/nonpos, _convolution_mode, check_shape_forward)."""
    err = out.err
    if call.padding_str is not None and call.padding_str not in ("same", "valid"):
        err("invalid-parameter", f"unknown padding string {call.padding_str!r}",
            "padding must be an int, a tuple of ints, 'same' or 'valid'.", "use padding='same' or 'valid'")
    if call.padding_str == "same" and any(s != 1 for s in call.stride):
        err("invalid-parameter", "padding='same' with stride > 1",
            f"PyTorch rejects padding='same' for strided convolutions (stride={call.stride}).",
            "compute the padding explicitly, e.g. padding=(k-1)//2 * dilation, or use stride=1")
    if any(s <= 0 for s in call.stride):
        err("invalid-parameter", f"non-positive stride {call.stride}", "every stride must be >= 1.",
            "use stride >= 1")
    if any(d < 0 for d in call.dilation):
        err("invalid-parameter", f"negative dilation {call.dilation}", "every dilation must be >= 1.",
            "use dilation >= 1 (1 means no dilation)")
    if any(p < 0 for p in call.padding):
        err("invalid-parameter", f"negative padding {call.padding}", "padding must be >= 0.",
            "crop the input instead of using negative padding (e.g. x[..., a:-b])")
    if call.transposed and any(p < 0 for p in call.output_padding):
        err("invalid-parameter", f"negative output_padding {call.output_padding}",
            "output_padding must be >= 0.", "use output_padding >= 0")
    if call.groups <= 0:
        err("invalid-parameter", f"non-positive groups={call.groups}", "groups must be >= 1.",
            "use groups >= 1")


def _channel_errors(call: ConvCall, out: _Findings) -> None:
    """Groups against the weight, input channels against the weight, the bias's shape."""
    if call.groups <= 0:
        return
    err = out.err
    x, w = call.x_shape, call.w_shape
    cin = x[1]
    if w[0] < call.groups or w[0] % call.groups:
        err("channel-mismatch", f"groups={call.groups} does not divide the weight's dim 0 ({w[0]})",
            f"weight {_fmt(w)}: dim 0 must be a positive multiple of groups.",
            "choose groups dividing both in and out channels" if not call.transposed else
            "choose groups dividing the input channels")
    elif not call.transposed and cin != w[1] * call.groups:
        err("channel-mismatch", f"input has {cin} channels, the conv expects {w[1] * call.groups}",
            f"weight {_fmt(w)} with groups={call.groups} expects {w[1] * call.groups} input channels "
            f"(in_channels/groups = {w[1]}); the input {_fmt(x)} has {cin}."
            + (" groups must divide the channels." if cin % call.groups else ""),
            f"set in_channels={cin} on this layer, or fix the previous layer so it outputs "
            f"{w[1] * call.groups} channels", expected_channels=w[1] * call.groups)
    elif call.transposed and cin != w[0]:
        err("channel-mismatch", f"input has {cin} channels, the transposed conv expects {w[0]}",
            f"transposed weight {_fmt(w)} (in, out/groups, ...) expects {w[0]} input channels; "
            f"the input {_fmt(x)} has {cin}.",
            f"set in_channels={cin} on this layer or fix the previous layer's out_channels",
            expected_channels=w[0])
    elif call.bias_shape is not None:
        want = w[1] * call.groups if call.transposed else w[0]
        if len(call.bias_shape) != 1 or call.bias_shape[0] != want:
            err("channel-mismatch", f"bias has shape {_fmt(call.bias_shape)}, expected {want}",
                f"bias must be 1-D with one value per output channel ({want}).",
                f"give a bias of shape ({want},)")


def _size_errors(call: ConvCall, out: _Findings) -> None:
    """A (non-transposed) input with an empty spatial dimension, or smaller than the kernel."""
    x, w = call.x_shape, call.w_shape
    padded = [s + 2 * p for s, p in zip(x[2:], call.padding, strict=False)]
    eff = [d * (k - 1) + 1 for d, k in zip(call.dilation, w[2:], strict=False)]
    if any(p < e for p, e in zip(padded, eff, strict=True)) and any(s == 0 for s in x[2:]):
        out.err("empty-tensor", f"input {_fmt(x)} has an empty spatial dimension",
                "A spatial size of 0 leaves nothing to convolve.",
                "skip the call when the input is empty, or fix what produced a zero-sized feature map")
    elif any(p < e for p, e in zip(padded, eff, strict=True)):
        need = [max(e - 2 * p, 1) for e, p in zip(eff, call.padding, strict=True)]
        out.err("input-too-small",
                f"input {_fmt(x[2:])} is smaller than the kernel ({_fmt(eff)} with dilation)",
                f"padded input per channel {_fmt(padded)} < effective kernel {_fmt(eff)}: "
                f"this layer needs a spatial input of at least {_fmt(need)}.",
                "feed a larger input, add padding to this layer, or remove a downsampling step before it",
                min_layer_input=need)


def _cuda_empty_output(call: ConvCall, device: str) -> bool:
    """A transposed conv that PyTorch on CUDA answers with an empty output (zero output channels
    or an empty spatial output) before choosing a kernel."""
    w = call.w_shape
    return (device == "cuda" and call.transposed and bool(call.y_shape)
            and (w[1] == 0 or any(s == 0 for s in call.y_shape[2:]))
            and not any(s < 0 for s in call.y_shape[2:]))


def _empty_weight_findings(call: ConvCall, device: str, out: _Findings) -> None:
    """Zero-sized kernels fail on both devices (cuDNN rejects them; on an H100 the one exception,
    a float64 depthwise conv on PyTorch's native CUDA kernel, is a documented known difference).
    A transposed weight with 0 output channels fails on the CPU but returns an empty output on
    CUDA."""
    x, w = call.x_shape, call.w_shape
    zero_out = call.transposed and w[1] == 0 and call.groups > 0
    empty_weight = x[1] > 0 and (any(k == 0 for k in w[2:]) or zero_out)
    if empty_weight and (device == "cpu" or (any(k == 0 for k in w[2:])
                                             and not _cuda_empty_output(call, device))):
        out.err("empty-tensor", f"weight {_fmt(w)} is empty",
                "A weight with a zero-sized kernel or zero output channels per group has no kernel.",
                "use kernel sizes >= 1 and out_channels >= groups")
    elif empty_weight:
        out.items.append(Finding("empty-weight", "warning", f"weight {_fmt(w)} is empty",
                                 "PyTorch on CUDA returns an empty output for this transposed "
                                 "convolution (zero output channels or an empty output); the CPU "
                                 "rejects it.",
                                 "use kernel sizes >= 1 and out_channels >= groups", sources=(_PT,),
                                 layer=out.layer, data=out.data))


def _complex_mix(call: ConvCall) -> bool:
    return call.dtype != call.weight_dtype and call.dtype.startswith("complex")


def _dtype_errors(call: ConvCall, device: str, out: _Findings) -> None:
    """bool with a padding mode, complex input and weight of different dtypes, the bias's dtype."""
    err = out.err
    if call.padding_mode in ("reflect", "replicate") and call.dtype == "bool":
        err("unsupported-dtype", f"{call.padding_mode} padding has no kernel for bool",
            f"padding_mode={call.padding_mode!r} pads the input with F.pad first; that pad does not "
            "support bool tensors.", "convert the input to a floating type first")
    if _complex_mix(call):  # Convolution.cpp convolution(): complex_convolution checks dtypes first
        err("dtype-mismatch", f"input is {call.dtype} but weight is {call.weight_dtype}",
            "Complex convolutions need input and weight of the same complex dtype.",
            f"cast one side: x.to({call.weight_dtype}) or the weight to {call.dtype}")
    if call.bias_dtype is None or call.bias_dtype == call.dtype:
        return
    if not call.transposed and call.padding_str is not None and device == "cpu":
        # _convolution_mode (string padding) adds the bias after the convolution, in place:
        # any dtype that casts to the output's passes.
        if _category(call.bias_dtype) > _category(call.dtype):
            err("dtype-mismatch", f"{call.bias_dtype} bias cannot be added to a {call.dtype} output",
                "With padding='same'/'valid' PyTorch adds the bias after the convolution, in place; "
                "a bias of a higher type category cannot be cast to the output dtype.",
                f"cast the bias to {call.dtype}")
    elif not call.transposed:
        err("dtype-mismatch", f"input is {call.dtype} but bias is {call.bias_dtype}",
            "PyTorch requires input, weight and bias of the same dtype.",
            f"cast the bias to {call.dtype} (model.to({call.dtype}) casts all parameters)")
    elif _category(call.bias_dtype) > _category(call.dtype) or not _lenient_transposed_bias(call, device):
        err("dtype-mismatch", f"{call.bias_dtype} bias cannot be added to a {call.dtype} output",
            "The transposed convolution adds the bias in place; a bias of a higher type category "
            "(float into integer, complex into real) cannot be cast to the output dtype.",
            f"cast the bias to {call.dtype} (model.to({call.dtype}) casts all parameters)")


def _empty_input(call: ConvCall, out: _Findings) -> bool:
    """True when no kernel runs: an empty batch or channels (Convolution.cpp select_conv_backend:
    the Empty backend, so the backend checks never happen; a transposed conv's negative output
    size still fails), or an empty spatial dimension (an error)."""
    x = call.x_shape
    if x[0] == 0 or x[1] == 0:
        if call.transposed and call.y_shape and any(s < 0 for s in call.y_shape[2:]):
            out.err("input-too-small", f"transposed conv output would be {_fmt(call.y_shape[2:])}",
                    f"input {_fmt(x[2:])} with padding {call.padding} gives a negative output size.",
                    "reduce the padding of this transposed conv or feed a larger input")
        return True
    if any(s == 0 for s in x[2:]):
        out.err("empty-tensor", f"input {_fmt(x)} has an empty spatial dimension",
                "PyTorch supports empty batch (N=0) or channel (C=0) inputs only; a spatial size of 0 fails.",
                "skip the call when the input is empty, or fix what produced a zero-sized feature map")
        return True
    return False


def _kernel_argument_errors(call: ConvCall, out: _Findings) -> None:
    """Checks the backends make (cuDNN / CPU kernels): dilation, output_padding, the input and
    weight's dtypes and devices."""
    err = out.err
    if any(d == 0 for d in call.dilation):
        err("invalid-parameter", f"non-positive dilation {call.dilation}", "every dilation must be >= 1.",
            "use dilation >= 1 (1 means no dilation)")
    if call.transposed and any(op >= s and op >= d for op, s, d in
                               zip(call.output_padding, call.stride, call.dilation, strict=False)):
        err("invalid-parameter", f"output_padding {call.output_padding} too large",
            f"output_padding must be smaller than either stride {call.stride} or dilation {call.dilation}.",
            "use output_padding < stride (it only selects among the output sizes a strided "
            "transposed conv can produce)",
            source="PyTorch NaiveConvolutionTranspose2d.cpp / 3d.cpp (slow_conv_transpose*_shape_check)")
    if call.dtype != call.weight_dtype and not _complex_mix(call):
        err("dtype-mismatch", f"input is {call.dtype} but weight is {call.weight_dtype}",
            "PyTorch requires input and weight of the same dtype (autocast casts both for you).",
            f"cast one side: x.to({call.weight_dtype}) or model.to({call.dtype}), "
            "or run under torch.autocast")
    if _dev(call.x_device) != _dev(call.w_device):
        err("device-mismatch", f"input on {call.x_device}, weight on {call.w_device}",
            "Input and weight must be on the same device.",
            f"move the input with x.to('{call.w_device}') or the model with model.to('{call.x_device}')")


def _kernel_support_errors(call: ConvCall, device: str, out: _Findings) -> None:
    """Whether `device` has a kernel for the dtypes, and a transposed conv's empty output."""
    kind = "conv_transpose" if call.transposed else "conv"
    supported = rules()["dtypes"][device][kind]
    for which, dt in (("input", call.dtype), ("weight", call.weight_dtype)):
        no_dilated = (device == "cpu" and not call.transposed and dt in rules()["dtypes"]["cpu_no_dilated"]
                      and any(d > 1 for d in call.dilation))
        if dt not in supported or no_dilated:
            out.err("unsupported-dtype", f"{kind.replace('_', ' ')} has no {device.upper()} kernel for {dt}"
                    + (" with dilation" if no_dilated else ""),
                    f"The {which} is {dt}; {device} {kind} supports {', '.join(supported)}"
                    + (" (integer types other than int64 only without dilation)" if device == "cpu" else "") + ".",
                    "cast to float32 (or float16/bfloat16 on a GPU): x.float(), model.float()",
                    source=rules()["dtypes"]["_source"])
            break
    # oneDNN (mkldnn) on the CPU returns an empty output where the native kernels raise.
    min_out = 0 if (device == "cpu" and _cpu_mkldnn(call)) else 1
    if call.transposed and call.y_shape and any(s < min_out for s in call.y_shape[2:]):
        out.err("input-too-small", f"transposed conv output would be {_fmt(call.y_shape[2:])}",
                f"input {_fmt(call.x_shape[2:])} with padding {call.padding} gives an empty output.",
                "reduce the padding of this transposed conv or feed a larger input")


def _lenient_transposed_bias(call: ConvCall, device: str) -> bool:
    """Transposed convs whose bias is added with type promotion (so a castable bias dtype passes):
    the Empty backend (N=0 or C=0) and, on the CPU, slow_conv_transpose2d (1D/2D, non-mkldnn dtypes).
    Every other backend (mkldnn, slow_conv_transpose3d, cuDNN) requires the same dtype."""
    if call.x_shape[0] == 0 or call.x_shape[1] == 0:
        return True
    return (device == "cpu" and len(call.w_shape) <= 4
            and call.dtype in ("float64", "int64", "complex64", "complex128"))


def _cpu_mkldnn(call: ConvCall) -> bool:
    """ConvParams::use_mkldnn for float32 CPU convs (complex64 decomposes into float32 convs):
    oneDNN takes them when grouped, kernels > 3x3, batch > 1 or the input is big (1D is viewed
    as 2D, so its kernel is 1 x k). bf16/fp16 oneDNN needs AVX512-BF16/FP16 and is not modelled."""
    if call.dtype not in ("float32", "complex64"):
        return False
    x, w = call.x_shape, call.w_shape
    k = (1, *w[2:]) if len(w) == 3 else w[2:]
    x4 = (*x, 1) if len(x) == 3 else x
    if call.transposed and any(op >= st for op, st in zip(call.output_padding, call.stride, strict=False)):
        return False  # observed (fuzzing): these transposed convs take the native kernel
    return (call.groups > 1 or (k[-1] > 3 and k[-2] > 3) or x[0] > 1
            or x4[0] * x4[1] * x4[2] * x4[3] > 20480)


def _category(dt: str) -> int:
    if dt == "bool":
        return 0
    if dt.startswith(("int", "uint")):
        return 1
    if dt.startswith("complex"):
        return 3
    return 2


def _dev(d: str) -> str:
    return "cuda" if d.startswith("cuda") else d.split(":")[0]


def _large_tensor_findings(call: ConvCall, data: dict[str, Any], layer: str | None,
                           cudnn_version: int | None) -> list[Finding]:
    lim = rules()["int32_max"]
    src = rules()["large_tensors"]["_source"]
    x, y, w = call.x_shape, call.y_shape, call.w_shape
    nx, ny, nw = numel(x), numel(y) if y else 0, numel(w)
    if nx == 0 or (nx <= lim and ny <= lim and nw <= lim):
        return []
    n = max(x[0], 1)
    per_x, per_y = nx // n, (ny // n if ny else 0)
    big = {"x_numel": nx, "y_numel": ny, "w_numel": nw, "per_sample_x": per_x, "per_sample_y": per_y}
    min_ver = rules()["large_tensors"]["cudnn_64bit_min_version"]
    if nw > lim:
        return [Finding("tensor-too-large", "error", f"weight has {nw:,} elements (> 2^31-1)",
                        "No PyTorch path splits the weight; cuDNN's 32-bit indexed engines reject it.",
                        "split the layer into several convolutions over channel groups", sources=(src,),
                        layer=layer, data={**data, **big})]
    if per_x <= lim and per_y <= lim:
        return [Finding("large-tensor-split", "info",
                        f"{'input' if nx > lim else 'output'} has more than 2^31 elements; PyTorch handles it",
                        "Each sample fits 32-bit indexing, so PyTorch splits the batch on the cuDNN v7 path "
                        "and cuDNN >= 9.3 indexes it with 64 bits on the v8 path.",
                        "nothing required; a smaller batch avoids the split", sources=(src,), layer=layer,
                        data={**data, **big})]
    if cudnn_version is not None and cudnn_version < min_ver:
        return [Finding("tensor-too-large", "error",
                        f"one sample has {max(per_x, per_y):,} elements (> 2^31-1) and cuDNN is {cudnn_version}",
                        "PyTorch cannot split a single sample; cuDNN < 9.3 cannot index it, so PyTorch "
                        "leaves cuDNN for its native CUDA kernels, which need 32-bit indexing or run "
                        "out of memory on im2col buffers this size.",
                        "upgrade to cuDNN >= 9.3 (pip install -U nvidia-cudnn-cu12/cu13), or tile the "
                        "input spatially (overlapping by the receptive field) and run the tiles",
                        sources=(src,), layer=layer, data={**data, **big})]
    return [Finding("tensor-too-large-64bit", "warning",
                    f"one sample has {max(per_x, per_y):,} elements (> 2^31-1): needs 64-bit indexing",
                    "PyTorch cannot split a single sample. cuDNN >= 9.3 through the v8 API supports it "
                    "(fewer engines, slower); with an older cuDNN this fails"
                    + ("" if cudnn_version else " (cuDNN version unknown: pass cudnn_version)") + ".",
                    "keep cuDNN >= 9.3, or tile the input spatially to stay under 2^31 elements per sample",
                    sources=(src,), layer=layer, data={**data, **big})]


def _performance_findings(call: ConvCall, data: dict[str, Any], layer: str | None,
                          allow_tf32: bool | None) -> list[Finding]:
    out: list[Finding] = []
    tc = rules()["tensor_cores"]
    x, w = call.x_shape, call.w_shape
    groups = max(call.groups, 1)
    depthwise = groups > 1 and groups == x[1]
    if call.dtype in tc["dtypes"] and not depthwise:
        m = tc["channel_multiple"]
        cin_g = x[1] // groups
        cout_g = (w[1] if call.transposed else w[0] // groups)
        bad = [f"{name}={v}" for name, v in (("in_channels/groups", cin_g), ("out_channels/groups", cout_g))
               if v % m]
        if bad:
            pad_to = [((v + m - 1) // m) * m for v in (cin_g, cout_g)]
            out.append(Finding(
                "tensor-core-alignment", "warning", f"{call.dtype} channels not a multiple of {m}: {', '.join(bad)}",
                f"Tensor-core kernels for {call.dtype} need channel counts that are multiples of {m}; "
                "cuDNN pads internally or falls back to slower kernels (measured on an H100: a fp16 "
                f"3x3 conv with 250 channels took {_m('fp16_nhwc_c250_ms')} ms, with 256 channels "
                f"{_m('fp16_nhwc_c256_ms')} ms).",
                f"pad channels to multiples of {m} (here {pad_to[0]} in / {pad_to[1]} out per group), e.g. "
                "zero-pad the input channels or widen the layer", sources=(tc["_source"],), layer=layer,
                data=data))
        if len(x) in (4, 5) and call.memory_format != "channels_last":
            out.append(Finding(
                "use-channels-last", "warning", f"{call.dtype} convolution in NCHW layout",
                "Tensor-core convolution kernels work in NHWC; in NCHW cuDNN transposes the tensors "
                f"around the kernel (measured on an H100, fp16 3x3 conv, 256 channels, 64x56x56: NCHW "
                f"{_m('fp16_nchw_ms')} ms, NHWC {_m('fp16_nhwc_ms')} ms).",
                "model = model.to(memory_format=torch.channels_last); "
                "x = x.to(memory_format=torch.channels_last)", sources=(tc["_source"],), layer=layer,
                data=data))
    if call.dtype == "float32":
        tf32 = _tf32_enabled() if allow_tf32 is None else allow_tf32
        if tf32 is False:
            r = rules()["tf32"]
            out.append(Finding(
                "tf32-disabled", "info", "float32 convolution with TF32 disabled",
                f"Without TF32, fp32 convolutions run on the CUDA cores: peak throughput is about "
                f"{r['peak_ratio_h100']}x lower on an H100 and {r['peak_ratio_a100']}x lower on an A100 "
                f"(datasheet peaks); measured on an H100 for a 3x3 conv, 256 channels, 64x56x56: "
                f"{_m('fp32_notf32_ms')} ms without TF32, {_m('fp32_tf32_ms')} ms with it.",
                "torch.backends.cudnn.allow_tf32 = True (default), if 10-bit mantissa products are "
                "accurate enough; or train in bf16 with autocast", sources=(r["_source"],), layer=layer,
                data=data))
    return out


def _m(key: str) -> float:
    return rules()["measured_h100"][key]


def _tf32_enabled() -> bool | None:
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return bool(torch.backends.cudnn.allow_tf32)
    except Exception:  # noqa: BLE001
        return None


def check_conv(x_shape: Sequence[int], w_shape: Sequence[int], *, stride: Any = 1, padding: Any = 0,
               dilation: Any = 1, groups: int = 1, dtype: Any = "float32", weight_dtype: Any = None,
               device: str = "cuda", transposed: bool = False, output_padding: Any = 0,
               memory_format: str = "contiguous", bias: bool = False,
               bias_shape: Sequence[int] | None = None, bias_dtype: Any = None,
               weight_device: str | None = None, layer: str = "", allow_tf32: bool | None = None,
               cudnn_version: int | None = None) -> Report:
    """Check one convolution given by shapes: would PyTorch on `device` accept it, and is it fast?

    `device` selects whose rules apply: "cuda" (PyTorch + cuDNN on a GPU) or "cpu" (PyTorch on the CPU).
    `weight_device` (e.g. "cpu" while device="cuda") checks for a device mismatch.
    """
    from ..errors import UsageError

    try:
        call = make_call(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation,
                         groups=groups, dtype=dtype, weight_dtype=weight_dtype, transposed=transposed,
                         output_padding=output_padding, memory_format=memory_format, bias=bias,
                         bias_shape=bias_shape, bias_dtype=bias_dtype, layer=layer, device=device,
                         weight_device=weight_device)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"bad convolution parameters: {exc}") from None
    report = Report(kind="check", facts={"device": device, "conv": call.to_dict()})
    report.extend(check_call(call, device=device, allow_tf32=allow_tf32, cudnn_version=cudnn_version))
    return report
