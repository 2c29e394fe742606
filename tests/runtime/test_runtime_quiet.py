"""Warnings PyTorch raises because of optimize's own timing and capture steps are silenced around
those steps only: the same text outside them, and any other warning (the model's own included),
still shows. CPU: the warnings are raised by hand where CUDA would raise them."""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn as nn
from rt_clock import FakeClock, use_clock

from convdoctor.runtime import graphs as G
from convdoctor.runtime import optimizer as O
from convdoctor.runtime import site as S
from convdoctor.runtime.options import OptimizeOptions
from convdoctor.runtime.quiet import OWN_WARNINGS, own_steps
from convdoctor.runtime.record import record_calls
from convdoctor.runtime.report import OptimizeReport
from convdoctor.runtime.verify import verify_routing

# The texts as PyTorch 2.x words them (torch/csrc/autograd/input_buffer.cpp,
# aten/src/ATen/cuda/CublasHandlePool.cpp)
STREAMS = ("The AccumulateGrad node's stream does not match the stream of the node that produced "
           "the incoming gradient. This may incur unnecessary synchronization and break CUDA "
           "graph capture if the AccumulateGrad node's stream is the default stream.")
CUBLAS = ("Attempting to run cuBLAS, but there was no current CUDA context! Attempting to set "
          "the primary context...")
USERS = "my model's own warning"


def _raise_all() -> None:
    warnings.warn(STREAMS, UserWarning, stacklevel=1)
    warnings.warn(CUBLAS, UserWarning, stacklevel=1)
    warnings.warn(USERS, UserWarning, stacklevel=1)


def _shown(fn: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in got]


def test_the_filter_is_scoped_to_the_steps() -> None:
    assert all(STREAMS.startswith(t) or CUBLAS.startswith(t) for t in OWN_WARNINGS)

    def inside() -> None:
        with own_steps():
            _raise_all()
            warnings.warn(STREAMS, RuntimeWarning, stacklevel=1)  # another category: shown
        _raise_all()  # after the step: everything shows again

    assert _shown(inside) == [USERS, STREAMS, STREAMS, CUBLAS, USERS]


class Warns(nn.Module):
    """A model whose forward raises the two texts and a warning of its own on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _raise_all()
        return self.conv(x)


def test_the_users_warnings_pass_through_the_timing_steps(monkeypatch) -> None:
    use_clock(monkeypatch, FakeClock(tick=1e-4))
    m, x = Warns(), torch.randn(1, 3, 8, 8)
    sites = {"conv": S.install(m.conv, "conv", "cpu")}
    _shown(lambda: record_calls(m, x, False, sites))
    report = OptimizeReport(device="cpu", train=False)
    shown = _shown(lambda: verify_routing(m, x, sites, report,
                                          OptimizeOptions(train=False, steps=3), "cpu"))
    assert shown and set(shown) == {USERS}
    assert report.verify_ms  # the steps ran
    assert _shown(lambda: m(x)) == [STREAMS, CUBLAS, USERS]


def test_optimize_hides_no_warning_of_the_models_own(monkeypatch) -> None:
    use_clock(monkeypatch, FakeClock(tick=1e-4))
    m, x = Warns(), torch.randn(1, 3, 8, 8)
    shown = _shown(lambda: O.optimize(m, x, train=False, db=False, tune_missing=False,
                                      steps=3, progress=False))
    assert USERS in shown


class CaptureThatWarns(G.GraphedForward):
    """The capture's warm-up and capture replaced by a forward that warns as a CUDA capture on a
    side stream does (and the model's own warning)."""

    def _capture_graphs(self, args: tuple[torch.Tensor, ...]) -> None:
        out = self.orig_forward(*args)
        self.out_spec, self.static_out = out, self._flat(out)


def test_capture_is_quiet_and_keeps_no_autograd_graph() -> None:
    m = Warns()
    args = (torch.randn(1, 3, 8, 8),)
    got: list[Any] = []
    shown = _shown(lambda: got.append(CaptureThatWarns(m, m.forward, args, train=True)))
    assert shown == [USERS]
    g = got[0]
    # the captured outputs hold no autograd graph (it would keep the parameters' gradient
    # accumulators of the capture's stream alive), and the output structure is kept
    assert all(o.grad_fn is None for o in g.static_out)
    assert isinstance(g.out_spec, torch.Tensor) and g.out_spec is g.static_out[0]
