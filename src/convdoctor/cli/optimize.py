"""`convdoctor optimize MODEL --input-shape ... [--train]`: plan per layer and measured speedup.

The model is loaded (zoo:<name> or file.py:factory) and optimized; the speedup printed is the one
`optimize` measured for the model it leaves against a copy of the model as given (interleaved
rounds, median of the per-round ratios, with its interval), on this machine, for this input. When
no change measured faster, it says that the model runs as PyTorch runs it.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..argtypes import bounded_int, finite_float, positive_seconds
from ..errors import DependencyMissing, UsageError

_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}


def _time_limit(text: str) -> float | None:
    """--time-limit: "auto" (None: the tuning mode's default), "none" (no limit) or seconds."""
    low = str(text).strip().lower()
    if low == "auto":
        return None
    if low == "none":
        return float("inf")
    try:
        return finite_float(0.0, 7 * 86400.0, unit="seconds")(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{str(text)[:30]!r}: expected seconds (0 to 604800), auto or none") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="zoo:<name> or path/to/file.py:factory "
                   "(file.py:factory imports file.py and calls factory(): it runs that file's "
                   "code, so only name files you trust)")
    p.add_argument("--input-shape", default=None,
                   help="input shape, e.g. 8,3,224,224 (default: the zoo model's usual input)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--train", action="store_true", default=True,
                      help="optimize a training step: forward and backward (default)")
    mode.add_argument("--inference", dest="train", action="store_false",
                      help="optimize inference (forward under no_grad)")
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    p.add_argument("--channels-last", default="auto", choices=("auto", "on", "off"),
                   help="model-level channels_last: measured (auto, default), forced on or off")
    p.add_argument("--graphs", default="auto", choices=("auto", "on", "off"),
                   help="whole-model CUDA graphs for the given input shape: measured (auto, "
                        "default), kept whenever capture works (on) or off; CUDA only")
    p.add_argument("--db", default=None, help="tuning database path (default: CONVDOCTOR_DB or "
                                              "the user cache)")
    p.add_argument("--tuning", choices=("quick", "thorough"), default="quick",
                   help="quick (default): the short listing and prescreen of "
                        "docs/configuration.md, for results within the minute; thorough: every "
                        "candidate convdoctor can list")
    p.add_argument("--time-limit", default="auto", type=_time_limit, metavar="S|auto|none",
                   help="stop starting new problems after S seconds of tuning (the rest run "
                        "PyTorch's path; the next call tunes them, most promising first); auto "
                        "(default): quick tuning until 40 s after optimize began, thorough "
                        "without a limit; none: no limit")
    p.add_argument("--no-tune", action="store_true",
                   help="use only what the database holds; PyTorch's path for the rest")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--steps", type=bounded_int(1, 100_000), default=20,
                   help="timed steps per variant (default 20)")
    p.add_argument("--budget", type=positive_seconds(), default=2.0,
                   help="tuning budget per problem, seconds (default 2)")
    p.add_argument("--margin", default="auto",
                   help="least relative gain (e.g. 0.03) a layout, routing or graph variant must "
                        "measure to be chosen; auto (default): three standard errors of the "
                        "compared medians, at least 0.01")
    p.add_argument("--remeasure", action="store_true",
                   help="time the layout, routing, graphs and speedup decisions again, even "
                        "where the database holds them for this model (with --report: always)")
    p.add_argument("--all-layers", action="store_true",
                   help="print every layer (default: the first 40 signatures)")
    p.add_argument("--report", default=None, metavar="FILE.html",
                   help="also write the run's HTML page (see convdoctor report)")


def _torch() -> Any:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        raise DependencyMissing(f"convdoctor optimize needs PyTorch ({exc})",
                                hint="pip install torch") from None
    return torch


