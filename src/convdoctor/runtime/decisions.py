"""`optimize`'s measured decisions for a model, kept in the tuning database and applied again.

With `verify`, `optimize` decides the layout, the routing, the CUDA graphs and the end-to-end
speedup by timing whole steps (20 s on ConvNeXt-tiny at batch 64 on an H100). Once they are
measured, they are stored beside the tuning results; a later `optimize` of the same model, inputs
and options in the same environment, with every problem served by the database, applies them as
they were and times nothing (`remeasure=True` measures them again). The report says so: each
reason ends with `REUSED` and `speedup_source` names the date of the measurement.

The key (`model_key`) hashes what decides the measurement: the model's structure (module types,
the code of their `forward`, their plain settings such as flags and sizes, parameter and buffer
names, shapes and dtypes), the inputs (tensors by shape, dtype and layout, other values by value),
train or eval, autocast, PyTorch's TF32, determinism and benchmark flags, and the options that
decide (channels_last, graphs, margin, steps, tuning), and convdoctor's own runtime code (a hash of
the sources of `convdoctor.runtime`, `convdoctor.engines` and `convdoctor.measure`: a verdict such
as "not capturable" measured by one version is not reused by another). It is stored under the
tuning environment's device and versions keys, like a tuning result: another GPU, driver, library
or kernel source measures anew. A stored decision is applied only when this call's problems and their winners are
the ones it was measured with. A call that left problems untuned stores its layout decision only
(`partial`): the next call reuses the layout and measures the rest.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from typing import Any

import torch

from .options import OptimizeOptions
from .report import OptimizeReport

REUSED = " (measured before for this model and environment, reused)"
FORMAT = 1


@dataclass
class Decision:
    """What one measured `optimize` decided (the report's fields of the same names)."""

    problems: list[str]
    # problem key -> the winner's candidate key it was measured with
    winners: dict[str, str] = field(default_factory=dict)
    channels_last: bool = False
    channels_last_reason: str = ""
    layout_ms: dict[str, float] = field(default_factory=dict)
    routing: bool = False
    routing_reason: str = ""
    routing_variant: str = ""
    verify_ms: dict[str, float] = field(default_factory=dict)
    graphs: bool = False
    graphs_routed: bool = False
    graphs_reason: str = ""
    graphs_ms: dict[str, float] = field(default_factory=dict)
    speedup: float | None = None
    speedup_ci: list[float] = field(default_factory=list)
    speedup_level: float = 0.0
    speedup_ms: dict[str, float] = field(default_factory=dict)
    speedup_source: str = ""
    margins: dict[str, float] = field(default_factory=dict)
    extensions: dict[str, int] = field(default_factory=dict)
    undone: bool = False
    created: float = 0.0
    # only the layout decision holds: a call that left problems untuned (the quick time limit)
    # stores its layout, which PyTorch's own paths decided, and the next call reuses it while it
    # measures the rest anew
    partial: bool = False

    @classmethod
    def of(cls, report: OptimizeReport, winners: dict[str, str], undone: bool) -> Decision:
        names = {f.name for f in fields(cls)} - {"problems", "winners", "undone", "created",
                                                  "partial"}
        values = {n: getattr(report, n) for n in names}
        for n in ("channels_last_reason", "routing_reason", "graphs_reason", "speedup_source"):
            values[n] = str(values[n]).split(REUSED)[0]    # as measured, without "reused"
        return cls(problems=sorted(winners), winners=dict(winners), undone=undone,
                   created=time.time(), **values)

    @classmethod
    def layout_of(cls, report: OptimizeReport) -> Decision:
        """The layout decision of a call whose other decisions cannot be stored (`partial`)."""
        return cls(problems=[], channels_last=report.channels_last,
                   channels_last_reason=str(report.channels_last_reason).split(REUSED)[0],
                   layout_ms=dict(report.layout_ms), created=time.time(), partial=True)

    def fits(self, winners: dict[str, str]) -> bool:
        """Were these decisions measured on these problems with these winners?"""
        return (not self.partial and sorted(winners) == self.problems
                and winners == self.winners)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Decision | None:
        names = {f.name for f in fields(cls)}
        if d.get("format") != FORMAT or not isinstance(d.get("problems"), list):
            return None
        try:
            return cls(**{k: v for k, v in d.items() if k in names})
        except TypeError:
            return None

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.created))


def _tensor_sig(t: torch.Tensor) -> str:
    fmt = ("cl" if t.dim() in (4, 5) and not t.is_contiguous() and t.is_contiguous(
        memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d) else "c")
    return f"T{tuple(t.shape)}{t.dtype}{t.device.type}{fmt}{t.requires_grad}"


_SIMPLE = (bool, int, float, str, type(None))


def _inputs_sig(obj: Any) -> str:
    """Tensors by shape, dtype, device, layout; other values by repr; containers by structure."""
    if isinstance(obj, torch.Tensor):
        return _tensor_sig(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj).__name__ + "(" + ",".join(_inputs_sig(o) for o in obj) + ")"
    if isinstance(obj, dict):
        return "{" + ",".join(f"{k!r}:{_inputs_sig(v)}" for k, v in obj.items()) + "}"
    return repr(obj)[:200] if isinstance(obj, _SIMPLE) else type(obj).__qualname__


