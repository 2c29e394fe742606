"""A small model zoo in pure PyTorch (no torchvision): the models convdoctor checks, tunes and benches.

`names()` lists them, `get(name)` builds one (real weights on the CPU, or on the meta device with
`device="meta"` for shape-only work), `default_input_shape(name)` is the input each is usually run at.
Importing this package does not import torch; `get` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError


@dataclass(frozen=True)
class ZooEntry:
    name: str
    module: str  # submodule of convdoctor.zoo holding the factory
    factory: str
    input_shape: tuple[int, ...]
    description: str
    source: str


_ENTRIES: tuple[ZooEntry, ...] = (
    ZooEntry("resnet50", "resnet", "resnet50", (8, 3, 224, 224),
             "ResNet-50 v1.5 (bottleneck, stride on the 3x3), ImageNet head",
             "He et al. 2015, arXiv:1512.03385; layout as torchvision.models.resnet50"),
    ZooEntry("mobilenet_v2", "mobilenet", "mobilenet_v2", (8, 3, 224, 224),
             "MobileNetV2 1.0x (inverted residuals, depthwise 3x3 convs)",
             "Sandler et al. 2018, arXiv:1801.04381; layout as torchvision.models.mobilenet_v2"),
    ZooEntry("unet2d", "unet", "unet2d", (1, 1, 572, 572),
             "2D U-Net as in the paper: unpadded 3x3 convs, 2x2 up-convs, cropped skips (572 -> 388)",
             "Ronneberger et al. 2015, arXiv:1505.04597"),
    ZooEntry("unet3d", "unet", "unet3d", (1, 1, 64, 128, 128),
             "3D U-Net: padded 3x3x3 convs with batch norm, 3 poolings, transposed-conv upsampling",
             "Cicek et al. 2016, arXiv:1606.06650 (padded variant, as in most volumetric segmentation code)"),
    ZooEntry("speech_frontend", "speech", "speech_frontend", (8, 1, 16000),
             "wav2vec 2.0 convolutional feature encoder on raw 16 kHz audio: single-channel input, "
             "kernel 10 stride 5 then 3/2-wide strided convs, no padding (receptive field 400 samples)",
             "Baevski et al. 2020, arXiv:2006.11477 (fairseq ConvFeatureExtractionModel, mode=default)"),
    ZooEntry("sincnet", "speech", "sincnet", (8, 1, 3200),
             "SincNet-style front end: one wide (251-tap) single-channel conv, then 5-tap convs and pooling",
             "Ravanelli & Bengio 2018, arXiv:1808.00158 (the sinc filters are a plain Conv1d here)"),
)

_BY_NAME = {e.name: e for e in _ENTRIES}
ALIASES = {"resnet-50": "resnet50", "mobilenetv2": "mobilenet_v2", "mobilenet-v2": "mobilenet_v2",
           "unet": "unet2d", "wav2vec2": "speech_frontend", "speech": "speech_frontend"}


def names() -> list[str]:
    return [e.name for e in _ENTRIES]


def entry(name: str) -> ZooEntry:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in _BY_NAME:
        raise UsageError(f"unknown zoo model {name!r}; available: {', '.join(names())}")
    return _BY_NAME[key]


def default_input_shape(name: str) -> tuple[int, ...]:
    return entry(name).input_shape


def get(name: str, *, device: Any = None, **kwargs: Any) -> Any:
    """Build zoo model `name` (a torch.nn.Module). `device="meta"` builds it without memory."""
    import importlib

    import torch

    e = entry(name)
    factory: Callable[..., Any] = getattr(importlib.import_module(f"{__name__}.{e.module}"), e.factory)
    if device is None:
        return factory(**kwargs)
    with torch.device(device):
        return factory(**kwargs)