def run(args: argparse.Namespace) -> int:
    torch = _torch()
    from ..check.models import load_model, parse_shape
    from ..runtime.optimizer import optimize, report_of
    from . import emit

    if args.report:  # a page that could not be written is refused before the run
        from ..htmlreport import check_report_path

        check_report_path(args.report)
    if args.steps < 1:
        raise UsageError("--steps must be >= 1")
    margin = _margin_arg(args.margin)
    dtype_name = _DTYPES.get(str(args.dtype).lower())
    if dtype_name is None:
        raise UsageError(f"unsupported --dtype {args.dtype!r}; use float32, bfloat16 or float16")
    shape = _input_shape(args.model, args.input_shape, parse_shape)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: this torch sees no GPU",
                         hint="run `convdoctor doctor` to see why, or use --device cpu")
    dev = "cuda" if args.device == "auto" and torch.cuda.is_available() else (
        "cpu" if args.device == "auto" else args.device)
    dtype = getattr(torch, dtype_name)
    model = load_model(args.model).to(device=dev, dtype=dtype)
    if not args.train:
        model.eval()
    x = torch.randn(*shape, device=dev, dtype=dtype)
    on_off: dict[str, bool | str] = {"auto": "auto", "on": True, "off": False}
    cl = on_off[args.channels_last]
    try:
        optimize(model, x, train=args.train, db=args.db, tune_missing=not args.no_tune,
                 channels_last=cl, graphs=on_off[args.graphs],
                 budget_s=args.budget, steps=max(4, args.steps // 2), margin=margin,
                 backend="cuda" if dev == "cuda" else "cpu", tuning=args.tuning,
                 tune_time_limit_s=args.time_limit,
                 remeasure=bool(args.remeasure or args.report))
    except UsageError:
        raise
    except RuntimeError as exc:
        raise UsageError(f"the model does not run with input {shape} ({exc})",
                         hint="check --input-shape and --dtype") from None
    rep = report_of(model)
    ms = {"pytorch": rep.speedup_ms["as_given"], "convdoctor": rep.speedup_ms["optimized"]} \
        if rep.speedup is not None else {}
    payload = {"model": args.model, "input_shape": list(shape), "dtype": dtype_name,
               "device": dev, "train": bool(args.train), "step_ms": ms, "speedup": rep.speedup,
               "speedup_ci": rep.speedup_ci, "steps": args.steps, "report": rep}
    payload["step_samples_ms"] = dict(rep.speedup_step_ms)
    emit(args, payload, _human(args, shape, dtype_name, dev, rep))
    if args.report:
        from ..htmlreport import report_for_optimize

        report_for_optimize(args.report, payload, rep.speedup_step_ms, db=args.db)
    return 0


def _margin_arg(text: str) -> float | None:
    if str(text).strip().lower() == "auto":
        return None
    try:
        m = float(text)
    except ValueError:
        m = -1.0
    if not 0.0 <= m < 1.0:
        raise UsageError(f"--margin {text!r}: expected auto or a number in [0, 1), e.g. 0.03")
    return m


def _input_shape(model: str, text: str | None, parse_shape: Any) -> tuple[int, ...]:
    if text:
        shape = tuple(parse_shape(text, name="--input-shape", allow_zero=False))
        return shape
    if model.startswith("zoo:"):
        from .. import zoo

        return tuple(zoo.default_input_shape(model[4:]))
    raise UsageError("--input-shape is required for a model file (e.g. --input-shape 8,3,224,224)")


def _human(args: argparse.Namespace, shape: tuple[int, ...], dtype: str, dev: str,
           rep: Any) -> str:
    from ..runtime.feedback import outcome_text

    what = "training step (forward and backward)" if args.train else "inference"
    lines = [f"convdoctor optimize {args.model}  input {'x'.join(map(str, shape))} {dtype} on {dev},"
             f" {what}"]
    lines.append(f"  layout: {'channels_last' if rep.channels_last else 'as given'} "
                 f"({rep.channels_last_reason})")
    if rep.graphs_reason:
        lines.append(f"  CUDA graphs: {'on' if rep.graphs else 'off'} ({rep.graphs_reason})")
    lines.append(f"  routing: {'on' if rep.routing else 'off'}"
                 + (f" ({rep.routing_reason})" if rep.routing_reason else ""))
    lines.append(f"  problems: {rep.problems} unique ({rep.from_db} from the database, "
                 f"{rep.tuned} tuned now in {rep.tuning_s:.1f} s, {rep.untuned} on PyTorch's path"
                 + (f", {rep.left_tiny} too small to tune" if rep.left_tiny else "")
                 + (f", {rep.left_minor} not worth tuning" if rep.left_minor else "") + ")")
    lines.append("")
    lines.append(f"  {'layer':<28} {'input':<20} {'dir':<6} {'choice':<26} {'source':<8} "
                 f"{'tuned ms':>9} {'pytorch ms':>10}")
    shown = rep.layers if args.all_layers else rep.layers[:40]
    for lay in shown:
        for i, d in enumerate(lay.directions):
            name = lay.layer if i == 0 else ""
            inp = ("x".join(map(str, lay.x_shape)) + (" cl" if "channels_last" in lay.memory_format
                                                      else "")) if i == 0 else ""
            wm = f"{d.winner_ms:.4f}" if d.winner_ms is not None else "-"
            bm = f"{d.baseline_ms:.4f}" if d.baseline_ms is not None else "-"
            lines.append(f"  {name[:28]:<28} {inp[:20]:<20} {d.direction:<6} {d.key[:26]:<26} "
                         f"{d.source:<8} {wm:>9} {bm:>10}")
    if len(rep.layers) > len(shown):
        lines.append(f"  ... {len(rep.layers) - len(shown)} more (--all-layers)")
    for note in _grouped(rep.notes)[:8]:
        lines.append(f"  note: {note}")
    lines.append("")
    if rep.speedup is not None:
        ms, (lo, hi) = rep.speedup_ms, rep.speedup_ci
        lines.append(f"  end to end ({rep.speedup_source}): PyTorch {ms['as_given']:.3f} ms, "
                     f"convdoctor {ms['optimized']:.3f} ms -> speedup {rep.speedup:.3f}x "
                     f"({rep.speedup_level:.0%} interval {lo:.3f}-{hi:.3f})")
    else:
        lines.append(f"  end to end: {outcome_text(rep)}")
    return "\n".join(lines)


def _grouped(notes: list[str]) -> list[str]:
    """'<problem>: <reason>' notes with the same reason collapse into one line with a count."""
    groups: dict[str, list[str]] = {}
    for n in notes:
        head, sep, reason = n.partition(": not tuned ")
        key = f"not tuned {reason}" if sep else n
        groups.setdefault(key, []).append(head)
    out = []
    for key, heads in groups.items():
        if key.startswith("not tuned ") and len(heads) > 1:
            out.append(f"{len(heads)} problems {key} (e.g. {heads[0]})")
        elif key.startswith("not tuned "):
            out.append(f"{heads[0]}: {key}")
        else:
            out.append(key)
    return out
