"""The `torch:gemm` route (1x1 convolution as matrix products) at run time: outputs and gradients
equal PyTorch's through the routed autograd Function, in NCHW and channels_last, with bias and
stride; a call it cannot take falls to PyTorch's path."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from rt_helpers import grads_of, route_all

from convdoctor.engines.base import ConvArgs
from convdoctor.engines.gemm_exec import GEMM_EXEC
from convdoctor.engines.registry import executor_for as torch_exec
from convdoctor.runtime import fallback as fb
from convdoctor.runtime import site as S

GEMM = {"fprop": "torch:gemm", "dgrad": "torch:gemm", "wgrad": "torch:gemm"}


@pytest.fixture(autouse=True)
def _clean() -> object:
    fb.reset_warnings()
    yield
    fb.reset_warnings()


@pytest.mark.parametrize("shape,conv,cl", [
    ((2, 6, 9, 9), nn.Conv2d(6, 5, 1, stride=2), False),
    ((2, 6, 9, 9), nn.Conv2d(6, 5, 1, bias=False), True),
    ((3, 6, 11), nn.Conv1d(6, 4, 1), False),
    ((2, 6, 4, 5, 5), nn.Conv3d(6, 4, 1, stride=(1, 2, 2)), True),
])
def test_routed_gemm_matches_stock(shape: tuple[int, ...], conv: nn.Module, cl: bool) -> None:
    torch.manual_seed(0)
    m = conv.double()
    x = torch.randn(*shape, dtype=torch.float64)
    if cl:
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        x = x.contiguous(memory_format=fmt)
        m = m.to(memory_format=fmt)
    ref = grads_of(m, x)
    site = route_all(m, x, GEMM, "cpu")
    got = grads_of(m, x)
    route = next(iter(site.routes.values()))
    assert route.keys() == GEMM  # still on the gemm route: nothing fell back
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b)
    S.uninstall(m)


def test_torch_exec_knows_gemm() -> None:
    assert torch_exec("torch:gemm") is GEMM_EXEC
    assert torch_exec("torch:heuristic") is not None
    assert torch_exec("no:such") is None


def test_ineligible_call_raises_for_the_chain() -> None:
    a = ConvArgs(stride=(1, 1), padding=(1, 1), dilation=(1, 1), transposed=False,
                 output_padding=(0, 0), groups=1)
    with pytest.raises(ValueError, match="1x1"):
        GEMM_EXEC.fprop(torch.randn(1, 2, 4, 4), torch.randn(3, 2, 1, 1), None, a)


def test_ineligible_route_falls_back_to_pytorch() -> None:
    """A 3x3 layer wrongly routed to torch:gemm still trains: the chain moves to PyTorch's path."""
    torch.manual_seed(0)
    m = nn.Conv2d(3, 4, 3, padding=1).double()
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    ref = grads_of(m, x)
    route_all(m, x, GEMM, "cpu")
    got = grads_of(m, x)
    for a, b in zip(ref, got, strict=True):
        assert torch.allclose(a, b)
    S.uninstall(m)
