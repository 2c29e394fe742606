"""Shared pytest setup: tests marked `gpu` run only where CUDA torch sees a GPU; under
pytest-xdist each test process gets its share of the cores."""

from __future__ import annotations

import functools
import os

import pytest


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (the addopts in pyproject.toml): one test process per core, at most 8, and none
    besides pytest's own where a GPU is visible, so that GPU tests never share the device (or the
    host's cores, which time their launches) with another test process. `-n N` chooses N."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own reading of it
    if _gpu_available() or _cores() < 2:
        return 0
    return min(8, _cores())


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`-n N`), PyTorch's intra-op threads in each of the N test processes,
    and in the processes the tests start, are capped at cores // N: OpenMP threads that outnumber
    the cores spin against each other (a test of 2 s took 14 s with 2 processes of 2 threads on 2
    cores)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    threads = str(max(1, _cores() // int(workers)))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, threads)
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@functools.lru_cache(maxsize=1)
def _gpu_available() -> bool:
    try:
        import torch
    except Exception:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("gpu" in item.keywords for item in items):
        return
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA torch (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
