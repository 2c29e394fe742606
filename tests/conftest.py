"""Shared pytest setup: tests marked `gpu` run only where CUDA torch sees a GPU."""

from __future__ import annotations

import functools

import pytest


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
