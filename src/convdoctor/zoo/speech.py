"""Speech front ends on raw audio (single input channel, wide 1D kernels), in pure PyTorch."""

from __future__ import annotations

from torch import Tensor, nn


class ConvFeatureEncoder(nn.Module):
    """wav2vec 2.0's feature encoder: 7 unpadded Conv1d layers, 512 channels, total stride 320."""

    LAYERS = ((512, 10, 5),) + ((512, 3, 2),) * 4 + ((512, 2, 2),) * 2

    def __init__(self) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        cin = 1
        for i, (cout, k, s) in enumerate(self.LAYERS):
            parts: list[nn.Module] = [nn.Conv1d(cin, cout, k, stride=s, bias=False)]
            if i == 0:
                parts.append(nn.GroupNorm(cout, cout))
            parts.append(nn.GELU())
            blocks.append(nn.Sequential(*parts))
            cin = cout
        self.conv_layers = nn.Sequential(*blocks)

    def forward(self, wav: Tensor) -> Tensor:
        return self.conv_layers(wav)


class SincNetFrontEnd(nn.Module):
    """SincNet's CNN: 80 filters of 251 taps on the waveform, then two 60-channel 5-tap convs."""

    def __init__(self) -> None:
        super().__init__()
        self.sinc = nn.Conv1d(1, 80, 251, bias=False)
        self.pool1 = nn.MaxPool1d(3)
        self.conv2 = nn.Conv1d(80, 60, 5)
        self.pool2 = nn.MaxPool1d(3)
        self.conv3 = nn.Conv1d(60, 60, 5)
        self.pool3 = nn.MaxPool1d(3)
        self.act = nn.LeakyReLU(0.2)

    def forward(self, wav: Tensor) -> Tensor:
        x = self.act(self.pool1(self.sinc(wav).abs()))
        x = self.act(self.pool2(self.conv2(x)))
        return self.act(self.pool3(self.conv3(x)))


def speech_frontend() -> ConvFeatureEncoder:
    return ConvFeatureEncoder()


def sincnet() -> SincNetFrontEnd:
    return SincNetFrontEnd()
