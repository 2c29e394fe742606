"""U-Nets in pure PyTorch: the paper's 2D U-Net (unpadded convs) and a padded 3D U-Net."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _center_crop(skip: Tensor, like: Tensor) -> Tensor:
    slices = [slice(None), slice(None)]
    for s, t in zip(skip.shape[2:], like.shape[2:], strict=True):
        start = (s - t) // 2
        slices.append(slice(start, start + t))
    return skip[tuple(slices)]


class _DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int, dims: int, padding: int, norm: bool) -> None:
        conv = nn.Conv2d if dims == 2 else nn.Conv3d
        bn = nn.BatchNorm2d if dims == 2 else nn.BatchNorm3d
        layers: list[nn.Module] = []
        for a, b in ((cin, cout), (cout, cout)):
            layers.append(conv(a, b, 3, padding=padding, bias=not norm))
            if norm:
                layers.append(bn(b))
            layers.append(nn.ReLU(inplace=True))
        super().__init__(*layers)


class UNet(nn.Module):
    """Encoder `down{i}`, bottleneck `bottom`, decoder `up{i}` (an up-conv then a double conv)."""

    def __init__(self, dims: int, in_channels: int, num_classes: int, base: int, depth: int,
                 padding: int, norm: bool) -> None:
        super().__init__()
        conv_t = nn.ConvTranspose2d if dims == 2 else nn.ConvTranspose3d
        conv = nn.Conv2d if dims == 2 else nn.Conv3d
        self.pool = nn.MaxPool2d(2) if dims == 2 else nn.MaxPool3d(2)
        chans = [base * 2**i for i in range(depth + 1)]
        self.down = nn.ModuleList()
        cin = in_channels
        for c in chans[:-1]:
            self.down.append(_DoubleConv(cin, c, dims, padding, norm))
            cin = c
        self.bottom = _DoubleConv(chans[-2], chans[-1], dims, padding, norm)
        self.upconv = nn.ModuleList()
        self.up = nn.ModuleList()
        for c in reversed(chans[:-1]):
            self.upconv.append(conv_t(c * 2, c, 2, stride=2))
            self.up.append(_DoubleConv(c * 2, c, dims, padding, norm))
        self.head = conv(chans[0], num_classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottom(x)
        for upconv, block, skip in zip(self.upconv, self.up, reversed(skips), strict=True):
            x = upconv(x)
            if x.shape[2:] != skip.shape[2:]:
                if all(s >= t for s, t in zip(skip.shape[2:], x.shape[2:], strict=True)):
                    skip = _center_crop(skip, x)
                else:  # odd sizes with padded convs: pad the upsampled map up to the skip's size
                    pad: list[int] = []
                    for s, t in reversed(list(zip(skip.shape[2:], x.shape[2:], strict=True))):
                        pad += [(s - t) // 2, s - t - (s - t) // 2]
                    x = nn.functional.pad(x, pad)
            x = block(torch.cat([skip, x], dim=1))
        return self.head(x)


def unet2d(in_channels: int = 1, num_classes: int = 2, base: int = 64) -> UNet:
    """The paper's network: 572x572 in, 388x388 out, unpadded convs, 4 poolings."""
    return UNet(2, in_channels, num_classes, base, depth=4, padding=0, norm=False)


def unet3d(in_channels: int = 1, num_classes: int = 2, base: int = 32) -> UNet:
    """Padded 3D U-Net with batch norm, 3 poolings (input sizes divisible by 8)."""
    return UNet(3, in_channels, num_classes, base, depth=3, padding=1, norm=True)
