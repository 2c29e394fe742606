"""convdoctor.validate: the runtime guard raises ConvConfigError before PyTorch would fail."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import convdoctor
from convdoctor import zoo
from convdoctor.check.guard import unvalidate


def test_guard_raises_before_pytorch_with_layer_and_fix() -> None:
    m = zoo.get("unet2d", base=8)
    convdoctor.validate(m)
    with pytest.raises(convdoctor.ConvConfigError) as ei:
        m(torch.randn(1, 1, 100, 100))
    e = ei.value
    assert e.layer == "bottom.0" and e.findings[0].id == "input-too-small" and "fix:" in str(e)
    assert isinstance(e, RuntimeError)  # code catching PyTorch's RuntimeError still catches it
    assert m(torch.randn(1, 1, 188, 188)).shape == (1, 2, 4, 4)  # valid input passes unchanged


def test_guard_catches_channel_dtype_and_padding_mode() -> None:
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(4, 8, 3))
    convdoctor.validate(m)
    with pytest.raises(convdoctor.ConvConfigError, match="channel-mismatch"):
        m(torch.randn(1, 3, 10, 10))
    m2 = convdoctor.validate(nn.Conv2d(3, 8, 3))
    with pytest.raises(convdoctor.ConvConfigError, match="dtype-mismatch"):
        m2(torch.randn(1, 3, 10, 10, dtype=torch.float64))
    m3 = convdoctor.validate(nn.Conv1d(1, 4, 5, padding=2, padding_mode="circular"))
    assert m3(torch.randn(2, 1, 7)).shape == (2, 4, 7)  # padded input seen as 11: fine
    m4 = convdoctor.validate(nn.Conv1d(1, 4, 1, padding=2, padding_mode="reflect"))
    with pytest.raises(convdoctor.ConvConfigError, match="reflect padding"):
        m4(torch.randn(2, 1, 2))
    with pytest.raises(RuntimeError, match="Padding size should be less"):
        unvalidate(m4)(torch.randn(2, 1, 2))  # what PyTorch says without the guard
    assert m4(torch.randn(2, 1, 3)).shape == (2, 4, 7)


def test_guard_agrees_with_pytorch_on_fuzz_cases() -> None:
    """Every module-expressible fuzz case: the guard raises exactly when PyTorch raises."""
    import random
    import warnings

    from convdoctor.check.fuzz import gen_case, run_torch

    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        c = gen_case(rng)
        if (c["transposed"] or c["padding_mode"] != "zeros" or isinstance(c["padding"], str)
                or c["dtype"] != c["weight_dtype"] or (c["bias"] and c["bias_dtype"] != c["dtype"])
                or c["groups"] < 1 or len(c["x_shape"]) < 2):
            continue
        cls = getattr(nn, f"Conv{c['nsp']}d")
        try:
            mod = cls(max(c["w_shape"][1] * c["groups"], 1), max(c["w_shape"][0], c["groups"]), 1,
                      groups=c["groups"], bias=c["bias"])
        except Exception:  # noqa: BLE001 - nn.Module refuses the config at construction
            continue
        with torch.no_grad():
            mod.weight = nn.Parameter(torch.zeros(c["w_shape"], dtype=getattr(torch, c["weight_dtype"])),
                                      requires_grad=False)
            if c["bias"]:
                mod.bias = nn.Parameter(torch.zeros(c["bias_len"], dtype=getattr(torch, c["bias_dtype"])),
                                        requires_grad=False)
        mod.stride, mod.padding, mod.dilation = tuple(c["stride"]), tuple(c["padding"]), tuple(c["dilation"])
        mod.kernel_size = tuple(c["w_shape"][2:])
        ran, _msg = run_torch(c, "cpu")
        convdoctor.validate(mod)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = torch.zeros(c["x_shape"], dtype=getattr(torch, c["dtype"]))
            try:
                mod(x)
                guard_ok = True
            except convdoctor.ConvConfigError:
                guard_ok = False
            except Exception:  # noqa: BLE001 - PyTorch raised itself: the guard let a bad call through
                guard_ok = True
        unvalidate(mod)
        assert guard_ok == ran, (c, _msg)
        checked += 1
    assert checked > 100


class _Func(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3, 5, 5))
        self.c = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(nn.functional.conv2d(x, self.w))


def test_functional_guard() -> None:
    m = _Func()
    convdoctor.validate(m, functional=True)
    with pytest.raises(convdoctor.ConvConfigError) as ei:
        m(torch.randn(1, 3, 4, 4))
    assert ei.value.layer == "<functional:conv2d>" and ei.value.findings[0].id == "input-too-small"
    assert m(torch.randn(1, 3, 9, 9)).shape == (1, 4, 5, 5)  # the mode was left cleanly after the error
    unvalidate(m)
    from torch.overrides import _get_current_function_mode_stack

    assert not _get_current_function_mode_stack()
