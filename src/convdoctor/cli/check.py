"""`convdoctor check`: find convolutions cuDNN will reject (or run slowly) before it sees them.

  convdoctor check zoo:resnet50 --input-shape 8,3,224,224 [--dtype float16] [--channels-last]
  convdoctor check path/to/model.py:make_model --input-shape 1,3,512,512
  convdoctor check model.onnx --input-shape 1,3,224,224
  convdoctor check conv2d --input 8x3x1x1 --weight 32x3x3x3 --padding 0
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from typing import Any

from ..argtypes import MAX_INT, bounded_int, finite_float
from ..errors import UsageError
from ..report import Finding, Report, render_findings
from ..textsafe import clean, one_line, use_color

SINGLE_OPS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL",
                   help="zoo:<name>, path/to/file.py:factory, model.onnx, or conv1d/conv2d/conv3d/"
                        "conv_transpose{1,2,3}d to check one convolution. file.py:factory "
                        "imports file.py and calls factory(): it runs that file's code, with "
                        "your permissions, so only name files you trust (as with torch.load)")
    p.add_argument("--input-shape", action="append", metavar="SHAPE",
                   help="input shape, e.g. 8,3,224,224 (repeat for several shapes); zoo models default "
                        "to their usual input")
    p.add_argument("--dtype", default="float32", help="float32 (default), float16, bfloat16, float64")
    p.add_argument("--channels-last", action="store_true", help="check in channels_last (NHWC) layout")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="whose rules apply: PyTorch+cuDNN on a GPU (default) or PyTorch on the CPU")
    p.add_argument("--eval", action="store_true", help="trace in eval mode (default: train mode)")
    p.add_argument("--gpu-memory", type=finite_float(0.0, 1e6, lo_open=True, unit="GiB"),
                   metavar="GIB",
                   help="GPU memory for the memory estimate (default: GPU 0 via NVML, if any)")
    p.add_argument("--benchmark", action="store_true",
                   help="assume torch.backends.cudnn.benchmark=True (warns about many input shapes)")
    p.add_argument("--no-tf32", action="store_true", help="assume TF32 is disabled for cuDNN")
    p.add_argument("--all", action="store_true", help="list every finding (default: collapse repeats)")
    g = p.add_argument_group("single convolution (MODEL = conv2d, ...)")
    g.add_argument("--input", metavar="SHAPE", help="input shape, e.g. 8x3x224x224")
    g.add_argument("--weight", metavar="SHAPE", help="weight shape, e.g. 32x3x3x3 (transposed: in,out/g,k..)")
    g.add_argument("--stride", default="1")
    g.add_argument("--padding", default="0", help="int, tuple (1,2), 'same' or 'valid'")
    g.add_argument("--dilation", default="1")
    g.add_argument("--groups", type=bounded_int(1), default=1)
    g.add_argument("--output-padding", default="0")
    g.add_argument("--bias", action="store_true")
    g.add_argument("--weight-dtype", default=None)


def _ints(text: str, name: str) -> Any:
    parts = [t for t in str(text).replace("x", ",").strip("()[] ").split(",") if t.strip()]
    try:
        vals = [int(t) for t in parts]
    except ValueError:
        raise UsageError(f"--{name} must be an int or a comma-separated list of ints, got {text!r}") from None
    if not vals:
        raise UsageError(f"--{name} is empty")
    if any(not 0 <= v <= MAX_INT for v in vals) or len(vals) > 3:
        raise UsageError(f"--{name} takes 1 to 3 whole numbers from 0 to {MAX_INT}, got "
                         f"{str(text)[:40]!r}")
    return vals[0] if len(vals) == 1 else tuple(vals)


def run(args: argparse.Namespace) -> int:
    from ..check.models import parse_shape
    from . import emit

    spec = args.model
    tf32 = False if args.no_tf32 else None
    if spec in SINGLE_OPS:
        from ..check.checker import check_conv

        if not args.input or not args.weight:
            raise UsageError(f"checking one {spec} needs --input SHAPE and --weight SHAPE",
                             hint=f"e.g. convdoctor check {spec} --input 8x3x224x224 --weight 32x3x3x3 --padding 1")
        pad = args.padding if args.padding in ("same", "valid") else _ints(args.padding, "padding")
        report = check_conv(parse_shape(args.input, name="--input"), parse_shape(args.weight, name="--weight"),
                            stride=_ints(args.stride, "stride"), padding=pad,
                            dilation=_ints(args.dilation, "dilation"), groups=args.groups, dtype=args.dtype,
                            weight_dtype=args.weight_dtype, device=args.device,
                            transposed=spec.startswith("conv_transpose"),
                            output_padding=_ints(args.output_padding, "output-padding"),
                            memory_format="channels_last" if args.channels_last else "contiguous",
                            bias=args.bias, allow_tf32=tf32)
        if len(report.facts["conv"]["w_shape"]) - 2 != int(spec[-2]):
            raise UsageError(f"{spec} needs a {int(spec[-2]) + 2}-D weight, got {args.weight}")
        head = (f"{spec} input {args.input} weight {args.weight} {args.dtype} on {args.device}: "
                + ("OK" if report.ok else f"{len(report.errors)} error(s)"))
        color = _color(args)
        emit(args, report.to_dict(), _human(head, report, args.all, color), color=color)
        return report.exit_code

    shapes = [parse_shape(s, name="--input-shape") for s in (args.input_shape or [])]
    if spec.lower().endswith(".onnx"):
        from ..check.onnx_check import check_onnx

        if len(shapes) > 1:
            raise UsageError("an ONNX model is checked for one --input-shape at a time")
        report = check_onnx(spec, shapes[0] if shapes else None, device=args.device,
                            dtype=None if args.dtype == "float32" else args.dtype, allow_tf32=tf32,
                            memory_format="channels_last" if args.channels_last else "contiguous")
        head = (f"{spec}" + (f" input {'x'.join(map(str, shapes[0]))}" if shapes else
                             " (batch dim taken as 1)" if report.facts.get("assumed_batch") else "")
                + (" channels_last" if args.channels_last else "")
                + f" on {args.device}: {report.facts.get('convolutions', 0)} convolutions, " + _counts(report))
        color = _color(args)
        emit(args, report.to_dict(), _human(head, report, args.all, color), color=color)
        return report.exit_code

    from ..check.api import check_model
    from ..check.models import load_model

    model = load_model(spec)
    if not shapes:
        if spec.startswith("zoo:"):
            from .. import zoo

            shapes = [zoo.default_input_shape(spec[4:])]
        else:
            raise UsageError(f"give the input shape: convdoctor check {spec} --input-shape 8,3,224,224")
    gpu_mem = int(args.gpu_memory * 2**30) if args.gpu_memory else _gpu_memory()
    reports = []
    for shape in shapes:
        reports.append(check_model(model, input_shape=shape, dtype=args.dtype,
                                   memory_format="channels_last" if args.channels_last else "contiguous",
                                   device=args.device, train=not args.eval, allow_tf32=tf32,
                                   gpu_memory_bytes=gpu_mem))
    report = reports[0]
    if len(reports) > 1:
        merged = Report(kind="check", facts={"per_shape": [r.facts for r in reports]})
        seen = set()
        for r in reports:
            for f in r.findings:
                k = (f.id, f.layer, f.title)
                if k not in seen:
                    seen.add(k)
                    merged.add(f)
        report = merged
        if args.benchmark and args.device == "cuda":
            report.extend(_benchmark_findings(reports))
    f0 = reports[0].facts
    head = (f"{spec} input {', '.join('x'.join(map(str, s)) for s in shapes)} {args.dtype} "
            f"{'channels_last' if args.channels_last else 'NCHW'} on {args.device}: "
            f"{f0.get('convolutions', 0)} convolutions ({f0.get('distinct_problems', 0)} distinct), "
            + _counts(report))
    if "min_input_shape" in f0:
        head += f"\nsmallest input the model accepts: {'x'.join(map(str, f0['min_input_shape']))}"
    color = _color(args)
    emit(args, report.to_dict(), _human(head, report, args.all, color), color=color)
    return report.exit_code


def _benchmark_findings(reports: list[Report]) -> list[Finding]:
    from ..check.checker import rules

    per: set[tuple[Any, ...]] = set()
    for r in reports:
        for layer in r.facts.get("layers", []):
            per.add((tuple(layer["x"]), tuple(layer["w"])))
    b = rules()["benchmark"]
    n = len(per)
    if len(reports) < 2:
        return []
    return [Finding("benchmark-many-shapes", "warning",
                    f"{len(reports)} input shapes -> {n} distinct convolution problems with cudnn.benchmark",
                    f"With torch.backends.cudnn.benchmark=True every new problem is benchmarked on first "
                    f"use: about {n} x {b['first_call_ms_per_shape']} ms = {n * b['first_call_ms_per_shape'] / 1000:.1f} s "
                    "of searching (median first-call cost measured on an H100), and again in every process.",
                    "bucket or pad inputs to a few sizes, or set torch.backends.cudnn.benchmark=False for "
                    "dynamic shapes; `convdoctor tune` stores the choices across processes",
                    sources=(b["_source"],), data={"distinct_problems": n, "shapes": len(reports)})]


def _gpu_memory() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            return int(pynvml.nvmlDeviceGetMemoryInfo(h).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML / no GPU: no memory estimate
        return None


def _color(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and use_color(sys.stdout)


def _counts(report: Report) -> str:
    e, w = len(report.errors), len(report.warnings)
    if not e and not w:
        return "OK (no errors, no warnings)"
    return f"{e} error(s), {w} warning(s)"


def _human(head: str, report: Report, show_all: bool, color: bool = False) -> str:
    """The report as text; `color`: severity marks coloured (everything else is cleaned first)."""
    findings = report.sorted_findings()
    head = clean(head)
    if show_all:
        return head + ("\n" + render_findings(findings, color=color) if findings else "")
    groups: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for f in findings:
        groups[(f.severity, f.id)].append(f)
    lines = [head]
    for (sev, fid), fs in groups.items():
        shown = fs if sev == "error" else fs[:2]
        lines.append(render_findings(shown, color=color))
        if len(fs) > len(shown):
            rest = [one_line(f.layer or "?") for f in fs[len(shown):]]
            lines.append(f"      ... and {len(rest)} more layers with {fid}: {', '.join(rest[:8])}"
                         + (" ..." if len(rest) > 8 else "") + " (--all lists them)")
    return "\n".join(lines)
