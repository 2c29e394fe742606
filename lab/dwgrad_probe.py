"""How close does convdoctor's depthwise wgrad kernel (`convdoctor.kernels.dwgrad`) come to the
memory roofline, and how does it compare with PyTorch's paths?

For depthwise weight-gradient problems - ConvNeXt-tiny's 7x7 layers (96@56, 192@28, 384@14, 768@7,
batch 64) in fp32 and bf16, NCHW and channels-last; the MobileNetV2 and EfficientNet-B0 depthwise
layers of the cnn-layers suite (3x3 and 5x5, strides 1 and 2, batch 64) in fp32 NCHW - it times
every configuration the kernel offers and PyTorch's paths for the same weight gradient
(`aten.convolution_backward` with only dw requested: cuDNN with its heuristics, cuDNN with
benchmark=True, cuDNN off) with convdoctor's `LaunchTimer` (CUDA events, the L2 flushed before
every launch, one launch per sample, the median of --reps samples after warm-up), and checks each
configuration against a float64 reference (norm-wise relative error, dw poisoned with NaN first).
The roofline of a problem is the time to read x and dy once at the device's bandwidth, measured
here as a 1 GiB device-to-device copy (bytes read + bytes written per second).

One process. Problems run in the listed order (ConvNeXt fp32 NCHW first); no new problem starts
after --budget-s seconds, and the rest are listed as skipped. A kernel error is recorded for its
configuration; a CUDA error that leaves the device unusable ends the run, keeping what was
measured. OUT is written when the run ends (never over an existing file; OUT.partial holds the
rows so far while it runs).

    PYTHONPATH=src python lab/dwgrad_probe.py OUT.json                # the default set (23)
    PYTHONPATH=src python lab/dwgrad_probe.py OUT.json --set all      # every suite layer too (31)
    PYTHONPATH=src python lab/dwgrad_probe.py --list [--set all]      # the problems; no GPU needed
    options: --match REGEX (problem names), --problem "NAME=wgrad n=.. c=.. ... groups=.." (adds
    one, repeatable), --reps N (default 15), --budget-s S (default 270), --extra-configs C1,C2
    (configurations timed besides the offered ones; each row's "offered" says which is which)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convdoctor.errors import UsageError
from convdoctor.problem import ConvProblem

# ConvNeXt-tiny (torchvision.models.convnext_tiny, 224x224 input): the 7x7 depthwise conv of each
# stage's blocks, dims (96, 192, 384, 768) at (56, 28, 14, 7)
CONVNEXT = tuple((f"convnext_tiny dw{c}@{h}", f"n=64 c={c} h={h} w={h} k={c} r=7 s=7 pad=3 "
                  f"groups={c}") for c, h in ((96, 56), (192, 28), (384, 14), (768, 7)))
# suite layers of the default set (the others come with --set all)
DEFAULT_SUITE = ("dw32@112/s1", "dw96@112/s2", "dw144@56/s2", "dw960@7/s1",
                 "dw5x5 144@56/s2 TF-same", "dw5x5 240@28", "dw5x5 1152@7")
SUITE_GROUPS = ("mobilenet_v2", "efficientnet_b0")
TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}   # norm-wise relative error
COPY_BYTES = 1 << 30


@dataclass(frozen=True)
class Item:
    name: str
    problem: ConvProblem


def problems(which: str, match: str | None, extra: list[str]) -> list[Item]:
    """The problems to probe, in order; UsageError for a bad --problem or --match."""
    from convdoctor.bench.suites import load_suite
    from convdoctor.kernels import dwgrad as dg

    items: list[Item] = []
    for dtype in ("float32", "bfloat16"):
        for layout in ("nchw", "nhwc"):
            for name, text in CONVNEXT:
                p = ConvProblem.parse(f"wgrad {text} dtype={dtype} layout={layout}")
                items.append(Item(f"{name} {_dt(dtype)} {layout}", p))
    for e in load_suite("cnn-layers").entries:
        if e.group not in SUITE_GROUPS or (which == "default" and e.name not in DEFAULT_SUITE):
            continue
        p = e.problem(direction="wgrad", batch=64)
        if p.groups == p.c == p.k:
            items.append(Item(f"{e.group} {e.name} fp32 nchw", p))
    for spec in extra:
        name, sep, text = spec.partition("=")
        if not sep or not name.strip() or "=" not in text:
            raise UsageError(f"--problem {spec!r}: expected NAME=PROBLEM, e.g. "
                             "'mine=wgrad n=8 c=64 h=32 w=32 k=64 r=5 s=5 pad=2 groups=64'")
        p = ConvProblem.parse(text if text.split()[0] == "wgrad" else "wgrad " + text)
        why = dg.unfit(p)
        if why:
            raise UsageError(f"--problem {name.strip()!r}: the kernel does not run it: {why}")
        items.append(Item(name.strip(), p))
    if match:
        try:
            rx = re.compile(match)
        except re.error as exc:
            raise UsageError(f"--match {match!r} is not a regular expression ({exc})") from None
        items = [i for i in items if rx.search(i.name)]
    if not items:
        raise UsageError("no problem left to probe (check --match)")
    return items


def _dt(dtype: str) -> str:
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[dtype]


# ------------------------------------------------------------------ GPU side
def _timer_us(fn: Any, reps: int) -> dict[str, float]:
    """Median (and spread) of `reps` cold launches of `fn`, microseconds."""
    from convdoctor.measure.timing import LaunchTimer

    t = LaunchTimer(fn, batch=1, graph=False)
    s = sorted(v * 1e6 for v in t.time(reps))
    q1, q3 = s[len(s) // 4], s[(3 * len(s)) // 4]
    return {"us": statistics.median(s), "min_us": s[0], "iqr_us": q3 - q1}


def bandwidth(reps: int) -> dict[str, float]:
    """Device-to-device copy of 1 GiB: (read + written bytes) per second."""
    import torch

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = _timer_us(lambda: dst.copy_(src), reps)
    return {"copy_us": t["us"], "bytes_per_s": 2 * COPY_BYTES / (t["us"] * 1e-6)}


def _tensors(p: ConvProblem) -> tuple[Any, Any, Any]:
    import torch

    dt = getattr(torch, p.dtype)
    g = torch.Generator(device="cuda").manual_seed(0)

    def make(shape: tuple[int, ...]) -> Any:
        t = torch.randn(shape, device="cuda", generator=g).to(dt)
        # channels-last memory (1D: (N, W, C)); NCHW as it comes
        return t.movedim(1, -1).contiguous().movedim(-1, 1) if p.layout == "nhwc" else t
    return make(p.x_shape()), make(p.y_shape()), make(p.w_shape())


def _torch_wgrad(p: ConvProblem, x: Any, dy: Any, w: Any) -> Any:
    """PyTorch's weight gradient of `p` (asymmetric padding: x pre-padded, as convdoctor's runtime
    does) as a callable."""
    import torch
    import torch.nn.functional as F

    nd = p.ndim
    if p.symmetric_padding:
        xp, pads = x, list(p.pad_pre)
    else:
        pad = [v for i in reversed(range(nd)) for v in (p.pad_pre[i], p.pad_post[i])]
        xp, pads = F.pad(x, pad), [0] * nd

    def run() -> Any:
        return torch.ops.aten.convolution_backward(
            dy, xp, w, None, list(p.stride), pads, list(p.dilation), False, [0] * nd, p.groups,
            [False, True, False])[1]
    return run


def _rel_err(a: Any, ref: Any) -> float:
    d = (a.double() - ref).norm().item()
    r = ref.norm().item()
    return d / r if r > 0 else d


def probe_one(item: Item, reps: int, bw: float, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every offered configuration, the `extra` ones, and PyTorch's three paths on one problem."""
    import torch

    from convdoctor.kernels import dwgrad as dg

    p = item.problem
    x, dy, w = _tensors(p)
    read = x.numel() * x.element_size() + dy.numel() * dy.element_size()
    row: dict[str, Any] = {"name": item.name, "problem": p.key(), "bytes_read": read,
                           "roofline_us": read / bw * 1e6}
    with torch.backends.cudnn.flags(enabled=False):   # PyTorch's native float64 kernel
        ref = _torch_wgrad(p, x.double(), dy.double(), w.double())()
    dw = torch.empty_like(w)
    out_sp = p.out_spatial()
    oh, ow = (1, out_sp[0]) if p.ndim == 1 else out_sp
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    cfgs: dict[str, Any] = {}
    offered = dg.offered(p)
    for cfg in dict.fromkeys((*offered, *(extra if offered else ()))):
        plan = dataclasses.asdict(dg.plan(p.n, p.c, oh, ow, dg.parse_config(cfg), sms))
        def launch(c: str = cfg) -> Any:
            return dg.run(x, dy, dw, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation,
                          config=c)
        try:
            dw.fill_(float("nan"))
            t0 = time.time()
            launch()
            torch.cuda.synchronize()
            first = time.time() - t0
            err = _rel_err(dw, ref)
            cfgs[cfg] = {**_timer_us(launch, reps), "rel_err": err,
                         "ok": bool(err <= TOLERANCE[p.dtype]), "first_call_s": first,
                         "plan": plan, "offered": cfg in offered}
        except Exception as exc:  # noqa: BLE001 - one configuration's failure is a result
            cfgs[cfg] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300],
                         "plan": plan}
            if "CUDA" in str(exc) or "illegal" in str(exc):
                row["configs"] = cfgs
                raise
    row["configs"] = cfgs
    ok = {k: v for k, v in cfgs.items() if v.get("ok")}
    if ok:
        best = min(ok, key=lambda k: ok[k]["us"])
        row.update(best_config=best, best_us=ok[best]["us"],
                   roofline_fraction=row["roofline_us"] / ok[best]["us"])
    row["torch"] = _torch_paths(p, x, dy, w, ref, reps)
    times = [v["us"] for v in row["torch"].values() if "us" in v]
    if times:
        row["torch_best_us"] = min(times)
        if ok:
            row["speedup_vs_torch_best"] = row["torch_best_us"] / row["best_us"]
    return row


