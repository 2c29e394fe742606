"""The dual problem (`policy.dual_problem`) and its weight (`engines.xform`), checked with real
convolutions on the CPU in float64: a stride-1 dgrad computed as the forward convolution of its dual
(and a stride-1 fprop as the dgrad of its dual) equals PyTorch's own result."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from convdoctor.engines import cudnn_policy as policy  # noqa: E402
from convdoctor.engines import registry, xform  # noqa: E402
from convdoctor.measure import buffers  # noqa: E402
from convdoctor.problem import ConvProblem  # noqa: E402

CASES = [
    "dgrad n=2 c=6 h=9 w=7 k=4 r=3 s=3 pad=1",
    "dgrad n=2 c=6 h=9 w=7 k=4 r=3 s=2 pad_pre=0,1 pad_post=2,0",
    "dgrad n=1 c=8 h=10 w=10 k=12 r=3 s=3 pad=2 dil=2 groups=4",
    "dgrad n=2 c=6 h=8 w=8 k=6 r=3 s=3 pad=1 groups=6 layout=nhwc",
    "dgrad n=2 c=16 w=49 k=16 s=8 pad_pre=4 pad_post=4 groups=4",
    "dgrad n=1 c=4 d=5 h=6 w=5 k=6 t=3 r=1 s=3 pad=1,0,1",
    "fprop n=2 c=6 h=9 w=7 k=4 r=3 s=3 pad=1 layout=nhwc",
    "fprop n=2 c=16 w=49 k=16 s=8 pad_pre=4 pad_post=3 groups=4",
    "fprop n=1 c=4 d=5 h=6 w=5 k=6 t=3 r=3 s=3 pad=1 groups=2",
]


def _pad_arg(p: ConvProblem) -> list[int]:
    out: list[int] = []
    for pre, post in zip(reversed(p.pad_pre), reversed(p.pad_post), strict=True):
        out += [pre, post]
    return out


def _fmt(p: ConvProblem) -> torch.memory_format:
    if p.layout == "nhwc" and p.ndim in (2, 3):
        return torch.channels_last if p.ndim == 2 else torch.channels_last_3d
    return torch.contiguous_format


def _fprop(p: ConvProblem, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    conv = (torch.nn.functional.conv1d, torch.nn.functional.conv2d,
            torch.nn.functional.conv3d)[p.ndim - 1]
    return conv(torch.nn.functional.pad(x, _pad_arg(p)), w, None, p.stride, 0, p.dilation,
                p.groups)


def _dgrad(p: ConvProblem, dy: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    padded = [s + a + b for s, a, b in zip(p.spatial, p.pad_pre, p.pad_post, strict=True)]
    xl = torch.zeros((p.n, p.c, *padded), dtype=dy.dtype)
    dx = torch.ops.aten.convolution_backward(dy, xl, w, None, list(p.stride), [0] * p.ndim,
                                             list(p.dilation), False, [0] * p.ndim, p.groups,
                                             [True, False, False])[0]
    idx = (slice(None), slice(None)) + tuple(slice(a, a + s) for a, s in
                                             zip(p.pad_pre, p.spatial, strict=True))
    return dx[idx]


def _strides(p: ConvProblem, role: str) -> tuple[int, ...]:
    return tuple(buffers.logical_strides(p, role))


def _in_layout(p: ConvProblem, role: str, t: torch.Tensor) -> torch.Tensor:
    out = torch.empty_strided(t.shape, _strides(p, role), dtype=t.dtype)
    out.copy_(t)
    return out


@pytest.mark.parametrize("text", CASES)
def test_dual_direction_computes_the_problem(text: str) -> None:
    p = ConvProblem.parse(text + " dtype=float32")
    d = policy.dual_problem(p)
    assert d is not None
    assert policy.dual_problem(d) == p  # an involution
    assert d.direction != p.direction and (d.c, d.k) == (p.k, p.c)
    g = torch.Generator().manual_seed(7)
    w = _in_layout(p, "w", torch.randn(p.w_shape(), generator=g, dtype=torch.float64))
    if p.direction == "dgrad":
        a = _in_layout(p, "dy", torch.randn(p.y_shape(), generator=g, dtype=torch.float64))
        want = _dgrad(p, a, w)
    else:
        a = _in_layout(p, "x", torch.randn(p.x_shape(), generator=g, dtype=torch.float64))
        want = _fprop(p, a, w)
    # the dual's inputs and output have the problem's shapes, so its plan takes them as they are
    roles = {"dgrad": ("dy", "dx"), "fprop": ("x", "y")}
    ain, aout = roles[p.direction]
    din, dout = roles[d.direction]
    shapes = policy.role_shapes
    assert shapes(d)[din] == shapes(p)[ain] and shapes(d)[dout] == shapes(p)[aout]
    assert _strides(d, din) == _strides(p, ain) and _strides(d, dout) == _strides(p, aout)
    idx = xform.weight_index(p.w_shape(), _strides(p, "w"), _strides(d, "w"), p.groups)
    assert torch.equal(xform.index_for(p, d), idx)  # what the runner and the executor use
    wt = torch.empty_strided(d.w_shape(), _strides(d, "w"), dtype=torch.float64)
    xform.transform(w, idx, wt)
    got = _fprop(d, a, wt) if d.direction == "fprop" else _dgrad(d, a, wt)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("text,why", [
    ("dgrad n=2 c=6 h=9 w=9 k=4 r=3 s=3 stride=2 pad=1", "stride"),
    ("wgrad n=2 c=6 h=9 w=9 k=4 r=3 s=3 pad=1", "wgrad"),
    ("dgrad n=2 c=6 h=9 w=9 k=4 r=3 s=3 pad=3", "padding above d*(r-1)"),
])
def test_no_dual(text: str, why: str) -> None:
    assert policy.dual_problem(ConvProblem.parse(text)) is None, why


def test_dual_keys() -> None:
    k = policy.dual_key("eng71_k28=1")
    assert k == "cudnn-dual:eng71_k28=1" and policy.dual_plan_name_of(k) == "eng71_k28=1"
    assert policy.plan_name_of(k) is None and registry.is_plan_key(k)
    assert registry.is_plan_key("cudnn:eng0") and not registry.is_plan_key("torch:gemm")


def test_weight_index_is_int32_and_a_permutation() -> None:
    p = ConvProblem.parse("dgrad n=1 c=8 h=5 w=5 k=12 r=3 s=3 pad=1 groups=4 layout=nhwc")
    d = policy.dual_problem(p)
    assert d is not None
    idx = xform.weight_index(p.w_shape(), _strides(p, "w"), _strides(d, "w"), p.groups)
    assert idx.dtype == torch.int32
    assert sorted(idx.tolist()) == list(range(idx.numel()))
