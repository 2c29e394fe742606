"""Shared helpers for the runtime tests (imported by path; not a test module)."""

from __future__ import annotations

from typing import Any

import torch

from convdoctor.engines.flag_exec import flag_exec  # noqa: F401
from convdoctor.engines.registry import executor_for as torch_exec
from convdoctor.runtime import site as S


def route_all(module: torch.nn.Module, x: torch.Tensor, keys: dict[str, str], dev: str,
              name: str = "m") -> S.Site:
    """Install a site on `module` and route input signature of `x` (after the site's own
    pre-padding) to the given executor keys per direction."""
    site = S.install(module, name, dev)
    # Record the inner signature with one no-grad call.
    site.recording = []
    with torch.no_grad():
        module(x)
    rec = site.recording[0]
    site.recording = None
    chains = {d: S.build_chain([torch_exec(keys.get(d, "torch:default"))], dev) for d in S.DIRS}
    site.routes[rec["key"]] = S.Route(chains)
    return site


def grads_of(module: torch.nn.Module, x: torch.Tensor, fn: Any = None) -> tuple[Any, ...]:
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    y = module(x) if fn is None else fn(module, x)
    gen = torch.Generator(device="cpu").manual_seed(123)
    g = torch.randn(y.shape, generator=gen).to(device=y.device, dtype=y.dtype)
    y.backward(g)
    params = tuple(p.grad.detach().clone() for p in module.parameters())
    return (y.detach().clone(), x.grad.detach().clone(), *params)
