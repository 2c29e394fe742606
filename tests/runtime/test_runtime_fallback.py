"""Fault injection: a routed convolution that raises a real cuDNN status text moves down its chain
within the same call, warns once, and a training loop ends with the same loss as without faults.
Sticky CUDA errors (illegal memory access) raise with the diagnosis; the caller's own errors (wrong
channel count) surface as PyTorch's error."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
from rt_helpers import route_all

from convdoctor.runtime import fallback as fb
from convdoctor.runtime import site as S

# Real messages (PyTorch's cuDNN wrappers, aten/src/ATen/cudnn/Exceptions.h, and the CUDA runtime).
NOT_SUPPORTED = ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in "
                 "a non-contiguous input.")
WS_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
          "of which 1.12 GiB is free.")
BAD_PLAN = "cuDNN error: CUDNN_STATUS_BAD_PARAM"
ILLEGAL = ("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
           "asynchronously reported at some other API call")


@pytest.fixture(autouse=True)
def _clean() -> object:
    fb.reset_warnings()
    yield
    fb.set_fault_hook(None)
    fb.reset_warnings()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)
        self.c3 = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c3(torch.relu(self.c2(torch.relu(self.c1(x))))).mean(dim=(2, 3))


FIRST = {"fprop": "cpu:mkldnn-off", "dgrad": "cpu:mkldnn-on+nhwc", "wgrad": "cpu:mkldnn-off"}


def _route(net: Net, x: torch.Tensor) -> None:
    keys = FIRST
    h = x
    for name in ("c1", "c2", "c3"):
        mod = getattr(net, name)
        route_all(mod, h, keys, "cpu", name)
        with torch.no_grad():
            h = torch.relu(mod(h)) if name != "c3" else h


def _train(faults: object | None, steps: int = 6) -> tuple[list[float], Net]:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(4, 3, 8, 8)
    target = torch.randn(4, 4)
    _route(net, x)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    fb.set_fault_hook(faults)  # type: ignore[arg-type]
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(net(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    fb.set_fault_hook(None)
    return losses, net


def test_injected_failures_lose_no_step() -> None:
    calls: list[tuple[str, str, str]] = []
    fired: list[tuple[str, str, str]] = []

    def hook(site: str, direction: str, key: str) -> None:
        calls.append((site, direction, key))
        # Every tuned (first-choice) executor fails, with three different real messages.
        if key == FIRST[direction]:
            fired.append((site, direction, key))
            msg = {"fprop": NOT_SUPPORTED, "dgrad": BAD_PLAN, "wgrad": WS_OOM}[direction]
            raise RuntimeError(msg)

    clean, _ = _train(None)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        faulty, net = _train(hook)
    assert len(faulty) == len(clean) == 6
    torch.testing.assert_close(torch.tensor(faulty), torch.tensor(clean), rtol=1e-5, atol=1e-6)
    assert fired, "the hook never fired: the test would prove nothing"
    # Each failing (site, direction) warned exactly once, though every step went through it.
    route_warnings = [x for x in w if issubclass(x.category, fb.ConvRouteWarning)]
    tags = {(s, d) for s, d, _ in fired}
    assert len(route_warnings) == len(tags)
    assert any("CUDNN_STATUS_NOT_SUPPORTED" in str(x.message) for x in route_warnings)
    assert any("Diagnosis: [" in str(x.message) for x in route_warnings)  # explain's cause
    # After the first failure the layer stays on the next executor: the failing one is not retried
    # on every step.
    for site_name in ("c1", "c2", "c3"):
        site = getattr(net, site_name).__dict__["_convdoctor_site"]
        route = next(iter(site.routes.values()))
        assert route.current(0).key != "cpu:mkldnn-off"
    # 3 layers x 3 directions, less c1's dgrad (its input needs no gradient): each failed once.
    assert len(fired) == len(tags) == 8


def test_chain_runs_to_the_end_then_raises_original() -> None:
    m = nn.Conv2d(3, 4, 3)
    x = torch.randn(1, 3, 6, 6)
    route_all(m, x, {"fprop": "cpu:mkldnn-off"}, "cpu")

    def always(site: str, direction: str, key: str) -> None:
        raise RuntimeError(NOT_SUPPORTED)

    fb.set_fault_hook(always)
    with pytest.raises(RuntimeError, match="CUDNN_STATUS_NOT_SUPPORTED"):
        with torch.no_grad():
            m(x)


def test_unrecoverable_raises_with_diagnosis() -> None:
    m = nn.Conv2d(3, 4, 3)
    x = torch.randn(1, 3, 6, 6)
    route_all(m, x, {"fprop": "cpu:mkldnn-off"}, "cpu")
    seen: list[str] = []

    def illegal(site: str, direction: str, key: str) -> None:
        seen.append(key)
        raise RuntimeError(ILLEGAL)

    fb.set_fault_hook(illegal)
    with pytest.raises(fb.UnrecoverableConvError, match="illegal memory access") as ei:
        m(x)
    assert "restart the process" in str(ei.value)
    assert "diagnosis: [illegal-memory-access]" in str(ei.value)  # convdoctor.explain's cause id
    assert seen == ["cpu:mkldnn-off"]  # never retried on another engine


def test_callers_own_error_is_pytorchs_error() -> None:
    m = nn.Conv2d(3, 4, 3)
    route_all(m, torch.randn(1, 3, 6, 6), {"fprop": "cpu:mkldnn-off"}, "cpu")
    ref = nn.Conv2d(3, 4, 3)
    with pytest.raises(RuntimeError) as want:
        ref(torch.randn(1, 5, 6, 6))
    with pytest.raises(RuntimeError) as got:
        m(torch.randn(1, 5, 6, 6))
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)
    # The tuned route is not abandoned because of the caller's mistake.
    route = next(iter(m.__dict__["_convdoctor_site"].routes.values()))
    assert route.current(0).key == "cpu:mkldnn-off"


def test_classify_real_messages() -> None:
    assert fb.classify(RuntimeError(NOT_SUPPORTED)) == "recoverable"
    assert fb.classify(RuntimeError(WS_OOM)) == "recoverable"
    assert fb.classify(RuntimeError("GET was unable to find an engine to execute this computation")
                       ) == "recoverable"
    assert fb.classify(RuntimeError(ILLEGAL)) == "unrecoverable"
    assert fb.classify(RuntimeError("CUDA error: device-side assert triggered")) == "unrecoverable"
    assert fb.classify(RuntimeError("Given groups=1, weight of size [4, 3, 3, 3], expected input"
                                    "[1, 5, 6, 6] to have 3 channels, but got 5 channels instead")
                       ) == "other"


@pytest.mark.gpu
def test_fallback_on_gpu_same_loss() -> None:
    """On the GPU: the benchmark route fails for every layer (injected); the loop's losses match."""
    def run(hook: object | None) -> list[float]:
        torch.manual_seed(0)
        net = Net().cuda()
        x = torch.randn(4, 3, 16, 16, device="cuda")
        target = torch.randn(4, 4, device="cuda")
        h = x
        keys = {"fprop": "torch:benchmark", "dgrad": "torch:benchmark", "wgrad": "torch:benchmark"}
        for name in ("c1", "c2", "c3"):
            mod = getattr(net, name)
            route_all(mod, h, keys, "cuda", name)
            with torch.no_grad():
                h = torch.relu(mod(h)) if name != "c3" else h
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        fb.set_fault_hook(hook)  # type: ignore[arg-type]
        out = []
        for _ in range(5):
            loss = nn.functional.mse_loss(net(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(float(loss.detach()))
        fb.set_fault_hook(None)
        return out

    def hook(site: str, direction: str, key: str) -> None:
        if key == "torch:benchmark":
            raise RuntimeError(NOT_SUPPORTED)

    torch.backends.cudnn.deterministic = True
    try:
        clean = run(None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fb.ConvRouteWarning)
            faulty = run(hook)
    finally:
        torch.backends.cudnn.deterministic = False
    torch.testing.assert_close(torch.tensor(faulty), torch.tensor(clean), rtol=1e-4, atol=1e-5)


def test_site_cannot_be_pickled_with_clear_message() -> None:
    import pickle

    m = nn.Conv2d(3, 4, 3)
    S.install(m, "m", "cpu")
    with pytest.raises(TypeError, match="state_dict"):
        pickle.dumps(m.__dict__["_convdoctor_site"])
    S.uninstall(m)


def test_layout_route_matches_stock_conv_on_cpu() -> None:
    """torch:heuristic+nhwc (a GPU tuner candidate) runs the call in channels_last and hands back
    the caller's layout; the numbers are PyTorch's own."""
    import torch

    from convdoctor.engines.base import ConvArgs
    from convdoctor.engines.flag_exec import flag_exec

    ex = flag_exec("torch:heuristic+nhwc")
    assert ex is not None and ex.layout == "nhwc" and not ex.is_noop()
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    a = ConvArgs(stride=(2, 2), padding=(1, 1), dilation=(1, 1), transposed=False,
                 output_padding=(0, 0), groups=1)
    y = ex.fprop(x, w, None, a)
    ref = torch.nn.functional.conv2d(x, w, None, 2, 1)
    assert y.is_contiguous() and torch.allclose(y, ref, atol=1e-5)
    gy = torch.randn_like(ref)
    gx, gw, _ = ex.backward(gy, x.detach(), w.detach(), None, a, (True, True, False))
    rx, rw = torch.autograd.grad(ref, (x, w), gy)
    assert gx.is_contiguous() and torch.allclose(gx, rx, atol=1e-5)
    assert torch.allclose(gw, rw, atol=1e-5)
