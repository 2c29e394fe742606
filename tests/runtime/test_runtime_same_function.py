"""Routed convolutions compute the same function as PyTorch: outputs and gradients.

Every case runs the stock module, then the same module routed (forward swapped, custom autograd
Function with fprop forward and dgrad/wgrad backward) through executors that change real backend
flags (oneDNN off, another memory layout), and compares. CPU cases run everywhere; the `gpu` ones
run the same through cuDNN flags and cuDNN plans on the device machine.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn as nn
from rt_helpers import grads_of, route_all

from convdoctor.engines.cudnn_enum import build_plan
from convdoctor.runtime import site as S

warnings.filterwarnings("ignore", message=".*padding='same' with even kernel.*")

CASES = {
    "bias": lambda: nn.Conv2d(6, 8, 3, padding=1),
    "no_bias": lambda: nn.Conv2d(6, 8, 3, padding=1, bias=False),
    "groups": lambda: nn.Conv2d(6, 9, 3, groups=3, padding=1),
    "depthwise": lambda: nn.Conv2d(6, 6, 3, groups=6, padding=1, bias=False),
    "dilation": lambda: nn.Conv2d(6, 8, 3, dilation=2, padding=2),
    "strides": lambda: nn.Conv2d(6, 8, 3, stride=(2, 1), padding=(1, 0)),
    "same_even_asym": lambda: nn.Conv2d(6, 8, 4, padding="same"),
    "valid": lambda: nn.Conv2d(6, 8, 3, padding="valid"),
    "reflect": lambda: nn.Conv2d(6, 8, 3, padding=1, padding_mode="reflect"),
    "replicate": lambda: nn.Conv2d(6, 8, 3, padding=(2, 1), padding_mode="replicate"),
    "circular": lambda: nn.Conv2d(6, 8, 3, padding=1, padding_mode="circular"),
    "conv1d": lambda: nn.Conv1d(6, 8, 5, stride=2, padding=2),
    "conv1d_same": lambda: nn.Conv1d(6, 8, 4, padding="same", dilation=3),
    "conv3d": lambda: nn.Conv3d(6, 8, 3, padding=1, stride=(1, 2, 2)),
    "conv3d_circular": lambda: nn.Conv3d(6, 4, 3, padding=1, padding_mode="circular"),
    "transposed2d": lambda: nn.ConvTranspose2d(6, 8, 3, stride=2, padding=1, output_padding=1),
    "transposed1d_groups": lambda: nn.ConvTranspose1d(6, 8, 4, stride=2, groups=2),
    "transposed3d": lambda: nn.ConvTranspose3d(6, 4, 2, stride=2),
}


def _input(module: nn.Module, dev: str, channels_last: bool, dtype: torch.dtype = torch.float32
           ) -> torch.Tensor:
    nd = len(module.kernel_size)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, getattr(module, "in_channels", 6), *([7] * nd),
                    generator=g).to(device=dev, dtype=dtype)
    if channels_last and nd == 2:
        x = x.contiguous(memory_format=torch.channels_last)
    if channels_last and nd == 3:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    return x


def _compare(dev: str, name: str, keys: dict[str, str], channels_last: bool, atol: float,
             rtol: float) -> None:
    torch.manual_seed(0)
    m = CASES[name]().to(dev)
    x = _input(m, dev, channels_last)
    ref = grads_of(m, x)
    with torch.no_grad():
        ref_nograd = m(x)
    route_all(m, x, keys, dev)
    got = grads_of(m, x)
    with torch.no_grad():
        got_nograd = m(x)
    S.uninstall(m)
    assert len(ref) == len(got)
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert a.shape == b.shape, (name, i)
        torch.testing.assert_close(b, a, atol=atol, rtol=rtol, msg=lambda s, i=i: f"{name}[{i}]: {s}")
    torch.testing.assert_close(got_nograd, ref_nograd, atol=atol, rtol=rtol)


CPU_ROUTES = {
    "default": {},
    "mkldnn_off": {"fprop": "cpu:mkldnn-off", "dgrad": "cpu:mkldnn-off", "wgrad": "cpu:mkldnn-off"},
    "mixed": {"fprop": "cpu:mkldnn-on+nhwc", "dgrad": "cpu:mkldnn-off", "wgrad": "cpu:mkldnn-on"},
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("route", sorted(CPU_ROUTES))
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_same_function_cpu(name: str, route: str, channels_last: bool) -> None:
    _compare("cpu", name, CPU_ROUTES[route], channels_last, atol=2e-5, rtol=1e-4)


def test_default_route_is_bit_exact_cpu() -> None:
    """The routed default path calls the same aten kernels: identical bits, not just close."""
    for name in ("bias", "reflect", "same_even_asym", "conv3d", "transposed2d"):
        torch.manual_seed(0)
        m = CASES[name]()
        x = _input(m, "cpu", False)
        ref = grads_of(m, x)
        route_all(m, x, {}, "cpu")
        got = grads_of(m, x)
        S.uninstall(m)
        for a, b in zip(ref, got, strict=True):
            assert torch.equal(a, b), name


def test_unbatched_and_output_size() -> None:
    m = nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(3, 9, 9)
    ref = m(x)
    S.install(m, "m", "cpu")
    assert torch.equal(m(x), ref)
    S.uninstall(m)
    t = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1)
    y = torch.randn(1, 4, 5, 5)
    ref = t(y, output_size=[10, 10])
    S.install(t, "t", "cpu")
    got = t(y, output_size=[10, 10])
    S.uninstall(t)
    assert got.shape == (1, 3, 10, 10) and torch.equal(got, ref)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_cpu(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
    x = torch.randn(2, 4, 8, 8)

    def run(mod: nn.Module, xx: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=dtype):
            return mod(xx)

    ref = grads_of(m, x, run)
    for i, sub in enumerate([m[0], m[2]]):
        S.install(sub, f"c{i}", "cpu")
    got = grads_of(m, x, run)
    for sub in (m[0], m[2]):
        S.uninstall(sub)
    assert got[0].dtype == ref[0].dtype == dtype
    for a, b in zip(ref, got, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(b.float(), a.float(), atol=1e-2, rtol=1e-2)


def test_autograd_node_per_route() -> None:
    """no_grad: no node. PyTorch's own path (no flag to change): PyTorch's native node, no custom
    Function cost. A route that changes something: the routed Function."""
    m = nn.Conv2d(3, 4, 3)
    x = torch.randn(1, 3, 6, 6)
    S.install(m, "m", "cpu")
    with torch.no_grad():
        assert m(x).grad_fn is None
    assert type(m(x).grad_fn).__name__ == "ConvolutionBackward0"
    S.uninstall(m)
    route_all(m, x, {"fprop": "cpu:mkldnn-off"}, "cpu")
    assert "RoutedConv" in type(m(x).grad_fn).__name__
    S.uninstall(m)


def test_double_backward_matches() -> None:
    torch.manual_seed(0)
    m = nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(1, 3, 5, 5, requires_grad=True)

    def gradgrad() -> torch.Tensor:
        y = m(x)
        (gx,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
        (ggx,) = torch.autograd.grad(gx.square().sum(), x)
        return ggx

    ref = gradgrad()
    S.install(m, "m", "cpu")
    got = gradgrad()
    S.uninstall(m)
    torch.testing.assert_close(got, ref)


def test_torch_compile_runs_routes_inside_the_graph() -> None:
    """torch.compile(fullgraph=True) of a routed model: no graph break, same outputs and grads, and
    the routes run inside the compiled graph (the custom op convdoctor::routed_conv)."""
    from convdoctor.runtime import compiled
    from convdoctor.runtime import fallback as fb

    assert compiled.available()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(4, 2, 3, padding=1, padding_mode="reflect"))
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    ref = grads_of(m, x)
    for i in (0, 2):
        route_all(m[i], x if i == 0 else torch.relu(m[0](x)).detach(),
                  {"fprop": "cpu:mkldnn-off", "dgrad": "cpu:mkldnn-off", "wgrad": "cpu:mkldnn-on"},
                  "cpu", f"c{i}")
    seen: list[tuple[str, str, str]] = []
    fb.set_fault_hook(lambda s, d, k: seen.append((s, d, k)))
    try:
        comp = torch.compile(m, backend="aot_eager", fullgraph=True)
        got = grads_of(comp, x)
    finally:
        fb.set_fault_hook(None)
        for i in (0, 2):
            S.uninstall(m[i])
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    assert ("c0", "fprop", "cpu:mkldnn-off") in seen and ("c2", "wgrad", "cpu:mkldnn-on") in seen


# ---------------------------------------------------------------------- GPU
GPU_ROUTES = {
    "heuristic": {"fprop": "torch:heuristic", "dgrad": "torch:heuristic", "wgrad": "torch:heuristic"},
    "mixed": {"fprop": "torch:benchmark", "dgrad": "torch:deterministic", "wgrad": "torch:cudnn-off"},
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("route", sorted(GPU_ROUTES))
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_same_function_gpu(name: str, route: str, channels_last: bool) -> None:
    prev = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        _compare("cuda", name, GPU_ROUTES[route], channels_last, atol=1e-4, rtol=1e-3)
    finally:
        torch.backends.cudnn.allow_tf32 = prev


def _route(m: nn.Module, x: torch.Tensor, executor: Any) -> S.Site:
    """Install `m` on CUDA, record one call, and route each direction through
    `executor(problem)` (the problem of that direction)."""
    from convdoctor.runtime.record import problems_for

    site = S.install(m, "m", "cuda")
    site.recording = []
    with torch.enable_grad():
        m(x.detach().requires_grad_(True))
    rec = site.recording[0]
    site.recording = None
    probs = problems_for(rec, True)
    chains = {d: S.build_chain([executor(probs[d])], "cuda") for d in S.DIRS}
    site.routes[rec["key"]] = S.Route(chains)
    return site


def _plan_route(m: nn.Module, x: torch.Tensor, dual: bool = False) -> S.Site:
    """Route `m` through cuDNN plans (the heuristic plan of each direction; `dual`: fprop and dgrad
    through the heuristic plan of their dual problem, `cudnn-dual:`)."""
    from convdoctor.engines import cudnn_policy as policy
    from convdoctor.engines.cudnn_exec import DualPlanExec, PlanExec

    def executor(prob: Any) -> object:
        twin = policy.dual_problem(prob) if dual else None
        if twin is not None:
            plan = build_plan(twin)
            return DualPlanExec(policy.dual_key(plan.name), prob, plan)
        plan = build_plan(prob)
        return PlanExec("cudnn:" + plan.name, prob, plan)

    return _route(m, x, executor)


def _routed_case(module: nn.Module, dtype: torch.dtype, channels_last: bool, route: Any,
                 want: dict[str, str]) -> None:
    """`module` routed by `route(m, x)` computes PyTorch's outputs and gradients, and each
    direction runs the executor whose key starts with `want[direction]` (no silent fallback)."""
    prev = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        torch.manual_seed(0)
        m = module.to("cuda", dtype)
        x = _input(m, "cuda", channels_last, dtype)
        ref = grads_of(m, x)
        site = route(m, x)
        got = grads_of(m, x)
        with torch.no_grad():
            got_nograd = m(x)
        used = {d: site.routes[next(iter(site.routes))].current(i).key
                for i, d in enumerate(S.DIRS)}
        S.uninstall(m)
        for d, k in used.items():
            assert k.startswith(want[d]), used
        tol = {torch.float32: (1e-4, 1e-3), torch.float16: (2e-2, 2e-2),
               torch.bfloat16: (1e-1, 5e-2)}[dtype]
        for a, b in zip(ref, got, strict=True):
            torch.testing.assert_close(b.float(), a.float(), atol=tol[0], rtol=tol[1])
        torch.testing.assert_close(got_nograd.float(), ref[0].float(), atol=tol[0], rtol=tol[1])
    finally:
        torch.backends.cudnn.allow_tf32 = prev


def _plan_case(name: str, dtype: torch.dtype, channels_last: bool, dual: bool) -> None:
    """The module routed through cuDNN plans (`dual`: fprop and dgrad through their dual problem's
    plans) computes PyTorch's outputs and gradients, with no silent fallback."""
    pytest.importorskip("cudnn")
    kind = "cudnn-dual:" if dual else "cudnn:"
    _routed_case(CASES[name](), dtype, channels_last,
                 lambda m, x: _plan_route(m, x, dual=dual),
                 {"fprop": kind, "dgrad": kind, "wgrad": "cudnn:"})


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["bias", "no_bias", "groups", "depthwise", "dilation", "strides",
                                  "same_even_asym", "reflect", "conv1d", "conv3d"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_cudnn_plan_same_function_gpu(name: str, dtype: torch.dtype, channels_last: bool) -> None:
    _plan_case(name, dtype, channels_last, dual=False)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["bias", "no_bias", "groups", "depthwise", "dilation",
                                  "same_even_asym", "valid", "reflect", "conv1d_same",
                                  "conv3d_circular"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_cudnn_dual_plan_same_function_gpu(name: str, dtype: torch.dtype,
                                           channels_last: bool) -> None:
    """fprop and dgrad run as the other direction of their dual problem (weight flipped and
    channel-swapped per call)."""
    _plan_case(name, dtype, channels_last, dual=True)


@pytest.mark.gpu
def test_autocast_gpu() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1)).cuda()
    x = torch.randn(2, 4, 16, 16, device="cuda")

    def run(mod: nn.Module, xx: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.float16):
            return mod(xx)

    ref = grads_of(m, x, run)
    for i in (0, 2):
        S.install(m[i], f"c{i}", "cuda")
    got = grads_of(m, x, run)
    for i in (0, 2):
        S.uninstall(m[i])
    for a, b in zip(ref, got, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(b.float(), a.float(), atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("plans", [False, True], ids=["flags", "cudnn_plans"])
def test_cuda_graph_capture_gpu(plans: bool) -> None:
    """A routed training step captured in a CUDA graph and replayed gives the eager result."""
    if plans:
        pytest.importorskip("cudnn")
    torch.manual_seed(0)
    m = nn.Conv2d(8, 8, 3, padding=1).cuda()
    x = torch.randn(4, 8, 16, 16, device="cuda")
    ref = grads_of(m, x)
    if plans:
        _plan_route(m, x)
    else:
        route_all(m, x, GPU_ROUTES["heuristic"], "cuda")
    static_x = x.clone().requires_grad_(True)
    gen = torch.Generator(device="cpu").manual_seed(123)
    g = torch.randn(ref[0].shape, generator=gen).cuda()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up on a side stream, as CUDA graphs require
            m.zero_grad(set_to_none=True)
            static_x.grad = None
            m(static_x).backward(g)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    m.zero_grad(set_to_none=True)
    static_x.grad = None
    with torch.cuda.graph(graph, stream=s):  # the warm-up stream: its cuDNN handle exists
        y = m(static_x)
        y.backward(g)
    graph.replay()
    torch.cuda.synchronize()
    S.uninstall(m)
    torch.testing.assert_close(y, ref[0], atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(static_x.grad, ref[1], atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(m.weight.grad, ref[2], atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
def test_torch_compile_inductor_gpu() -> None:
    """Inductor (the default backend) compiles a routed CUDA model; outputs and grads match."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3)).cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    ref = grads_of(m, x)
    h = x
    for i in (0, 2):
        route_all(m[i], h, GPU_ROUTES["heuristic"], "cuda", f"c{i}")
        with torch.no_grad():
            h = torch.relu(m[i](h))
    try:
        got = grads_of(torch.compile(m), x)
    finally:
        for i in (0, 2):
            S.uninstall(m[i])
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-3)


def _kernel_route(kind: str) -> Any:
    """A route function sending the directions where convdoctor's Triton kernel `kind` ("dw",
    "wg", "sc" or "fp") runs through its executor, with one of its offered configurations (the last for
    "dw" and "sc": a sub-pixel one where strided; the first for "wg" and "fp"), and every other direction
    to PyTorch's path."""
    from convdoctor.engines.flag_exec import default_exec
    from convdoctor.kernels import depthwise, fprop, smallc, wgrad

    kernel, pick = {"dw": (depthwise, -1), "wg": (wgrad, 0), "sc": (smallc, -1),
                    "fp": (fprop, 0)}[kind]

    def route(m: nn.Module, x: torch.Tensor) -> S.Site:
        def executor(prob: Any) -> object:
            cfgs = kernel.offered(prob)
            return (kernel.ENGINE.executor(f"triton:{kind}_{cfgs[pick]}", prob) if cfgs
                    else default_exec())

        return _route(m, x, executor)

    return route


TRITON_CASES = {
    "dw_bias": lambda: nn.Conv2d(6, 6, 3, groups=6, padding=1),
    "dw5_stride2": lambda: nn.Conv2d(6, 6, 5, groups=6, stride=2, padding=2, bias=False),
    "dw_same_even": lambda: nn.Conv2d(6, 6, 4, groups=6, padding="same", bias=False),
    "dw_dilated_strided": lambda: nn.Conv2d(6, 6, 3, groups=6, stride=(2, 1), dilation=2,
                                            padding=(2, 1)),
    "dw_reflect": lambda: nn.Conv2d(6, 6, 3, groups=6, padding=1, padding_mode="reflect"),
    "dw1d": lambda: nn.Conv1d(6, 6, 5, groups=6, padding=2),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(TRITON_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_triton_depthwise_same_function_gpu(name: str, dtype: torch.dtype,
                                            channels_last: bool) -> None:
    """fprop and dgrad through convdoctor's depthwise Triton kernel compute PyTorch's outputs and
    gradients, with no silent fallback."""
    pytest.importorskip("triton")
    _routed_case(TRITON_CASES[name](), dtype, channels_last, _kernel_route("dw"),
                 {"fprop": "triton:dw_", "dgrad": "triton:dw_", "wgrad": "torch:default"})


TRITON_WG_CASES = {
    "bias": lambda: nn.Conv2d(6, 8, 3, padding=1),
    "strided_7x7": lambda: nn.Conv2d(6, 16, 7, stride=2, padding=3, bias=False),
    "same_even": lambda: nn.Conv2d(6, 4, 4, padding="same"),   # asymmetric
    "dilated_reflect": lambda: nn.Conv2d(6, 6, 3, dilation=2, padding=2, padding_mode="reflect"),
    "conv1d": lambda: nn.Conv1d(6, 6, 5, padding=2),
    "conv3d": lambda: nn.Conv3d(6, 4, 3, padding=1),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(TRITON_WG_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_triton_wgrad_same_function_gpu(name: str, dtype: torch.dtype,
                                        channels_last: bool) -> None:
    """wgrad through convdoctor's wgrad Triton kernel computes PyTorch's weight gradient, with no
    silent fallback."""
    pytest.importorskip("triton")
    _routed_case(TRITON_WG_CASES[name](), dtype, channels_last, _kernel_route("wg"),
                 {"fprop": "torch:default", "dgrad": "torch:default", "wgrad": "triton:wg_"})


TRITON_SC_CASES = {
    "bias_3x3": lambda: nn.Conv2d(3, 8, 3, padding=1),
    "strided_7x7": lambda: nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False),
    "one_channel_same_even": lambda: nn.Conv2d(1, 4, 4, padding="same"),   # asymmetric
    "dilated_strided": lambda: nn.Conv2d(2, 6, 3, stride=(2, 1), dilation=2, padding=(2, 1)),
    "conv1d_strided": lambda: nn.Conv1d(1, 6, 5, stride=3, padding=2),
    "conv3d_one_channel": lambda: nn.Conv3d(1, 4, 3, padding=1),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(TRITON_SC_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_triton_small_c_same_function_gpu(name: str, dtype: torch.dtype,
                                          channels_last: bool) -> None:
    """dgrad through convdoctor's small-C Triton kernel computes PyTorch's input gradient, with no
    silent fallback."""
    pytest.importorskip("triton")
    _routed_case(TRITON_SC_CASES[name](), dtype, channels_last, _kernel_route("sc"),
                 {"fprop": "torch:default", "dgrad": "triton:sc_", "wgrad": "torch:default"})


TRITON_FP_CASES = {
    "bias": lambda: nn.Conv2d(6, 8, 3, padding=1),
    "strided_7x7": lambda: nn.Conv2d(6, 16, 7, stride=2, padding=3, bias=False),
    "same_even": lambda: nn.Conv2d(6, 4, 4, padding="same"),   # asymmetric
    "dilated_reflect": lambda: nn.Conv2d(6, 6, 3, dilation=2, padding=2, padding_mode="reflect"),
    "one_by_one": lambda: nn.Conv2d(40, 24, 1),
    "conv1d_strided": lambda: nn.Conv1d(6, 6, 2, stride=2),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(TRITON_FP_CASES))
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_triton_forward_same_function_gpu(name: str, channels_last: bool) -> None:
    """Forward calls through convdoctor's forward Triton kernel (fp32, the dtype it is offered
    for) compute PyTorch's outputs, with no silent fallback; gradients stay PyTorch's."""
    pytest.importorskip("triton")
    _routed_case(TRITON_FP_CASES[name](), torch.float32, channels_last, _kernel_route("fp"),
                 {"fprop": "triton:fp_", "dgrad": "torch:default", "wgrad": "torch:default"})


IM2COL_CASES = {
    "groups": lambda: nn.Conv2d(6, 9, 3, groups=3, padding=1),
    "groups_strided": lambda: nn.Conv2d(6, 4, 3, groups=2, stride=2, padding=(1, 0),
                                        bias=False),
    "groups_same_even": lambda: nn.Conv2d(6, 4, 4, groups=2, padding="same"),   # asymmetric
    "groups1d_long": lambda: nn.Conv1d(6, 6, 8, groups=2, padding=4),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(IM2COL_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "cl"])
def test_im2col_same_function_gpu(name: str, dtype: torch.dtype, channels_last: bool) -> None:
    """All three directions through `torch:im2col` compute PyTorch's outputs and gradients."""
    from convdoctor.engines.registry import executor_for as torch_exec

    _routed_case(IM2COL_CASES[name](), dtype, channels_last,
                 lambda m, x: _route(m, x, lambda prob: torch_exec("torch:im2col")),
                 {"fprop": "torch:im2col", "dgrad": "torch:im2col", "wgrad": "torch:im2col"})
