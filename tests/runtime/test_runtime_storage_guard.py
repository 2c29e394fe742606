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
