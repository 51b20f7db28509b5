"""Networks as their authors define them, to import: MobileNetV2 (Sandler et al., 2018: the
inverted-residual table t, c, n, s, ReLU6, widths rounded to multiples of 8 as torchvision's
``_make_divisible`` does) and a squeeze-excite network in the manner of MobileNetV3."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def divisible(v: float, divisor: int = 8) -> int:
    """Round a width to a multiple of ``divisor``, never below 90 % of it."""
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


def conv_bn(c_in: int, c_out: int, k: int, s: int, groups: int = 1, act: bool = True):
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, k, s, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = c_in * expand
        layers = [conv_bn(c_in, hidden, 1, 1)] if expand != 1 else []
        layers += [
            conv_bn(hidden, hidden, 3, stride, groups=hidden),
            conv_bn(hidden, c_out, 1, 1, act=False),
        ]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (Table 2 of the paper) at a width multiplier, with ImageNet's 1,000 classes."""

    SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip

    def __init__(self, width: float = 1.0, classes: int = 1000, stages: int = 7) -> None:
        super().__init__()
        c = divisible(32 * width)
        layers: list[nn.Module] = [conv_bn(3, c, 3, 2)]
        for t, ch, n, s in self.SETTING[:stages]:
            out = divisible(ch * width)
            for i in range(n):
                layers.append(InvertedResidual(c, out, s if i == 0 else 1, t))
                c = out
        last = divisible(1280 * max(1.0, width))
        layers.append(conv_bn(c, last, 1, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def randomise_bn(net: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm non-trivial statistics and affine parameters (a trained
    network's), so that folding them is tested."""
    g = torch.Generator().manual_seed(seed)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
    return net.eval()


def export(net: nn.Module, path, size: int = 32) -> None:
    """``torch.export`` the network at ``size`` × ``size`` RGB and save it to ``path``."""
    program = torch.export.export(net.eval(), (torch.zeros(1, 3, size, size),))
    torch.export.save(program, str(path))


class SqueezeExcite(nn.Module):
    """MobileNetV3's squeeze-and-excitation: pool, 1×1 reduce, ReLU, 1×1 expand, hard-sigmoid,
    and the input scaled by it (the scale first, as torchvision writes it)."""

    def __init__(self, c: int, squeeze: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        s = nn.functional.hardsigmoid(self.fc2(nn.functional.relu(self.fc1(s))))
        return s * x


class SmallV3(nn.Module):
    """A MobileNetV3-Small-like network: a hard-swish stem, depthwise blocks with
    squeeze-and-excitation, a residual, a 1×1 head and a classifier."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()
        )
        self.dw1 = nn.Sequential(
            nn.Conv2d(16, 16, 3, 2, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU()
        )
        self.se1 = SqueezeExcite(16, 8)
        self.pw1 = nn.Sequential(nn.Conv2d(16, 24, 1, bias=False), nn.BatchNorm2d(24))
        self.exp = nn.Sequential(nn.Conv2d(24, 72, 1, bias=False), nn.BatchNorm2d(72), nn.ReLU())
        self.dw2 = nn.Sequential(
            nn.Conv2d(72, 72, 3, 1, 1, groups=72, bias=False), nn.BatchNorm2d(72), nn.ReLU()
        )
        self.pw2 = nn.Sequential(nn.Conv2d(72, 24, 1, bias=False), nn.BatchNorm2d(24))
        self.head = nn.Sequential(
            nn.Conv2d(24, 96, 1, bias=False), nn.BatchNorm2d(96), nn.Hardswish()
        )
        self.fc = nn.Linear(96, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pw1(self.se1(self.dw1(self.stem(x))))
        h = h + self.pw2(self.dw2(self.exp(h)))
        h = self.head(h).mean(dim=(2, 3))
        return self.fc(h)


class ResidualStack(nn.Module):
    """A ResNet basic block as MLPerf Tiny's ResNet-8 writes it: 3×3 conv, BN, ReLU, 3×3 conv,
    BN, plus the input (through a strided 1×1 convolution where the shape changes), then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.a = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride, 1), nn.BatchNorm2d(c_out), nn.ReLU()
        )
        self.b = nn.Sequential(nn.Conv2d(c_out, c_out, 3, 1, 1), nn.BatchNorm2d(c_out))
        self.shortcut = nn.Conv2d(c_in, c_out, 1, stride) if stride > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.shortcut is None else self.shortcut(x)
        return torch.relu(self.b(self.a(x)) + skip)


class ResNet8(nn.Module):
    """MLPerf Tiny's image-classification ResNet-8 (32×32 RGB, three stacks of 16, 32 and 64
    filters, an average pool over the last 8×8 map, a dense layer)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.stacks = nn.Sequential(
            ResidualStack(16, 16, 1), ResidualStack(16, 32, 2), ResidualStack(32, 64, 2)
        )
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.avg_pool2d(self.stacks(self.stem(x)), 8)
        return self.fc(torch.flatten(h, 1))


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: 3×3 conv, BN, ReLU, 3×3 conv, BN, plus the input
    (through a strided 1×1 convolution and BN where the shape changes), then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            if stride != 1 or c_in != c_out
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + skip)


class ResNet18(nn.Module):
    """torchvision's ResNet-18 (He et al., 2016) at a width multiplier: a 7×7 stride-2 stem, a
    3×3 stride-2 max pool, four stages of two basic blocks (64, 128, 256, 512 filters times
    ``width``), an adaptive average pool and the classifier."""

    def __init__(self, width: float = 1.0, classes: int = 1000) -> None:
        super().__init__()
        widths = [max(8, int(c * width)) for c in (64, 128, 256, 512)]
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, c = [], widths[0]
        for i, w in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(c, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)))
            c = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.fc(torch.flatten(x, 1))


class DSCNN(nn.Module):
    """ARM's keyword-spotting DS-CNN (Zhang et al., 2017, "Hello Edge"; MLPerf Tiny's keyword
    model) on 49×10 MFCC features: a 10×4 stride-2 convolution padded as TensorFlow's "SAME"
    (a zero padding before it, as a converter writes it), BN, ReLU; four depthwise-separable
    blocks (3×3 depthwise, BN, ReLU, 1×1, BN, ReLU); dropout, an average pool over the whole
    25×5 map, the classifier (12 keywords)."""

    def __init__(self, filters: int = 64, classes: int = 12) -> None:
        super().__init__()
        self.pad = nn.ZeroPad2d((1, 1, 4, 5))  # (left, right, top, bottom): "SAME" at 49x10
        self.conv1 = nn.Conv2d(1, filters, (10, 4), (2, 2), bias=False)
        self.bn1 = nn.BatchNorm2d(filters)
        blocks = []
        for _ in range(4):
            blocks += [
                nn.Conv2d(filters, filters, 3, 1, 1, groups=filters, bias=False),
                nn.BatchNorm2d(filters),
                nn.ReLU(),
                nn.Conv2d(filters, filters, 1, bias=False),
                nn.BatchNorm2d(filters),
                nn.ReLU(),
            ]
        self.blocks = nn.Sequential(*blocks)
        self.dropout = nn.Dropout(0.4)
        self.pool = nn.AvgPool2d((25, 5))
        self.fc = nn.Linear(filters, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(self.pad(x))))
        h = self.pool(self.dropout(self.blocks(h)))
        return self.fc(torch.flatten(h, 1))


class SensorCNN(nn.Module):
    """A 1-D CNN over a window of a 6-axis IMU (accelerometer and gyroscope), written with 2-D
    layers over a 6×1×T input as such networks are exported for microcontrollers: 1×5 stride-2,
    1×3 and 1×3 convolutions with BN and ReLU, a 1×2 max pool between them, a global average
    pool and the classifier."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(6, 16, (1, 5), (1, 2), (0, 2), bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 24, (1, 3), 1, (0, 1), bias=False),
            nn.BatchNorm2d(24),
            nn.ReLU(),
            nn.MaxPool2d((1, 2)),
            nn.Conv2d(24, 32, (1, 3), 1, (0, 1), bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
        )
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean(dim=(2, 3)))


class SensorCNN1d(nn.Module):
    """:class:`SensorCNN` as most such networks are written: ``Conv1d``, ``BatchNorm1d``,
    ``MaxPool1d``, ``AvgPool1d`` and an adaptive average pool over a 6×64 window (N, C, T)."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(6, 16, 5, 2, 2, bias=False),
            nn.BatchNorm1d(16),
            nn.ReLU(),
            nn.Conv1d(16, 24, 3, 1, 1, bias=False),
            nn.BatchNorm1d(24),
            nn.ReLU(),
            nn.MaxPool1d(2),
            nn.Conv1d(24, 24, 3, 1, 1, groups=24, bias=False),
            nn.BatchNorm1d(24),
            nn.ReLU(),
            nn.AvgPool1d(2),
            nn.Conv1d(24, 24, 1, bias=False),
            nn.BatchNorm1d(24),
            nn.ReLU(),
            nn.AdaptiveAvgPool1d(1),
        )
        self.fc = nn.Linear(24, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))  # (N, C, T) in


def keyword_features(words: list[int], per_word: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Spectrogram-like samples (N, 1, 49, 10) of ``words``: each word lights two of the ten
    coefficients for 25 frames that start anywhere in the first 20, over noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=0.3, size=(len(words) * per_word, 1, 49, 10))
    y = np.repeat(np.arange(len(words)), per_word)
    for n, i in enumerate(y):
        t0, word = int(rng.integers(0, 20)), words[i]
        x[n, 0, t0 : t0 + 25, word % 10] += 2.0
        x[n, 0, t0 : t0 + 25, (3 * word + 1) % 10] += 1.0
    return x.astype(np.float32), y


def pretrained_dscnn(seed: int = 0) -> DSCNN:
    """A DS-CNN of 32 filters trained (Adam, 8 epochs, about 8 s on two cores) on six words of
    :func:`keyword_features`, in eval mode: a network with features, to fine-tune on others."""
    x, y = keyword_features([1, 3, 4, 6, 8, 9], 60, seed)
    torch.manual_seed(seed)
    net = DSCNN(filters=32, classes=6)
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(8):
        order = torch.randperm(len(xs))
        for i in range(0, len(xs), 32):
            batch = order[i : i + 32]
            opt.zero_grad()
            nn.functional.cross_entropy(net(xs[batch]), ys[batch]).backward()
            opt.step()
    return net.eval()


class MBConvSE(nn.Module):
    """EfficientNet-B0's block (Tan & Le, 2019): a 1×1 expansion, a depthwise convolution,
    each with BN and SiLU (swish), squeeze-and-excitation with a SiLU reduction and a sigmoid
    gate, a 1×1 projection with BN, and the residual where the shape allows."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int = 4) -> None:
        super().__init__()
        mid, squeeze = c_in * expand, max(1, c_in // 4)
        self.expand = nn.Sequential(nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid))
        self.dw = nn.Sequential(
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid)
        )
        self.se_reduce, self.se_expand = nn.Conv2d(mid, squeeze, 1), nn.Conv2d(squeeze, mid, 1)
        self.project = nn.Sequential(nn.Conv2d(mid, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.silu(self.dw(nn.functional.silu(self.expand(x))))
        s = nn.functional.adaptive_avg_pool2d(h, 1)
        h = h * torch.sigmoid(self.se_expand(nn.functional.silu(self.se_reduce(s))))
        h = self.project(h)
        return x + h if self.residual else h


class TinyEfficientNet(nn.Module):
    """A stem, three EfficientNet-B0 blocks and a head, at a small width."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16))
        self.blocks = nn.Sequential(MBConvSE(16, 16, 1), MBConvSE(16, 24, 2), MBConvSE(24, 24, 1))
        self.head = nn.Sequential(nn.Conv2d(24, 64, 1, bias=False), nn.BatchNorm2d(64))
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.blocks(nn.functional.silu(self.stem(x)))
        h = nn.functional.silu(self.head(h)).mean(dim=(2, 3))
        return self.fc(h)


class Fire(nn.Module):
    """SqueezeNet's fire module (Iandola et al., 2016): a 1×1 squeeze, then 1×1 and 3×3
    expansions side by side, each with a ReLU, their outputs concatenated."""

    def __init__(self, c_in: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(c_in, squeeze, 1)
        self.expand1x1 = nn.Conv2d(squeeze, expand, 1)
        self.expand3x3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.relu(self.squeeze(x))
        return torch.cat([torch.relu(self.expand1x1(s)), torch.relu(self.expand3x3(s))], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 as torchvision defines it, at a quarter of its width and with its
    convolutional classifier written as the linear layer it is after the global pool: a 3×3
    stride-2 stem, max pools between pairs of fire modules."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2),
            nn.ReLU(),
            nn.MaxPool2d(3, 2),
            Fire(16, 4, 16),
            Fire(32, 4, 16),
            nn.MaxPool2d(3, 2),
            Fire(32, 8, 32),
            Fire(64, 8, 32),
        )
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean(dim=(2, 3)))


class TinyConv(nn.Module):
    """TensorFlow Lite Micro's micro_speech model ("tiny_conv"): one 10×8 stride-2 convolution
    of 8 filters over 49×40 features padded "SAME", a ReLU, dropout, and a dense layer over the
    flattened map — no global pool."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.pad = nn.ZeroPad2d((3, 3, 4, 5))  # "SAME" of 10x8 at stride 2 on 49x40
        self.conv = nn.Conv2d(1, 8, (10, 8), 2)
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(8 * 25 * 20, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dropout(torch.relu(self.conv(self.pad(x))))
        return self.fc(torch.flatten(h, 1))


class SensorMLP(nn.Module):
    """A 1-D CNN whose head is dense layers over the flattened features, as many sensor
    models are written: two Conv1d with BatchNorm and ReLU, a flatten, a 32-unit dense layer
    with BatchNorm1d and ReLU, dropout, and the classifier."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(3, 8, 5, 2, 2, bias=False),
            nn.BatchNorm1d(8),
            nn.ReLU(),
            nn.Conv1d(8, 8, 3, 2, 1, bias=False),
            nn.BatchNorm1d(8),
            nn.ReLU(),
        )
        self.dense = nn.Sequential(
            nn.Linear(8 * 8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.3)
        )
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dense(torch.flatten(self.features(x), 1)))


class V3Head(nn.Module):
    """:class:`SmallV3` with MobileNetV3's classifier as torchvision writes it: the global pool,
    a 128-unit linear layer, hard-swish, dropout, and the classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.body = SmallV3(classes)
        self.hidden = nn.Linear(96, 128)
        self.fc = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.body
        h = b.pw1(b.se1(b.dw1(b.stem(x))))
        h = h + b.pw2(b.dw2(b.exp(h)))
        h = nn.functional.adaptive_avg_pool2d(b.head(h), 1).flatten(1)
        h = nn.functional.dropout(nn.functional.hardswish(self.hidden(h)), 0.2, self.training)
        return self.fc(h)
