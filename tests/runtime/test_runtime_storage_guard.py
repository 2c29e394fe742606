"""The check that sends a call to the eager path when the model's parameters or buffers are not
the storage its CUDA graph captured (CPU: the guard itself needs no GPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from convdoctor.runtime import graphs as G


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))


@pytest.fixture(params=["hooks", "no hooks"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "no hooks":
        monkeypatch.setattr(G, "_generation", lambda: None)
    return str(request.param)


def test_unchanged_and_in_place_updates_pass(mode: str) -> None:
    m = _net()
    g = G.StorageGuard(m)
    assert g.ok()
    m.load_state_dict(_net().state_dict())  # copies in place: same storage
    with torch.no_grad():
        m[0].weight.add_(1.0)
    _net()  # another model registering its parameters: a re-walk, same tensors
    assert g.ok() and g.ok()


def test_assigned_parameter_is_seen(mode: str) -> None:
    m = _net()
    g = G.StorageGuard(m)
    m[0].weight = nn.Parameter(m[0].weight.detach().clone())
    assert not g.ok()


def test_data_swap_is_seen(mode: str) -> None:
    m = _net()
    g = G.StorageGuard(m)
    m[3].weight.data = m[3].weight.data.clone()
    assert not g.ok()


def test_new_buffer_and_replaced_module_are_seen(mode: str) -> None:
    m = _net()
    g = G.StorageGuard(m)
    m[2].register_buffer("extra", torch.zeros(1))
    assert not g.ok()
    m2 = _net()
    g2 = G.StorageGuard(m2)
    m2[3] = nn.Conv2d(4, 2, 1)
    assert not g2.ok()


def test_buffer_assignment_is_seen(mode: str) -> None:
    m = _net()
    g = G.StorageGuard(m)
    m[1].running_mean = torch.zeros(4)
    assert not g.ok()


def test_channels_last_conversion_is_seen(mode: str) -> None:
    m = _net()
    g = G.StorageGuard(m)
    m.to(memory_format=torch.channels_last)
    assert not g.ok()


# Slot rewrites that fire no registration hook: the guard checks
# every parameter/buffer slot itself, not only after a registration.
def test_bias_set_to_none_is_seen(mode: str) -> None:
    m = _net()
    g = G.StorageGuard(m)
    m[0].bias = None
    assert not g.ok()


def test_deleted_then_plain_tensor_weight_is_seen(mode: str) -> None:
    m = _net()
    g = G.StorageGuard(m)
    w = m[3].weight.detach().clone()
    del m[3].weight
    m[3].weight = w  # a plain tensor: object.__setattr__, no hook
    assert not g.ok()


def test_conversion_that_overwrites_parameters_is_seen(mode: str) -> None:
    m = _net()
    g = G.StorageGuard(m)
    was = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        m.to(memory_format=torch.channels_last)  # _apply writes new Parameters into the dicts
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(was)
    assert not g.ok()


def test_buffer_only_conversion_is_seen(mode: str) -> None:
    m = _net()
    m[1].register_buffer("scale", torch.ones(4, dtype=torch.float64))
    g = G.StorageGuard(m)
    m.float()  # only the float64 buffer changes: _apply writes it into _buffers directly
    assert not g.ok()


def test_functional_call_with_other_parameters_is_seen(mode: str) -> None:
    m = _net()
    seen: list[bool] = []

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = m

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(g.ok())
            return self.net(x)

    p = Probe()
    g = G.StorageGuard(p)
    params = {k: v.detach().clone() for k, v in p.named_parameters()}
    torch.func.functional_call(p, params, (torch.randn(1, 3, 8, 8),))
    assert seen == [False]
    assert g.ok()  # the model's own tensors are back afterwards
