"""Every engine convdoctor can run a convolution with, listed once.

`ENGINES` is the registry: its order is the order candidates are listed in. Each candidate key
belongs to exactly one engine (`engine_of`); nothing else in convdoctor matches key prefixes.
Adding an engine is its module plus one entry here.
"""

from __future__ import annotations

from typing import Any

from ..kernels import depthwise, dwgrad, fprop, smallc, wgrad
from .base import Engine
from .cpu import CPU
from .cudnn import CUDNN
from .cudnn_dual import CUDNN_DUAL
from .gemm import GEMM
from .im2col import IM2COL
from .torch_paths import TORCH, TORCH_NATIVE

ENGINES: tuple[Engine, ...] = (
    TORCH,
    GEMM,
    IM2COL,
    depthwise.ENGINE,
    dwgrad.ENGINE,
    wgrad.ENGINE,
    smallc.ENGINE,
    fprop.ENGINE,
    TORCH_NATIVE,
    CUDNN,
    CUDNN_DUAL,
    CPU,
)

# "twin:<key>": candidate <key> run in the torch:heuristic child process, so the bench referee can
# compare a choice with PyTorch's heuristic path inside one process (never a tuning candidate)
TWIN_PREFIX = "twin:"


def engine_of(key: str) -> Engine | None:
    """The engine that owns `key`, or None for a key no engine knows."""
    for e in ENGINES:
        if e.owns(key):
            return e
    return None


def known(key: str) -> bool:
    """`key` names a candidate of some engine (a twin counts as its inner key)."""
    if key.startswith(TWIN_PREFIX):
        key = key[len(TWIN_PREFIX):]
    return engine_of(key) is not None


def built_by_name(key: str) -> bool:
    """`key`'s runner builds it by name, so a key chosen in another process (a cuDNN plan found
    by knob refinement, a Triton configuration) can be timed where this listing did not list it."""
    e = engine_of(key)
    return e is not None and e.by_name


def is_plan_key(key: str) -> bool:
    """A key run by a cuDNN plan through cudnn-frontend (`cudnn:` or `cudnn-dual:`)."""
    return engine_of(key) in (CUDNN, CUDNN_DUAL)


def routed(key: str) -> bool:
    """The runtime may route a layer to `key` (not `torch:benchmark`, not an unknown key)."""
    e = engine_of(key)
    return e is not None and e.routes(key)


def listed_by(backend: str) -> tuple[Engine, ...]:
    """The engines whose candidates a tuning backend ("cuda" or "cpu") lists, in order: the CPU
    backend lists the CPU paths, the CUDA backend every other engine."""
    return tuple(e for e in ENGINES if (e.device == "cpu") == (backend == "cpu"))


def runs_on(key: str, device_type: str) -> bool:
    """The runtime may build `key`'s executor for tensors on `device_type`."""
    e = engine_of(key)
    return e is not None and e.device in (device_type, "any")


def executor_for(key: str, problem: Any = None, reference_s: float | None = None) -> Any:
    """The runtime executor of `key` for layers of `problem`'s shape (engines of PyTorch's paths
    need no problem), or None for a key no engine knows or one without an executor."""
    e = engine_of(key)
    return None if e is None else e.executor(key, problem, reference_s)
