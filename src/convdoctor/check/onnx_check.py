"""Check the Conv / ConvTranspose nodes of an ONNX graph (so Keras/TF/JAX users can export and check).

The input shape given by the user replaces the graph input's (often symbolic) dims; without one, a
symbolic batch dimension (the usual export) is taken as 1 so the rest of the graph still gets
static shapes. ONNX shape inference propagates shapes, and every Conv/ConvTranspose node becomes a
ConvCall checked with the same rules as PyTorch models (ONNX is NCHW; `memory_format`
channels_last checks the layout the runtime would use). Asymmetric `pads` / auto_pad SAME_* are
handled the way PyTorch handles asymmetric padding: the symmetric part as padding, the extra on
the input. A node the ONNX specification does not allow (a Conv without its weight, a
kernel_shape that contradicts the weight, an unknown auto_pad, sizes beyond int32) is an error
finding, never a crash and never OK; a node left without static shapes is a warning (not checked).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import DependencyMissing, UsageError
from ..report import Finding, Report
from .checker import check_call
from .models import MAX_DIM, file_exists
from .shapes import output_shape
from .trace import ConvCall

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")   # ONNX Conv operator specification

_ELEM = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
         10: "float16", 11: "float64", 14: "complex64", 15: "complex128", 16: "bfloat16"}


def _load(path: str) -> Any:
    p = Path(path)
    if not file_exists(p, what="ONNX file"):
        raise UsageError(f"ONNX file not found: {path}")
    if p.is_dir():
        raise UsageError(f"{path} is a directory, not an ONNX file")
    if p.stat().st_size == 0:
        raise UsageError(f"{path} is empty (0 bytes), not an ONNX model",
                         hint="re-export the model (torch.onnx.export / tf2onnx) and check the file "
                              "is complete")
    try:
        import onnx
    except ImportError:
        raise DependencyMissing("checking an ONNX file needs the onnx package",
                                hint="pip install onnx") from None
    try:
        model = onnx.load(str(p))
    except Exception as exc:  # noqa: BLE001 - protobuf raises many types on garbage
        raise UsageError(f"cannot read {path} as an ONNX model ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'corrupt file'})",
                         hint="re-export the model (torch.onnx.export / tf2onnx) and check the file "
                              "is complete") from None
    if not model.HasField("graph") or not model.ir_version:
        raise UsageError(f"{path} is not an ONNX model (no graph, no IR version)",
                         hint="re-export the model (torch.onnx.export / tf2onnx) and check the file "
                              "is complete")
    return model


def _dims(t: Any) -> tuple[int, ...] | None:
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    out = []
    for d in t.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        else:
            return None
    return tuple(out)


def check_onnx(path: str, input_shape: Sequence[int] | None = None, *, device: str = "cuda",
               dtype: str | None = None, allow_tf32: bool | None = None,
               memory_format: str = "contiguous") -> Report:
    """Check every Conv/ConvTranspose node of the ONNX model at `path` for `input_shape`."""
    model = _load(path)
    import onnx
    from onnx import shape_inference

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    real_inputs = [i for i in graph.input if i.name not in inits]
    assumed_batch = False
    if input_shape is None and real_inputs:
        dims = real_inputs[0].type.tensor_type.shape.dim
        if len(dims) >= 3 and not dims[0].HasField("dim_value") and all(
                d.HasField("dim_value") for d in dims[1:]):
            dims[0].Clear()           # a symbolic batch: checked as batch 1
            dims[0].dim_value = 1
            assumed_batch = True
    if input_shape is not None:
        if not real_inputs:
            raise UsageError(f"{path} has no graph input to give the shape {tuple(input_shape)} to")
        shape_field = real_inputs[0].type.tensor_type.shape
        if len(shape_field.dim) and len(shape_field.dim) != len(input_shape):
            raise UsageError(f"{path}: input {real_inputs[0].name!r} has {len(shape_field.dim)} dims, "
                             f"--input-shape has {len(input_shape)}")
        del shape_field.dim[:]
        for s in input_shape:
            shape_field.dim.add().dim_value = int(s)
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"ONNX shape inference failed on {path}: {str(exc).splitlines()[0][:300]}",
                         hint="a node rejects the input shape; check --input-shape") from None
    shapes: dict[str, tuple[tuple[int, ...] | None, int]] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        shapes[vi.name] = (_dims(vi.type), vi.type.tensor_type.elem_type)
    for name, init in inits.items():
        shapes[name] = (tuple(int(d) for d in init.dims), init.data_type)
    report = Report(kind="check", facts={"onnx": str(path), "device": device,
                                         "input_shape": list(input_shape) if input_shape else None,
                                         "assumed_batch": 1 if assumed_batch else None,
                                         "memory_format": memory_format,
                                         "opset": [o.version for o in model.opset_import]})
    n_conv = 0
    unknown: list[str] = []
    for i, node in enumerate(inferred.graph.node):
        if node.op_type not in ("Conv", "ConvTranspose"):
            continue
        n_conv += 1
        layer = node.name or f"{node.op_type}#{i}"
        if len(node.input) < 2 or not node.input[0] or not node.input[1]:
            report.add(_invalid(layer, f"{node.op_type} has {len(node.input)} input(s); it needs "
                                "the input X and the weight W"))
            continue
        x, xt = shapes.get(node.input[0], (None, 0))
        w, wt = shapes.get(node.input[1], (None, 0))
        if x is None or w is None:
            unknown.append(layer)
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        bad = _invalid_attrs(node.op_type, x, w, attrs)
        if bad:
            report.add(_invalid(layer, bad))
            continue
        call = _call(node.op_type == "ConvTranspose", layer, x, w, attrs,
                     dtype or _ELEM.get(xt, "float32"), dtype or _ELEM.get(wt, "float32"),
                     bias=len(node.input) > 2 and bool(node.input[2]),
                     bias_shape=shapes.get(node.input[2], (None, 0))[0] if len(node.input) > 2 and node.input[2] else None,
                     memory_format=memory_format)
        report.extend(check_call(call, device=device, allow_tf32=allow_tf32))
    if unknown:
        report.add(Finding("shape-unknown", "warning",
                           f"{len(unknown)} conv nodes not checked: no static shapes",
                           "ONNX shape inference could not give these nodes static shapes, so they "
                           "were not checked: " + ", ".join(unknown[:10]),
                           "pass --input-shape with every dim fixed", data={"layers": unknown}))
    report.facts["convolutions"] = n_conv
    return report


def _invalid(layer: str, why: str) -> Finding:
    return Finding("onnx-invalid-node", "error", f"invalid ONNX convolution: {why}",
                   "The ONNX Conv/ConvTranspose operator does not allow this node; runtimes "
                   "reject the model or compute something else than the exporter meant.",
                   "re-export the model, or fix the node's attributes",
                   sources=("ONNX operator specification, Conv and ConvTranspose: "
                            "https://onnx.ai/onnx/operators/onnx__Conv.html",),
                   layer=layer)


def _invalid_attrs(op: str, x: tuple[int, ...], w: tuple[int, ...],
                   attrs: dict[str, Any]) -> str | None:
    """What makes the node invalid, or None: sizes beyond int32, a kernel_shape that contradicts
    the weight, an unknown auto_pad, attribute lists of the wrong length."""
    nsp = len(w) - 2
    if nsp < 1:
        return f"the weight has {len(w)} dims; a convolution weight has 3 to 5"
    if any(not 0 <= d <= MAX_DIM for d in (*x, *w)):
        return f"a tensor size is out of range (input {x}, weight {w})"
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode(errors="replace") if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad not in AUTO_PADS:
        return f"auto_pad={auto_pad!r} is not one of {', '.join(AUTO_PADS)}"
    if "kernel_shape" in attrs and tuple(attrs["kernel_shape"]) != tuple(w[2:]):
        return (f"kernel_shape {tuple(attrs['kernel_shape'])} contradicts the weight's kernel "
                f"{tuple(w[2:])}")
    lengths = {"strides": nsp, "dilations": nsp, "pads": 2 * nsp, "output_padding": nsp}
    for name, n in lengths.items():
        vals = attrs.get(name)
        if vals is None:
            continue
        if len(vals) != n:
            return f"{name} has {len(vals)} values; this {nsp}D {op} needs {n}"
        low = 1 if name in ("strides", "dilations") else 0
        if any(not low <= int(v) <= MAX_DIM for v in vals):
            return f"{name} {tuple(vals)} out of range ({low} to {MAX_DIM})"
    if not 1 <= int(attrs.get("group", 1)) <= MAX_DIM:
        return f"group={attrs.get('group')} out of range"
    return None


def _call(transposed: bool, layer: str, x: tuple[int, ...], w: tuple[int, ...], attrs: dict[str, Any],
          dtype: str, wdtype: str, *, bias: bool, bias_shape: tuple[int, ...] | None,
          memory_format: str = "contiguous") -> ConvCall:
    nsp = max(len(w) - 2, 1)
    stride = tuple(attrs.get("strides", [1] * nsp))
    dil = tuple(attrs.get("dilations", [1] * nsp))
    groups = int(attrs.get("group", 1))
    kernel = tuple(attrs.get("kernel_shape", w[2:]))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    pads = list(attrs.get("pads", [0] * (2 * nsp)))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and not transposed and len(x) == len(w):
        pads = [0] * (2 * nsp)
        for d in range(nsp):
            out = -(-x[2 + d] // stride[d])
            total = max((out - 1) * stride[d] + dil[d] * (kernel[d] - 1) + 1 - x[2 + d], 0)
            small, big = total // 2, total - total // 2
            pads[d], pads[d + nsp] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    elif auto_pad == "VALID":
        pads = [0] * (2 * nsp)
    begin, end = pads[:nsp], pads[nsp:]
    padding = tuple(min(b, e) for b, e in zip(begin, end, strict=False))
    xs = x
    if len(x) == len(w) and not transposed:
        xs = x[:2] + tuple(s + abs(b - e) for s, b, e in zip(x[2:], begin, end, strict=False))
    op = tuple(attrs.get("output_padding", [0] * nsp))
    y: tuple[int, ...] = ()
    if len(xs) == len(w):
        y = output_shape(xs, w, stride=stride, padding=padding, dilation=dil, groups=groups,
                         transposed=transposed, output_padding=op)
    return ConvCall(
        layer=layer, op=("conv_transpose" if transposed else "conv") + f"{nsp}d", transposed=transposed,
        x_shape=tuple(xs), w_shape=tuple(w), y_shape=y, bias=bias, stride=stride, padding=padding,
        dilation=dil, output_padding=op, groups=groups, padding_mode="zeros", dtype=dtype,
        weight_dtype=wdtype, memory_format=memory_format, bias_shape=bias_shape,
        bias_dtype=dtype if bias_shape is not None else None, x_device="onnx", w_device="onnx")
