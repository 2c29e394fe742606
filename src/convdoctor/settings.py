"""Every switch convdoctor reads from the environment, declared once: name, type, default, meaning.

`Settings.from_env()` reads them (at a command's start, at `optimize()`, in a tuning worker); code
below those boundaries receives a `Settings` value and never reads the environment itself. A
setting marked `result=True` changes what the tuner offers or how it measures, so it is part of the
tuning database's version key (`Settings.result_key()`): a result tuned under other settings is
stale, never served. `Settings.to_env()` hands the non-default values to a child process.
The reference table is docs/configuration.md (a test keeps it in step with this module).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import UsageError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _s(default: Any, env: str, meaning: str, *, result: bool = False,
       lo: float | None = None, hi: float | None = None) -> Any:
    return field(default=default, metadata={"env": env, "meaning": meaning, "result": result,
                                            "lo": lo, "hi": hi})


@dataclass(frozen=True)
class Settings:
    """convdoctor's switches. Defaults are what a user gets with nothing set."""

    debug: bool = _s(False, "CONVDOCTOR_DEBUG",
                     "print the traceback of an internal error (for bug reports)")
    db: str = _s("", "CONVDOCTOR_DB",
                 "tuning database file (empty: tuning.sqlite3 in the user cache directory)")
    cache_dir: str = _s("", "CONVDOCTOR_CACHE_DIR",
                        "where measured device peaks are cached (empty: the user cache directory)")
    tune_trace: str = _s("", "CONVDOCTOR_TUNE_TRACE",
                         "append every tuning run's decision steps to this JSON-lines file")
    code_commit: str = _s("", "CONVDOCTOR_CODE_COMMIT",
                          "the commit a bench result names where git cannot tell (a copied tree)")
    triton: bool = _s(True, "CONVDOCTOR_TRITON",
                      "offer convdoctor's own Triton kernels as candidates", result=True)
    cudnn_enum: bool = _s(True, "CONVDOCTOR_CUDNN_ENUM",
                          "enumerate cuDNN engines and knob settings beyond cuDNN's heuristic "
                          "lists", result=True)
    cudnn_enum_extra: int = _s(8, "CONVDOCTOR_CUDNN_ENUM_EXTRA",
                               "at most this many enumerated cuDNN plans per problem",
                               result=True, lo=0)
    cudnn_enum_budget_s: float = _s(2.0, "CONVDOCTOR_CUDNN_ENUM_BUDGET_S",
                                    "seconds of cuDNN enumeration per problem", result=True, lo=0)
    cudnn_max_plans: int = _s(0, "CONVDOCTOR_CUDNN_MAX_PLANS",
                              "cap on cuDNN candidates per problem, heuristic order kept "
                              "(0: no cap)", result=True, lo=0)
    cudnn_refine: bool = _s(True, "CONVDOCTOR_CUDNN_REFINE",
                            "try knob settings one step away from the fastest cuDNN plans",
                            result=True)
    cudnn_refine_budget_s: float = _s(6.0, "CONVDOCTOR_CUDNN_REFINE_BUDGET_S",
                                      "seconds of knob refinement per problem", result=True, lo=0)
    cudnn_dual: bool = _s(True, "CONVDOCTOR_CUDNN_DUAL",
                          "offer stride-1 fprop/dgrad as plans of the dual problem", result=True)
    ws_guard: bool = _s(True, "CONVDOCTOR_WS_GUARD",
                        "time a cuDNN plan with its workspace and replace a slow workspace "
                        "(tuner and optimize)", result=True)
    tune_prescreen: int = _s(0, "CONVDOCTOR_TUNE_PRESCREEN",
                             "check and warm up only this many candidates, the fastest by one "
                             "timed sample each, besides PyTorch's paths (0: every candidate)",
                             result=True, lo=0)
    tune_benchmark_reference: bool = _s(True, "CONVDOCTOR_TUNE_BENCHMARK_REFERENCE",
                                        "time cudnn.benchmark=True's pick of each problem as a "
                                        "reference (measured, never routed)", result=True)
    precompile: int = _s(-1, "CONVDOCTOR_PRECOMPILE",
                         "child processes compiling convdoctor's Triton kernels ahead of "
                         "tuning (`optimize`, `convdoctor tune`; -1: all CPU cores but two, at "
                         "most 12; 0: none)",
                         lo=-1)
    cpu_min_share: float = _s(0.6, "CONVDOCTOR_CPU_MIN_SHARE",
                              "CPU tuning: discard a batch of samples when the process got less "
                              "than this share of its threads' CPU time (0: never)",
                              result=True, lo=0, hi=1)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings `env` (default: os.environ) asks for; UsageError on a malformed value."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = env.get(f.metadata["env"])
            if raw is None or raw.strip() == "":
                continue
            values[f.name] = _parse(f, raw.strip())
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def result_key(self) -> str:
        """The result-changing settings that differ from their defaults, canonical ("default"
        when none do): part of the tuning database's version key."""
        parts = [f"{f.name}={_show(getattr(self, f.name))}" for f in dataclasses.fields(self)
                 if f.metadata["result"] and getattr(self, f.name) != f.default]
        return ";".join(parts) or "default"

    def to_env(self) -> dict[str, str]:
        """Environment variables that reproduce these settings in a child process (the
        non-default values only)."""
        return {f.metadata["env"]: _show(getattr(self, f.name)) for f in dataclasses.fields(self)
                if getattr(self, f.name) != f.default}


