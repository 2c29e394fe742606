"""Differential fuzzing of the checker against real PyTorch.

`gen_case(rng)` draws one random convolution (valid or not): 1D/2D/3D, transposed, groups, dilation,
string padding, padding modes, unbatched inputs, dtypes, dtype mismatches, bias shapes, empty tensors,
channels_last. `run_torch(case, device)` runs it for real and says whether PyTorch raised;
`run_checker(case, device)` asks convdoctor. `fuzz(n, seed, device)` compares them. Used by
tests/check/test_check_fuzz.py (CPU) and benchmarks/gpu/check_fuzz.py (cuDNN on a GPU).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DTYPES = ("float32",) * 6 + ("float64", "float16", "float16", "bfloat16", "bfloat16", "complex64",
                             "int32", "int64", "int8", "uint8", "int16", "bool")


def gen_case(rng: random.Random) -> dict[str, Any]:
    nsp = rng.choice((1, 2, 2, 3))
    transposed = rng.random() < 0.25

    def small(lo: int, hi: int, p_edge: float = 0.0, edge: int = 0) -> int:
        return edge if rng.random() < p_edge else rng.randint(lo, hi)

    groups = rng.choice((1, 1, 1, 2, 3, 4)) if rng.random() > 0.02 else rng.choice((0, -1))
    g = max(groups, 1)
    cin = g * rng.randint(1, 3) if rng.random() > 0.05 else rng.randint(0, 6)
    cout = g * rng.randint(1, 3) if rng.random() > 0.05 else rng.randint(0, 6)
    n = small(1, 3, 0.05, 0)
    spatial = [small(3, 12, 0.04, 0) if rng.random() > 0.15 else rng.randint(1, 3) for _ in range(nsp)]
    kernel = [small(1, 4, 0.02, 0) for _ in range(nsp)]
    stride = [small(1, 3, 0.03, rng.choice((0, -1))) for _ in range(nsp)]
    dilation = [small(1, 2, 0.03, rng.choice((0, -1))) for _ in range(nsp)]
    padding: Any = [small(0, 2, 0.03, -1) for _ in range(nsp)]
    if not transposed and rng.random() < 0.12:
        padding = rng.choice(("same", "same", "valid"))
    output_padding = [0] * nsp
    if transposed and rng.random() < 0.5:
        output_padding = [small(0, 3, 0.03, -1) for _ in range(nsp)]
    dtype = rng.choice(DTYPES)
    wdtype = dtype if rng.random() > 0.05 else rng.choice(DTYPES)
    if transposed:
        w_shape = [cin, max(cout // g, 0) if rng.random() > 0.04 else rng.randint(0, 4), *kernel]
        if rng.random() < 0.08:
            w_shape[0] = rng.randint(0, 6)
    else:
        w_shape = [cout, max(cin // g, 0) if rng.random() > 0.04 else rng.randint(0, 4), *kernel]
    x_shape = [n, cin, *spatial]
    unbatched = rng.random() < 0.05
    if unbatched:
        x_shape = x_shape[1:]
    if rng.random() < 0.03:  # wrong rank
        x_shape = x_shape[:-1] if len(x_shape) > 2 else x_shape + [3]
    bias = rng.random() < 0.5
    bias_len = (w_shape[1] * g if transposed else w_shape[0])
    if bias and rng.random() < 0.05:
        bias_len += rng.choice((-1, 1))
    bias_dtype = dtype if rng.random() > 0.05 else rng.choice(DTYPES)
    padding_mode = "zeros"
    if not transposed and not isinstance(padding, str) and rng.random() < 0.12:
        padding_mode = rng.choice(("reflect", "replicate", "circular"))
    channels_last = len(x_shape) in (4, 5) and rng.random() < 0.2
    w_on_cpu = rng.random() < 0.03 and padding_mode == "zeros"  # GPU fuzzing only: weight on the CPU
    return {"nsp": nsp, "transposed": transposed, "x_shape": x_shape, "w_shape": w_shape,
            "stride": stride, "padding": padding, "dilation": dilation, "groups": groups,
            "output_padding": output_padding, "dtype": dtype, "weight_dtype": wdtype,
            "bias": bias, "bias_len": max(bias_len, 0), "bias_dtype": bias_dtype,
            "padding_mode": padding_mode, "channels_last": channels_last, "w_on_cpu": w_on_cpu}


def _tensor(shape: list[int], dtype_name: str, device: str) -> Any:
    import torch

    dt = getattr(torch, dtype_name)
    if dt == torch.bool:
        return torch.randint(0, 2, shape, device=device).bool()
    if dt.is_floating_point or dt.is_complex:
        return torch.randn(shape, device=device, dtype=dt)
    return torch.randint(0, 3, shape, device=device, dtype=dt)


def _functional(case: dict[str, Any]) -> Callable[..., Any]:
    import torch.nn.functional as F

    return getattr(F, ("conv_transpose" if case["transposed"] else "conv") + f"{case['nsp']}d")


def run_torch(case: dict[str, Any], device: str = "cpu") -> tuple[bool, str]:
    """(ran, error message) for the real op on `device`."""
    import torch

    try:
        x = _tensor(case["x_shape"], case["dtype"], device)
        w_dev = "cpu" if case.get("w_on_cpu") else device
        w = _tensor(case["w_shape"], case["weight_dtype"], w_dev)
        b = _tensor([case["bias_len"]], case["bias_dtype"], device) if case["bias"] else None
        if case["channels_last"]:
            fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
            x = x.contiguous(memory_format=fmt)
            if w.dim() == x.dim():
                w = w.contiguous(memory_format=fmt)
    except Exception as exc:  # noqa: BLE001 - cannot even build the tensors: a harness problem
        return False, f"harness: {type(exc).__name__}: {exc}"
    try:
        if case["padding_mode"] != "zeros":
            mod = _module(case, device, w, b)
            if case.get("w_on_cpu") and device != "cpu":
                mod = mod.cpu()
            y = mod(x)
        elif case["transposed"]:
            y = _functional(case)(x, w, b, stride=case["stride"], padding=case["padding"],
                                  output_padding=case["output_padding"], groups=case["groups"],
                                  dilation=case["dilation"])
        else:
            y = _functional(case)(x, w, b, stride=case["stride"], padding=case["padding"],
                                  dilation=case["dilation"], groups=case["groups"])
        if device != "cpu":
            torch.cuda.synchronize()
        del y
        return True, ""
    except Exception as exc:  # noqa: BLE001
        text = str(exc).strip().splitlines()
        return False, f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _module(case: dict[str, Any], device: str, w: Any, b: Any) -> Any:
    """An nn.ConvNd with padding_mode carrying exactly this weight/bias (no shape validation at init)."""
    import torch

    cls = getattr(torch.nn, f"Conv{case['nsp']}d")
    mod = cls.__new__(cls)
    torch.nn.Module.__init__(mod)
    nsp = case["nsp"]
    from .shapes import expand

    mod.in_channels = case["x_shape"][1] if len(case["x_shape"]) > nsp + 1 else case["x_shape"][0]
    mod.out_channels = case["w_shape"][0]
    mod.kernel_size = tuple(case["w_shape"][2:])
    mod.stride = expand(case["stride"], nsp)
    mod.padding = expand(case["padding"], nsp)
    mod.dilation = expand(case["dilation"], nsp)
    mod.transposed = False
    mod.output_padding = (0,) * nsp
    mod.groups = case["groups"]
    mod.padding_mode = case["padding_mode"]
    mod._reversed_padding_repeated_twice = [p for p in reversed(mod.padding) for _ in range(2)]
    mod.weight = torch.nn.Parameter(w, requires_grad=False)
    mod.bias = None if b is None else torch.nn.Parameter(b, requires_grad=False)
    return mod.to(device) if device != "cpu" else mod


def run_checker(case: dict[str, Any], device: str = "cpu") -> tuple[bool, list[str]]:
    """(convdoctor says it runs, error ids)."""
    if case["padding_mode"] != "zeros":
        import torch

        from .api import check_model

        w = torch.empty(case["w_shape"], dtype=getattr(torch, case["weight_dtype"]), device="meta")
        b = (torch.empty([case["bias_len"]], dtype=getattr(torch, case["bias_dtype"]), device="meta")
             if case["bias"] else None)
        mod = _module(case, "meta", w, b)
        x = torch.empty(case["x_shape"], dtype=getattr(torch, case["dtype"]), device="meta")
        rep = check_model(mod, (x,), dtype=None, device=device, train=False, min_input=False,
                          memory_format="channels_last" if case["channels_last"] else "contiguous")
    else:
        from .checker import check_conv

        rep = check_conv(case["x_shape"], case["w_shape"], stride=case["stride"], padding=case["padding"],
                         dilation=case["dilation"], groups=case["groups"], dtype=case["dtype"],
                         weight_dtype=case["weight_dtype"], device=device, transposed=case["transposed"],
                         output_padding=case["output_padding"],
                         bias_shape=[case["bias_len"]] if case["bias"] else None,
                         bias_dtype=case["bias_dtype"],
                         memory_format="channels_last" if case["channels_last"] else "contiguous",
                         weight_device="cpu" if case.get("w_on_cpu") and device != "cpu" else None)
    return rep.ok, [f.id for f in rep.errors]


def known_difference(case: dict[str, Any], device: str = "cpu") -> str | None:
    """Cases where PyTorch's own CPU backends disagree with each other and convdoctor reports the
    strict verdict (documented in docs/check.md, 'Known differences')."""
    x = case["x_shape"]
    nonempty = len(x) >= 2 and all(s > 0 for s in x)
    if device != "cpu":
        if nonempty and any(d == 0 for d in case["dilation"]):
            return "cuda-zero-dilation-unchecked"
        groups = case["groups"]
        if (nonempty and not case["transposed"] and 0 in case["w_shape"][2:] and groups > 1
                and len(x) > 1 and x[1] == groups):
            return "cuda-zero-kernel-depthwise-native"
        return None
    if not nonempty:
        return None
    if isinstance(case["padding"], str) and case["bias"] and case["bias_dtype"] != case["dtype"]:
        return "string-padding-bias-dtype"
    if not case["transposed"]:
        return None
    if case["bias"] and case["bias_dtype"] != case["dtype"]:
        return "transposed-bias-dtype"
    if any(d == 0 for d in case["dilation"]):
        return "transposed-zero-dilation"
    return None


@dataclass
class FuzzResult:
    n: int = 0
    agree: int = 0
    torch_errors: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    known: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.agree / self.n if self.n else 1.0


def fuzz(n: int, seed: int = 0, device: str = "cpu",
         on_case: Callable[[int], None] | None = None) -> FuzzResult:
    rng = random.Random(seed)
    res = FuzzResult()
    t0 = time.perf_counter()
    for i in range(n):
        case = gen_case(rng)
        ran, msg = run_torch(case, device)
        ok, ids = run_checker(case, device)
        res.n += 1
        res.torch_errors += not ran
        if ran == ok:
            res.agree += 1
        else:
            row = {"index": i, "case": case, "torch_ran": ran, "torch_error": msg,
                   "checker_ok": ok, "checker_errors": ids}
            kd = known_difference(case, device)
            if kd:
                res.known.append({**row, "known_difference": kd})
            else:
                res.disagreements.append(row)
        if on_case:
            on_case(i)
    res.seconds = time.perf_counter() - t0
    return res


def main(argv: list[str] | None = None) -> int:
    """python -m convdoctor.check.fuzz --n 20000 [--seed 1] [--device cpu] [--out dis.json]"""
    import argparse
    import json
    import warnings

    from ..progress import Progress

    ap = argparse.ArgumentParser(prog="python -m convdoctor.check.fuzz")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", help="write disagreements and known differences as JSON here")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    with Progress(a.n, "fuzz") as bar:
        res = fuzz(a.n, a.seed, a.device, on_case=lambda _i: bar.update())
    if a.out:
        with open(a.out, "w", encoding="utf-8") as fh:
            json.dump({"n": res.n, "agree": res.agree, "torch_errors": res.torch_errors,
                       "disagreements": res.disagreements, "known": res.known}, fh, indent=1)
    kinds: dict[str, int] = {}
    for k in res.known:
        kinds[k["known_difference"]] = kinds.get(k["known_difference"], 0) + 1
    print(f"{res.n} cases on {a.device} (seed {a.seed}): {res.agree} agree ({100 * res.rate:.2f}%), "
          f"PyTorch rejected {res.torch_errors}, {len(res.disagreements)} unexplained disagreements, "
          f"known differences {kinds or 0}, {res.seconds:.1f}s")
    return 0 if not res.disagreements else 1


if __name__ == "__main__":
    raise SystemExit(main())
