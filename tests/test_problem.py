"""ConvProblem: parsing, canonical keys, shapes, FLOPs, and mapping traced PyTorch calls."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from convdoctor.errors import UsageError
from convdoctor.problem import ConvProblem

RESNET = "fprop n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1 dtype=float32 layout=nchw"


def test_parse_the_issue_example() -> None:
    p = ConvProblem.parse(RESNET)
    assert (p.direction, p.n, p.c, p.k, p.spatial, p.kernel) == ("fprop", 32, 256, 256, (28, 28),
                                                                 (3, 3))
    assert p.pad_pre == p.pad_post == (1, 1) and p.stride == (1, 1) and p.dilation == (1, 1)
    assert p.y_shape() == (32, 256, 28, 28)
    assert p.w_shape() == (256, 256, 3, 3)
    assert p.flops() == 2 * 32 * 256 * 28 * 28 * 256 * 9
    assert p.min_bytes() == 4 * (32 * 256 * 28 * 28 * 2 + 256 * 256 * 9)
    assert p.math == "tf32" and not p.deterministic


def test_1d_3d_asymmetric_grouped_dilated() -> None:
    one = ConvProblem.parse("wgrad n=4 c=1 w=16000 k=64 s=400 stride=160 dtype=fp16")
    assert one.ndim == 1 and one.out_spatial() == ((16000 - 400) // 160 + 1,)
    three = ConvProblem.parse("dgrad n=2 c=32 d=16 h=64 w=64 k=32 t=3 r=3 s=3 pad=1 layout=ndhwc")
    assert three.ndim == 3 and three.layout == "nhwc" and three.kernel == (3, 3, 3)
    asym = ConvProblem.parse("fprop n=1 c=3 h=224 w=224 k=32 r=3 s=3 stride=2 pad_pre=0 "
                             "pad_post=1")
    assert asym.pad_pre == (0, 0) and asym.pad_post == (1, 1) and asym.out_spatial() == (112, 112)
    dw = ConvProblem.parse("fprop n=8 c=96 h=56 w=56 k=96 r=3 s=3 pad=1 groups=96 dil=2,1 "
                           "math=strict det=1 dtype=bf16")
    assert dw.w_shape() == (96, 1, 3, 3) and dw.dilation == (2, 1)
    assert dw.deterministic and dw.math == "strict" and dw.dtype == "bfloat16"


@pytest.mark.parametrize("text,fragment", [
    ("", "empty problem"),
    ("fprop n=1 c=3 k=8", "lacks w="),
    ("fprop n=1 c=3 h=8 w=8 k=8 r=3 s=3 q=1", "unknown field 'q'"),
    ("fprop n=1 c=3 h=8 w=8 k=8 r=x", "not an integer"),
    ("sideways n=1 c=3 h=8 w=8 k=8", "cannot read 'sideways'"),
    ("fprop n=1 c=3 h=8 w=8 k=8 groups=2", "must divide"),
    ("fprop n=1 c=3 h=2 w=2 k=8 r=5 s=5", "output would be empty"),
    ("fprop n=1 c=3 h=8 w=8 k=8 dtype=int8", "unsupported dtype"),
    ("fprop n=1 c=3 h=8 w=8 k=8 pad=1 pad_pre=1", "either pad="),
    ("fprop n=1 c=3 h=8 w=8 k=8 stride=1,2,3", "3 values"),
    ("fprop n=1 c=3 w=8 k=8 r=3", "kernel size r="),
    ("fprop n=0 c=3 h=8 w=8 k=8", "must be >= 1"),
    ("fprop n=1 c=3 h=8 w=8 k=8 det=maybe", "not a boolean"),
    ("fprop n=1 n=2 c=3 h=8 w=8 k=8", "given twice"),
])
def test_bad_text_gives_a_clear_usage_error(text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        ConvProblem.parse(text)


def test_same_problem_written_differently_has_one_key() -> None:
    a = ConvProblem.parse("fprop n=2 c=4 h=8 w=8 k=4 r=3 s=3 pad=1")
    b = ConvProblem.parse("k=4 s=3 r=3 w=8 h=8 c=4 n=2 pad_pre=1,1 pad_post=1 stride=1 dil=1,1 "
                          "groups=1 dtype=fp32 math=tf32 layout=NCHW det=0")
    assert a.key() == b.key()


def test_output_sizes_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    for text in ["fprop n=2 c=4 h=17 w=9 k=6 r=3 s=2 stride=2,1 pad=1,0 dil=2,1",
                 "fprop n=1 c=6 d=5 h=7 w=9 k=6 t=3 r=3 s=3 stride=2 pad=1 groups=3",
                 "fprop n=1 c=2 w=100 k=4 s=11 stride=5 pad=2"]:
        p = ConvProblem.parse(text)
        conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d,
                3: torch.nn.functional.conv3d}[p.ndim]
        y = conv(torch.zeros(p.x_shape()), torch.zeros(p.w_shape()), stride=p.stride,
                 padding=p.pad_pre, dilation=p.dilation, groups=p.groups)
        assert tuple(y.shape) == p.y_shape()


@dataclass
class FakeCall:
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    stride: tuple[int, ...] = (1, 1)
    padding: object = (0, 0)
    dilation: tuple[int, ...] = (1, 1)
    groups: int = 1
    transposed: bool = False
    output_padding: tuple[int, ...] = (0, 0)
    padding_mode: str = "zeros"
    dtype: str = "torch.float16"
    memory_format: str = "channels_last"
    layer: str = "layer"


def test_from_conv_call_plain_same_reflect_and_transposed() -> None:
    p = ConvProblem.from_conv_call(FakeCall((8, 64, 56, 56), (64, 64, 3, 3), (8, 64, 56, 56),
                                            padding=(1, 1)), "wgrad", math="strict")
    assert p.direction == "wgrad" and p.dtype == "float16" and p.layout == "nhwc"
    assert p.pad_pre == (1, 1) and p.math == "strict"
    same = ConvProblem.from_conv_call(FakeCall((1, 3, 32, 32), (8, 3, 4, 4), (1, 8, 32, 32),
                                               padding="same"))
    assert same.pad_pre == (1, 1) and same.pad_post == (2, 2) and same.y_shape()[2:] == (32, 32)
    refl = ConvProblem.from_conv_call(FakeCall((1, 3, 32, 32), (8, 3, 3, 3), (1, 8, 32, 32),
                                               padding=(1, 1), padding_mode="reflect"))
    assert refl.spatial == (34, 34) and refl.pad_pre == (0, 0)
    # ConvTranspose2d(16 -> 8, k=4, s=2, p=1): x (1,16,8,8) -> y (1,8,16,16); weight (16, 8, 4, 4)
    tr = ConvProblem.from_conv_call(FakeCall((1, 16, 8, 8), (16, 8, 4, 4), (1, 8, 16, 16),
                                             stride=(2, 2), padding=(1, 1), transposed=True))
    assert tr.direction == "dgrad" and (tr.c, tr.k) == (8, 16) and tr.spatial == (16, 16)
    assert tr.y_shape() == (1, 16, 8, 8)


def test_from_real_trace() -> None:
    pytest.importorskip("torch")
    trace = pytest.importorskip("convdoctor.check.trace")
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1),
                                torch.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1))
    calls = trace.trace_convs(model, input_shape=(2, 3, 16, 16))
    probs = [ConvProblem.from_conv_call(c) for c in calls]
    assert probs[0].key() == ConvProblem.parse("fprop n=2 c=3 h=16 w=16 k=8 r=3 s=3 pad=1").key()
    assert probs[1].direction == "dgrad" and probs[1].y_shape() == (2, 8, 16, 16)


def test_depthwise_means_one_group_per_channel_and_one_output_channel_per_group() -> None:
    def p(c: int, k: int, g: int) -> ConvProblem:
        return ConvProblem.parse(f"fprop n=2 c={c} k={k} h=8 w=8 r=3 s=3 pad=1 groups={g}")

    assert p(32, 32, 32).depthwise
    assert not p(32, 64, 32).depthwise          # a channel multiplier of 2
    assert not p(32, 32, 8).depthwise           # grouped
    assert not p(1, 1, 1).depthwise             # dense, one channel