def _torch_paths(p: ConvProblem, x: Any, dy: Any, w: Any, ref: Any, reps: int
                 ) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    run = _torch_wgrad(p, x, dy, w)
    for name, enabled, bench in (("cudnn_heuristic", True, False), ("cudnn_benchmark", True, True),
                                 ("cudnn_off", False, False)):
        try:
            with torch.backends.cudnn.flags(enabled=enabled, benchmark=bench):
                got = run()          # benchmark=True: its search happens here, untimed
                torch.cuda.synchronize()
                out[name] = {**_timer_us(run, reps), "rel_err": _rel_err(got, ref)}
        except Exception as exc:  # noqa: BLE001
            out[name] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]}
    return out


def _line(row: dict[str, Any]) -> str:
    t = row.get("torch", {})

    def us(k: str) -> str:
        v = t.get(k, {}).get("us")
        return f"{v:8.1f}" if v is not None else "       -"
    fails = [k for k, v in row.get("configs", {}).items() if not v.get("ok")]
    if "best_us" not in row:
        return f"{row['name']:38s} no configuration passed: {fails}"
    errs = max(v["rel_err"] for v in row["configs"].values() if "rel_err" in v)
    return (f"{row['name']:38s} {row['bytes_read'] / 1e6:7.1f} MB  roof {row['roofline_us']:7.1f}"
            f"  best {row['best_us']:7.1f} {row['best_config']:18s}"
            f" {100 * row['roofline_fraction']:5.1f}% of roof | torch heur {us('cudnn_heuristic')}"
            f" bench {us('cudnn_benchmark')} off {us('cudnn_off')}"
            f" | x{row.get('speedup_vs_torch_best', math.nan):5.1f} | err {errs:.1e}"
            + (f" FAILED {fails}" if fails else ""))


