"""Routed convolutions inside torch.compile graphs: a custom op registered with torch.library.

`convdoctor::routed_conv(x, w, b, site_id)` runs the site's route (fprop executor with its fallback
chain) and `convdoctor::routed_conv_bwd(gy, x, w, site_id, need_x, need_w, need_b)` the backward
(dgrad/wgrad executors). The compiler sees opaque ops with fake (meta) implementations computed by
`torch.convolution` on fake tensors, so graphs are traced without a break and the tuned engines still
run inside them. Route lookup happens at run time inside the op, not at trace time.
If torch.library.custom_op is unavailable (torch < 2.4) `available()` is False and the stock
forward runs under compile instead.
"""

from __future__ import annotations

from typing import Any

import torch

_SITES: list[Any] = []
_OK = False


def register_site(site: Any) -> int:
    _SITES.append(site)
    return len(_SITES) - 1


def available() -> bool:
    return _OK


try:
    from torch.library import custom_op as _custom_op

    @_custom_op("convdoctor::routed_conv", mutates_args=())
    def routed_conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                    site_id: int) -> torch.Tensor:
        site = _SITES[site_id]
        return site.run_fprop(site.route_for(x, w), x, w, b, site.args)  # type: ignore[no-any-return]

    @routed_conv.register_fake
    def _routed_conv_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                          site_id: int) -> torch.Tensor:
        a = _SITES[site_id].args
        return torch.convolution(x, w, b, list(a.stride), list(a.padding), list(a.dilation),
                                 a.transposed, list(a.output_padding), a.groups)

    @_custom_op("convdoctor::routed_conv_bwd", mutates_args=())
    def routed_conv_bwd(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, site_id: int,
                        bias_size: int, need_x: bool, need_w: bool, need_b: bool
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        site = _SITES[site_id]
        route = site.route_for(x, w)
        bs = [bias_size] if bias_size >= 0 else None
        gx, gw, gb = site.run_backward(route, gy, x, w, bs, site.args,
                                       (need_x, need_w, need_b and bias_size >= 0))
        return (gx if gx is not None else x.new_empty(0),
                gw if gw is not None else w.new_empty(0),
                gb if gb is not None else gy.new_empty(0))

    @routed_conv_bwd.register_fake
    def _routed_conv_bwd_fake(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, site_id: int,
                              bias_size: int, need_x: bool, need_w: bool, need_b: bool
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (torch.empty_like(x) if need_x else x.new_empty(0),
                torch.empty_like(w) if need_w else w.new_empty(0),
                gy.new_empty(bias_size) if need_b and bias_size >= 0 else gy.new_empty(0))

    def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, w, b, site_id = inputs
        ctx.save_for_backward(x, w)
        ctx.site_id = site_id
        ctx.bias_size = -1 if b is None else int(b.shape[0])

    def _backward(ctx: Any, gy: torch.Tensor) -> tuple[Any, ...]:
        x, w = ctx.saved_tensors
        nx, nw, nb = ctx.needs_input_grad[:3]
        gx, gw, gb = torch.ops.convdoctor.routed_conv_bwd(gy, x, w, ctx.site_id, ctx.bias_size,
                                                          bool(nx), bool(nw), bool(nb))
        return (gx if nx else None, gw if nw else None,
                gb if nb and ctx.bias_size >= 0 else None, None)

    routed_conv.register_autograd(_backward, setup_context=_setup)
    _OK = True
except Exception:  # noqa: BLE001 - old torch: the stock forward runs under compile
    _OK = False
