"""Property test: every valid problem's canonical key parses back to the same problem."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from convdoctor.problem import ConvProblem  # noqa: E402

dims = st.integers(min_value=1, max_value=3)


@st.composite
def problems(draw: st.DrawFn) -> ConvProblem:
    nd = draw(dims)
    kernel = tuple(draw(st.integers(1, 5)) for _ in range(nd))
    dil = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    pre = tuple(draw(st.integers(0, 2)) for _ in range(nd))
    post = tuple(draw(st.integers(0, 2)) for _ in range(nd))
    spatial = tuple(d * (k - 1) + 1 + draw(st.integers(0, 20))
                    for k, d in zip(kernel, dil, strict=True))
    g = draw(st.sampled_from([1, 2, 4]))
    return ConvProblem(
        direction=draw(st.sampled_from(["fprop", "dgrad", "wgrad"])), n=draw(st.integers(1, 64)),
        c=g * draw(st.integers(1, 16)), k=g * draw(st.integers(1, 16)), spatial=spatial,
        kernel=kernel, stride=tuple(draw(st.integers(1, 3)) for _ in range(nd)), pad_pre=pre,
        pad_post=post, dilation=dil, groups=g,
        dtype=draw(st.sampled_from(["float32", "float16", "bfloat16"])),
        math=draw(st.sampled_from(["tf32", "strict"])), layout=draw(st.sampled_from(["nchw",
                                                                                   "nhwc"])),
        deterministic=draw(st.booleans()))


@settings(max_examples=100, deadline=None)
@given(problems())
def test_key_round_trips_and_is_canonical(p: ConvProblem) -> None:
    assert ConvProblem.parse(p.key()) == p
    assert ConvProblem.from_dict(p.to_dict()) == p
    assert ConvProblem.parse(p.key()).key() == p.key()