# `quick` tuning: the settings a user who wants results within the minute changes. Measured on an
# H100 (lab/tune_time.py, ConvNeXt-tiny and ResNet-50 layers at batch 64): the listing's knob
# refinement and the dual problem's own refinement took 1-6 s per problem (without refinement the
# dual problem's first heuristic plans are offered: a 7x7 depthwise bf16 dgrad's best path is one,
# 2.1x faster than any plan of the problem itself); cuDNN plans' first runs 1.7-1.9 s for the
# 19-20 plans of a 7x7 depthwise layer (lazy kernel loading), so at most 8 plans are kept in
# cuDNN's heuristic order. benchmark=True's pick is not timed: it is a reference that is never
# routed (its engine is among the cuDNN plans offered), and on ConvNeXt-tiny fp32 its search and
# timing took 6.8 s of 54 s of tuning. Of the enumerated plans a cap of 8 keeps the first 2 built
# (`engines.cudnn`), so enumeration stops at 2: the same candidates, without building 6 more plans
# per problem (where cuDNN's heuristics build no plan at all, enumeration fills the cap of 8).
# No knob refinement (a budget of 0, so a budget other than the default that the user sets is
# kept): on the 101-layer suite (H100, fp32 NCHW, lab/quick_vs_full.py) one second of it per
# problem brought quick choices within 0.2 % of the full tune's (fprop, dgrad; 0.6 % and 1.3 %
# behind without), at 1.8 s per problem instead of 1.0 s, but `optimize`'s first call then tuned
# half as many problems in its time limit (ConvNeXt-tiny fp32: 7 of 17, a step 3 % slower).
# Results tuned so are keyed by these settings in the database.
QUICK: dict[str, Any] = {"cudnn_refine_budget_s": 0.0, "cudnn_enum_budget_s": 0.5,
                         "cudnn_max_plans": 8, "cudnn_enum_extra": 2, "tune_prescreen": 8,
                         "tune_benchmark_reference": False}
TUNING_MODES = ("quick", "thorough")


def for_tuning(settings: Settings, mode: str) -> Settings:
    """`settings` for a tuning mode: "thorough" as given, "quick" with `QUICK` applied over the
    settings the user left at their defaults."""
    if mode not in TUNING_MODES:
        raise UsageError(f"unknown tuning mode {mode!r}", hint=f"use one of {', '.join(TUNING_MODES)}")
    if mode == "thorough":
        return settings
    defaults = Settings()
    return settings.replace(**{k: v for k, v in QUICK.items()
                               if getattr(settings, k) == getattr(defaults, k)})


def declared() -> list[dict[str, Any]]:
    """The declaration table: name, variable, type, default, meaning, result-changing."""
    return [{"name": f.name, "env": f.metadata["env"], "type": _type_name(f),
             "default": f.default, "meaning": f.metadata["meaning"],
             "result": f.metadata["result"]} for f in dataclasses.fields(Settings)]


def current() -> Settings:
    """The settings of this process's environment."""
    return Settings.from_env()


def _type_name(f: dataclasses.Field[Any]) -> str:
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    env, kind = f.metadata["env"], _type_name(f)
    if kind == "bool":
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise UsageError(f"{env}={raw!r} is not a switch", hint="use 1 or 0")
    if kind == "str":
        return raw
    try:
        value: Any = int(raw) if kind == "int" else float(raw)
    except ValueError:
        raise UsageError(f"{env}={raw!r} is not {'a whole number' if kind == 'int' else 'a number'}"
                         ) from None
    lo, hi = f.metadata["lo"], f.metadata["hi"]
    if not math.isfinite(value) or (lo is not None and value < lo) or (hi is not None
                                                                      and value > hi):
        rng = f"from {lo}" + (f" to {hi}" if hi is not None else " up")
        raise UsageError(f"{env}={raw!r} is out of range", hint=f"use a finite value {rng}")
    return value