def _code_bytes(code: Any) -> bytes:
    """A code object's bytecode and constants, nested code objects included (their repr holds a
    memory address, which differs from process to process)."""
    out = [code.co_code]
    for c in code.co_consts:
        out.append(_code_bytes(c) if hasattr(c, "co_code") else repr(c).encode())
    return b"\0".join(out)


def _module_sig(m: torch.nn.Module) -> str:
    """The module's type, the code of its forward and its plain settings (flags, sizes)."""
    fwd = getattr(type(m).forward, "__code__", None)
    code = hashlib.sha256(_code_bytes(fwd)).hexdigest()[:16] if fwd is not None else ""
    plain = sorted((k, repr(v)[:100]) for k, v in vars(m).items()
                   if not k.startswith("_") and isinstance(v, (*_SIMPLE, tuple)))
    return f"{type(m).__module__}.{type(m).__qualname__}:{code}:{plain}"


def _autocast(dev: str) -> tuple[bool, str]:
    try:
        on = bool(torch.is_autocast_enabled(dev))
        return on, str(torch.get_autocast_dtype(dev)) if on else ""
    except (TypeError, AttributeError, RuntimeError):   # a PyTorch without the per-device calls
        return bool(torch.is_autocast_enabled()), ""


@functools.lru_cache(maxsize=1)
def runtime_source_hash() -> str:
    """The first 12 hex digits of the SHA-256 of the code that measures and applies decisions
    (`convdoctor.runtime`, `convdoctor.engines`, `convdoctor.measure`)."""
    h = hashlib.sha256()
    for pkg in ("convdoctor.runtime", "convdoctor.engines", "convdoctor.measure"):
        for f in sorted(resources.files(pkg).iterdir(), key=lambda t: t.name):
            if f.name.endswith(".py"):
                h.update(f"{pkg}/{f.name}".encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:12]


def model_key(model: torch.nn.Module, inputs: Any, opts: OptimizeOptions, dev: str) -> str:
    """The hash that names a model's decisions (see the module docstring). Raises for a model it
    cannot describe (uninitialised lazy parameters): `DecisionStore.of` then keeps nothing."""
    h = hashlib.sha256()
    for name, m in model.named_modules():
        h.update(f"M{name}:{_module_sig(m)}".encode())
    for name, p in model.named_parameters():
        h.update(f"P{name}:{_tensor_sig(p)}".encode())
    for name, b in model.named_buffers():
        h.update(f"B{name}:{_tensor_sig(b)}".encode())
    h.update(("I" + _inputs_sig(inputs)).encode())
    amp, amp_dtype = _autocast(dev)
    flags = {
        "train": opts.train, "autocast": amp, "autocast_dtype": amp_dtype,
        "cudnn_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "deterministic": torch.backends.cudnn.deterministic,
        "benchmark": torch.backends.cudnn.benchmark,
        "channels_last": str(opts.channels_last), "graphs": str(opts.graphs),
        "margin": opts.margin, "steps": opts.steps, "tuning": opts.tuning,
        "runtime": runtime_source_hash(),
    }
    h.update(json.dumps(flags, sort_keys=True).encode())
    return h.hexdigest()[:32]


class DecisionStore:
    """The database and environment decisions are read from and written to (None-safe: without
    a database that keeps decisions, nothing is reused or stored)."""

    def __init__(self, db: Any, env: dict[str, str] | None, key: str) -> None:
        self.db = db
        self.env = env
        self.key = key

    @classmethod
    def of(cls, tuning: Any, model: torch.nn.Module, inputs: Any, opts: OptimizeOptions,
           dev: str) -> DecisionStore:
        """The store of `tuning`'s database and environment (a `runtime.tuning.Tuning`);
        without a database that keeps decisions, nothing is reused or stored."""
        db = getattr(tuning, "db", None)
        env = getattr(tuning, "env", None)
        if (not opts.verify or not getattr(tuning, "available", False) or db is None
                or not hasattr(db, "decision") or env is None):
            return cls(None, None, "")
        try:
            key = model_key(model, inputs, opts, dev)
        except Exception:  # noqa: BLE001 - a model the key cannot describe is measured each time
            return cls(None, None, "")
        return cls(db, env, key)

    def recall(self) -> Decision | None:
        if self.db is None or self.env is None:
            return None
        try:
            d = self.db.decision(self.env, self.key)
        except Exception:  # noqa: BLE001 - a database that cannot answer measures anew
            return None
        return Decision.from_dict(d) if isinstance(d, dict) else None

    def store(self, decision: Decision) -> None:
        if self.db is None or self.env is None:
            return
        try:
            self.db.remember_decision(self.env, self.key, decision.to_dict())
        except Exception:  # noqa: BLE001 - a read-only or locked database keeps nothing
            pass


def reuse_layout(d: Decision, report: OptimizeReport) -> bool:
    report.channels_last = d.channels_last
    report.channels_last_reason = d.channels_last_reason + REUSED
    report.layout_ms = dict(d.layout_ms)
    return d.channels_last


def reuse_speedup(d: Decision, report: OptimizeReport) -> None:
    report.speedup = d.speedup
    report.speedup_ci = list(d.speedup_ci)
    report.speedup_level = d.speedup_level
    report.speedup_ms = dict(d.speedup_ms)
    report.speedup_source = f"{d.speedup_source}; measured {d.when()}{REUSED}"
