"""The zoo through check_model: zero errors at the usual input sizes; at a too-small size,
input-too-small on the layer where real PyTorch fails, with a minimum that real PyTorch confirms.

"Real PyTorch" here is an uninstrumented forward on meta tensors (PyTorch's own shape checks,
independent of convdoctor's rules), with hooks only to see which module was running when it raised.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from convdoctor import zoo
from convdoctor.check.api import check_model


def _real_failure(model: torch.nn.Module, shape: tuple[int, ...]) -> str | None:
    """Run the model for real on meta tensors; return the innermost module path that raised."""
    names = {m: n for n, m in model.named_modules()}
    stack: list[str] = []
    failed: list[str] = []

    def pre(m: Any, _a: Any) -> None:
        stack.append(names[m])

    def post(m: Any, _a: Any, _o: Any) -> None:
        stack.pop()

    hs = [m.register_forward_pre_hook(pre) for m in model.modules()]
    hs += [m.register_forward_hook(post) for m in model.modules()]
    try:
        model.train()
        model(torch.empty(shape, device="meta"))
        return None
    except Exception:  # noqa: BLE001
        failed.append(stack[-1] if stack else "")
        return failed[0]
    finally:
        for h in hs:
            h.remove()


@pytest.mark.parametrize("name", zoo.names())
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_zero_errors_at_usual_size(name: str, device: str) -> None:
    rep = check_model(zoo.get(name, device="meta"), input_shape=zoo.default_input_shape(name), device=device)
    assert rep.ok, [(f.id, f.layer, f.title) for f in rep.errors]
    assert rep.facts["convolutions"] > 0


TOO_SMALL = {  # name -> (too-small input, expected minimum found by convdoctor; checked for real below)
    "unet2d": ((1, 1, 100, 100), (1, 1, 188, 188)),
    "unet3d": ((1, 1, 4, 16, 16), (1, 1, 16, 16, 16)),
    "speech_frontend": ((8, 1, 300), (8, 1, 400)),
    "sincnet": ((8, 1, 250), (8, 1, 325)),
}


@pytest.mark.parametrize("name", sorted(TOO_SMALL))
def test_too_small_input_names_the_failing_layer_and_the_minimum(name: str) -> None:
    small, expected_min = TOO_SMALL[name]
    model = zoo.get(name, device="meta")
    rep = check_model(model, input_shape=small)
    errs = [f for f in rep.errors if f.id == "input-too-small"]
    assert errs and len(rep.errors) == len(errs), [(f.id, f.layer) for f in rep.errors]
    real_layer = _real_failure(model, small)
    assert real_layer is not None
    # convdoctor names the module where PyTorch itself raises (or that conv inside it)
    assert errs[0].layer == real_layer or errs[0].layer.startswith(real_layer + "."), (errs[0].layer, real_layer)
    mn = tuple(rep.facts["min_input_shape"])
    assert mn == expected_min and errs[0].data["min_input_shape"] == list(mn)
    assert _real_failure(model, mn) is None  # the minimum runs for real
    assert _real_failure(model, (*mn[:2], *[s - 1 for s in mn[2:]])) is not None
    if name != "unet3d":  # per-dim minima that combine: one less in any spatial dim fails for real
        for i in range(2, len(mn)):
            smaller = list(mn)
            smaller[i] -= 1
            assert _real_failure(model, tuple(smaller)) is not None, smaller
    # (unet3d: each dim alone may go down to 8, but train-mode BatchNorm at the bottom needs more
    #  than one value, so the smallest input that runs with all dims equal is 16^3)


def test_models_without_a_minimum_never_report_one() -> None:
    # padded ResNet/MobileNet convs accept any spatial size >= 1
    for name in ("resnet50", "mobilenet_v2"):
        rep = check_model(zoo.get(name, device="meta"), input_shape=(2, 3, 1, 1))
        assert rep.ok and "min_input_shape" not in rep.facts


def test_wrong_channels_and_dtype_on_a_zoo_model() -> None:
    rep = check_model(zoo.get("resnet50", device="meta"), input_shape=(2, 4, 224, 224))
    assert [(f.id, f.layer) for f in rep.errors] == [("channel-mismatch", "conv1")]
    rep = check_model(zoo.get("speech_frontend", device="meta"), input_shape=(2, 1, 16000), dtype="int32")
    assert [f.layer for f in rep.errors if f.id == "unsupported-dtype"] == ["conv_layers.0.0"]
    # the trace then stops at the GroupNorm, which has no int32 kernel either: reported, not raised
    assert {f.id for f in rep.errors} <= {"unsupported-dtype", "model-error"}


def test_fp16_warnings_and_channels_last_fix() -> None:
    m = zoo.get("resnet50", device="meta")
    nchw = check_model(m, input_shape=(8, 3, 224, 224), dtype="float16")
    assert nchw.ok and "use-channels-last" in nchw.ids()
    nhwc = check_model(m, input_shape=(8, 3, 224, 224), dtype="float16", memory_format="channels_last")
    assert "use-channels-last" not in nhwc.ids()
    assert [f.layer for f in nhwc.findings if f.id == "tensor-core-alignment"] == ["conv1"]  # C=3 stem only


def test_memory_estimate_warning() -> None:
    m = zoo.get("unet3d", device="meta")
    rep = check_model(m, input_shape=(4, 1, 128, 256, 256), gpu_memory_bytes=48 * 2**30)
    assert "memory-estimate" in rep.ids()  # ~58 GiB of conv activations + workspace estimate
    small = check_model(m, input_shape=(1, 1, 32, 32, 32), gpu_memory_bytes=80 * 2**30)
    assert "memory-estimate" not in small.ids()


def test_device_mismatch_model_on_cpu_input_on_cuda() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # a CUDA-device input without a GPU (only its device matters here)
        x = torch.empty(2, 1, 4000, device="cuda")
    rep = check_model(zoo.get("sincnet"), x)
    assert [f.layer for f in rep.errors if f.id == "device-mismatch"][:1] == ["sinc"]
    assert check_model(zoo.get("sincnet"), torch.zeros(2, 1, 4000)).ok
