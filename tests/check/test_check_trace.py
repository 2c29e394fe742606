"""The tracer, the MODEL loader, shape parsing and the zoo."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from torch import nn

from convdoctor import zoo
from convdoctor.check.models import load_model, parse_shape
from convdoctor.check.trace import trace, trace_convs
from convdoctor.errors import UsageError


def test_trace_resnet50_names_shapes_and_leaves_model_untouched() -> None:
    m = zoo.get("resnet50")
    before = {k: v.clone() for k, v in m.state_dict().items()}
    m.eval()
    calls = trace_convs(m, input_shape=(256, 3, 224, 224))
    assert len(calls) == 53
    by = {c.layer: c for c in calls}
    c = by["layer3.1.conv2"]
    assert c.x_shape == (256, 256, 14, 14) and c.w_shape == (256, 256, 3, 3)
    assert c.y_shape == (256, 256, 14, 14) and c.padding == (1, 1) and c.stride == (1, 1)
    assert by["conv1"].y_shape == (256, 64, 112, 112)
    assert by["layer2.0.downsample.0"].stride == (2, 2)
    assert not m.training  # mode restored (we trace a copy)
    for k, v in m.state_dict().items():
        assert v.device.type == "cpu" and torch.equal(v, before[k]), k


def test_trace_is_fast_on_meta() -> None:
    m = zoo.get("resnet50", device="meta")
    trace_convs(m, input_shape=(1, 3, 64, 64))  # warm-up
    # CPU time, not wall time: other jobs on the machine must not fail it (a real forward pass
    # of ResNet-50 at batch 256 would take minutes of CPU; on meta tensors nothing is computed)
    t0 = time.process_time()
    trace_convs(m, input_shape=(256, 3, 224, 224))
    assert time.process_time() - t0 < 5.0


def test_dtype_and_channels_last_are_applied() -> None:
    calls = trace_convs(zoo.get("mobilenet_v2", device="meta"), input_shape=(2, 3, 224, 224),
                        dtype="float16", memory_format="channels_last")
    assert {c.dtype for c in calls} == {"float16"} and {c.weight_dtype for c in calls} == {"float16"}
    assert {c.memory_format for c in calls} == {"channels_last"}
    dw = [c for c in calls if c.groups > 1]
    assert dw and all(c.groups == c.x_shape[1] == c.w_shape[0] for c in dw)


class _Functional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3, 4, 4))
        self.c = nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect")
        self.t = nn.ConvTranspose1d(4, 2, 3, stride=2, output_padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c(nn.functional.conv2d(x, self.w, padding="same"))
        return self.t(y.flatten(2))


def test_functional_same_padding_reflect_and_transposed() -> None:
    calls = trace_convs(_Functional(), torch.randn(2, 3, 9, 9))
    f, c, t = calls
    assert f.layer == "<functional:conv2d#0>" and f.padding_str == "same"
    # kernel 4: total padding 3 -> 1 each side plus one extra row/col on the right of the input
    assert f.padding == (1, 1) and f.x_shape == (2, 3, 10, 10) and f.y_shape == (2, 4, 9, 9)
    assert c.layer == "c" and c.padding_mode == "reflect" and c.x_shape == (2, 4, 11, 11)
    assert c.padding == (0, 0) and c.y_shape == (2, 4, 9, 9)
    assert t.transposed and t.op == "conv_transpose1d" and t.output_padding == (1,)
    assert t.y_shape == (2, 2, (81 - 1) * 2 + 3 + 1)
    assert t.y_shape == tuple(_Functional()(torch.randn(2, 3, 9, 9)).shape)


def test_trace_failure_is_reported_not_raised() -> None:
    res = trace(zoo.get("unet2d", device="meta"), input_shape=(1, 1, 100, 100))
    assert res.failure is not None and res.failure.layer == "bottom.0"
    assert "Kernel size can't be greater" in res.failure.message
    assert res.calls[-1].layer == "bottom.0" and res.calls[-1].y_shape[2:] == (0, 0)
    with pytest.raises(UsageError, match="bottom.0"):
        trace_convs(zoo.get("unet2d", device="meta"), input_shape=(1, 1, 100, 100))


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_models_run_at_their_default_shape(name: str) -> None:
    m = zoo.get(name, device="meta")
    calls = trace_convs(m, input_shape=zoo.default_input_shape(name))
    assert calls
    y = m(torch.empty(zoo.default_input_shape(name), device="meta"))
    assert y.shape[0] == zoo.default_input_shape(name)[0]


def test_zoo_unknown_name() -> None:
    with pytest.raises(UsageError, match="unknown zoo model"):
        zoo.get("resnet51")


@pytest.mark.parametrize("text,expected", [("8,3,224,224", (8, 3, 224, 224)),
                                           ("8x3x224x224", (8, 3, 224, 224)),
                                           (" (1, 16000) ", (1, 16000))])
def test_parse_shape(text: str, expected: tuple[int, ...]) -> None:
    assert parse_shape(text) == expected


@pytest.mark.parametrize("text", ["", "8,a", "8,-1", "8,,3", "abc"])
def test_parse_shape_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_shape(text)


def test_load_model_specs(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import torch\n"
                 "def good():\n    return torch.nn.Conv2d(3, 4, 3)\n"
                 "def bad():\n    raise ValueError('boom')\n"
                 "def notmod():\n    return 3\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('at import')\n")
    assert isinstance(load_model(f"{f}:good"), nn.Conv2d)
    assert type(load_model("zoo:sincnet")).__name__ == "SincNetFrontEnd"
    cases = {f"{f}:bad": "raised ValueError: boom", f"{f}:notmod": "not a torch.nn.Module",
             f"{f}:missing": "no attribute", f"{tmp_path / 'raises.py'}:f": "while being imported",
             f"{tmp_path / 'nope.py'}:f": "not found", "zoo:nope": "unknown zoo model",
             str(f): "say which factory"}
    for spec, msg in cases.items():
        with pytest.raises(UsageError, match=msg):
            load_model(spec)
