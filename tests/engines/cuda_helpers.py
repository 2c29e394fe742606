"""Helpers of the GPU tests of the engines and the CUDA backend (tests marked `gpu`)."""

from __future__ import annotations

from typing import Any

import pytest

from convdoctor.engines.registry import listed_by
from convdoctor.problem import ConvProblem
from convdoctor.settings import Settings


def cuda_backend() -> Any:
    """A CudaBackend with a short enumeration (skips where cudnn-frontend is missing)."""
    pytest.importorskip("cudnn")
    from convdoctor.tune.cuda_backend import CudaBackend

    return CudaBackend(settings=Settings().replace(cudnn_enum_extra=4, cudnn_enum_budget_s=2.0))


def torch_candidates(backend, p: ConvProblem) -> list[Any]:  # noqa: ANN001
    """The backend's candidates of every engine but the cuDNN plans (no enumeration)."""
    return [c for e in listed_by("cuda") if e.name not in ("cudnn", "cudnn-dual")
            for c in e.offers(p, backend)]