def _write(path: Path, doc: dict[str, Any], final: bool) -> None:
    text = json.dumps(doc, indent=1)
    partial = path.with_name(path.name + ".partial")
    if not final:
        partial.write_text(text)
        return
    with open(path, "x") as fh:      # never over a file that exists
        fh.write(text)
    partial.unlink(missing_ok=True)


def run(args: argparse.Namespace, items: list[Item], out: Path) -> int:
    import torch
    import triton

    from convdoctor.kernels import dwgrad as dg

    start = time.time()
    torch.backends.cudnn.allow_tf32 = True       # PyTorch's default for convolutions
    bw = bandwidth(args.reps)
    torch.cuda.empty_cache()       # the copy's 2 GiB
    doc: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "triton": triton.__version__, "reps": args.reps, **bw,
                           "tolerance": TOLERANCE, "rows": [], "skipped": []}
    print(f"{doc['device']}: copy bandwidth {bw['bytes_per_s'] / 1e12:.2f} TB/s "
          f"(1 GiB in {bw['copy_us']:.0f} us); torch {torch.__version__}, triton "
          f"{triton.__version__}; {len(items)} problems", flush=True)
    dg.unavailable.cache_clear()
    if dg.unavailable():
        print(f"the kernel cannot run here: {dg.unavailable()}", file=sys.stderr)
        return 2
    for i, item in enumerate(items):
        if time.time() - start > args.budget_s:
            doc["skipped"] = [it.name for it in items[i:]]
            print(f"budget of {args.budget_s:.0f} s spent: {len(items) - i} problems skipped",
                  flush=True)
            break
        try:
            row = probe_one(item, args.reps, bw["bytes_per_s"], args.extra)
        except Exception as exc:  # noqa: BLE001 - the device is likely unusable now
            doc["rows"].append({"name": item.name, "problem": item.problem.key(),
                                "error": f"{type(exc).__name__}: {exc}"[:500]})
            doc["skipped"] = [it.name for it in items[i + 1:]]
            print(f"{item.name}: {type(exc).__name__}: {exc}"[:300], flush=True)
            break
        finally:
            torch.cuda.empty_cache()
        doc["rows"].append(row)
        print(_line(row), flush=True)
        _write(out, doc, final=False)
    doc["wall_s"] = time.time() - start
    _write(out, doc, final=True)
    rows = [r for r in doc["rows"] if "best_us" in r]
    if rows:
        frac = statistics.geometric_mean([r["roofline_fraction"] for r in rows])
        sp = [r["speedup_vs_torch_best"] for r in rows if "speedup_vs_torch_best" in r]
        print(f"{len(rows)} problems in {doc['wall_s']:.0f} s: geomean {100 * frac:.1f}% of the "
              f"roofline" + (f", {statistics.geometric_mean(sp):.1f}x PyTorch's best path"
                             if sp else "") + f"; written to {out}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Time convdoctor's depthwise wgrad kernel (every offered configuration) and "
                    "PyTorch's paths on depthwise wgrad problems, against the memory roofline.")
    ap.add_argument("out", nargs="?", help="JSON file to write (must not exist)")
    ap.add_argument("--set", dest="which", choices=("default", "all"), default="default",
                    help="default: ConvNeXt-tiny x {fp32,bf16} x {nchw,nhwc} and 7 suite layers;"
                         " all: every MobileNetV2/EfficientNet-B0 depthwise suite layer")
    ap.add_argument("--match", help="only problems whose name matches this regular expression")
    ap.add_argument("--problem", action="append", default=[], metavar="NAME=PROBLEM",
                    help="add a problem, e.g. 'mine=wgrad n=8 c=64 h=32 w=32 k=64 r=5 s=5 pad=2 "
                         "groups=64 dtype=bf16 layout=nhwc' (repeatable)")
    ap.add_argument("--reps", type=int, default=15, help="timed samples per path (default 15)")
    ap.add_argument("--budget-s", type=float, default=270.0,
                    help="start no new problem after this many seconds (default 270)")
    ap.add_argument("--extra-configs", default="", metavar="C1,C2",
                    help="configurations to time besides the offered ones, e.g. c64p2h8w4")
    ap.add_argument("--list", action="store_true", help="print the problems and exit")
    args = ap.parse_args(argv)
    try:
        from convdoctor.kernels import dwgrad as dg

        args.extra = tuple(c for c in args.extra_configs.split(",") if c.strip())
        for c in args.extra:
            try:
                dg.parse_config(c)
            except ValueError as exc:
                raise UsageError(f"--extra-configs: {exc}") from None
        if args.reps < 3 or args.budget_s <= 0:
            raise UsageError("--reps must be at least 3 and --budget-s positive")
        items = problems(args.which, args.match, args.problem)
    except UsageError as exc:
        print(f"dwgrad_probe: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for it in items:
            print(f"{it.name:38s} {it.problem.key()}")
        return 0
    if not args.out:
        print("dwgrad_probe: name the JSON file to write (or --list)", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() or not out.parent.is_dir():
        print(f"dwgrad_probe: {out} exists or its folder does not; name a new file",
              file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("dwgrad_probe: no CUDA device here", file=sys.stderr)
        return 2
    return run(args, items, out)


if __name__ == "__main__":
    sys.exit(main())
