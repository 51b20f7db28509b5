"""Small networks of the ProxylessNAS and MobileNetV3 families for the int8 tests, and their
update schemes."""

from __future__ import annotations

import math

import torch

from tinytune.models import ConvUnit, MBBlock, TrainNet, apply_update_scheme
from tinytune.models.layers import Classifier, SqueezeExcite
from tinytune.spaces import UpdateScheme

RESOLUTION = 16
N_CLASSES = 5

# conv indices of tiny_net: 0 stem | 1 dw, 2 pw2 (+ shortcut) | 3 pw1, 4 dw s2, 5 pw2 |
# 6 pw1, 7 dw, 8 pw2 (+ shortcut) | 9 head
SCHEMES = {
    # the classifier only
    "last": UpdateScheme(0),
    # biases of the last seven convolutions and the first 1/4 of the input channels of the
    # expansion conv 6: the backward runs through a shortcut block (a gradient fork)
    "bias+pw 1/4": UpdateScheme(7, ((6, 0.25),)),
    # MCUNetV3-like: a whole projection, a partial expansion and half of a depthwise conv
    "sparse": UpdateScheme(5, ((5, 1.0), (6, 0.125), (7, 0.5))),
    # everything, the stem included (its input gradient is never formed)
    "full": UpdateScheme(10, tuple((i, 1.0) for i in range(10))),
}


def _unit(
    g: torch.Generator,
    c_in: int,
    c_out: int,
    *,
    k: int = 1,
    stride: int = 1,
    groups: int = 1,
    act: str = "relu6",
    kind: str,
    index: int,
) -> ConvUnit:
    fan_in = c_in // groups * k * k
    weight = torch.randn(c_out, c_in // groups, k, k, generator=g) * math.sqrt(2.0 / fan_in)
    bias = 0.1 * torch.randn(c_out, generator=g)
    return ConvUnit(
        weight, bias, stride=stride, padding=k // 2, groups=groups, act=act, kind=kind,
        index=index,
    )  # fmt: skip


def tiny_net(scheme: UpdateScheme, seed: int = 0) -> TrainNet:
    """stem 3→8 s2 | dw-block 8 (shortcut) | 8→24→12 s2 (dw 5×5) | 12→36→12 (shortcut) |
    head 12→32 | pool | classifier 32→5, on 16×16 images, with ``scheme`` applied."""
    g = torch.Generator().manual_seed(seed)
    stem = _unit(g, 3, 8, k=3, stride=2, kind="stem", index=0)
    b0 = MBBlock(
        None,
        _unit(g, 8, 8, k=3, groups=8, kind="dw", index=1),
        None,
        _unit(g, 8, 8, act="none", kind="pw2", index=2),
        shortcut=True,
    )
    b1 = MBBlock(
        _unit(g, 8, 24, kind="pw1", index=3),
        _unit(g, 24, 24, k=5, stride=2, groups=24, kind="dw", index=4),
        None,
        _unit(g, 24, 12, act="none", kind="pw2", index=5),
        shortcut=False,
    )
    b2 = MBBlock(
        _unit(g, 12, 36, kind="pw1", index=6),
        _unit(g, 36, 36, k=3, groups=36, kind="dw", index=7),
        None,
        _unit(g, 36, 12, act="none", kind="pw2", index=8),
        shortcut=True,
    )
    head = _unit(g, 12, 32, kind="head", index=9)
    net = TrainNet(stem, [b0, b1, b2], [head], [], Classifier(32, N_CLASSES, g), RESOLUTION)
    apply_update_scheme(net, scheme)
    return net


def images(n: int, seed: int = 1, resolution: int = RESOLUTION) -> torch.Tensor:
    """n smooth random images (N, 3, R, R): random fields blurred, so that neighbouring pixels
    correlate as in real pictures."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, resolution // 4, resolution // 4, generator=g)
    x = torch.nn.functional.interpolate(x, size=(resolution, resolution), mode="bilinear")
    return x + 0.2 * torch.randn(n, 3, resolution, resolution, generator=g)


LITE_RESOLUTION = 32


def lite_net(scheme: UpdateScheme, seed: int = 0) -> TrainNet:
    """:func:`tiny_net` on 32×32 images with TinyTL lite residual branches on blocks 1 (stride
    2: pooled 16→8, group conv stride 2 → 4, upsampled to 8) and 2 (pooled 8→4, upsampled to
    8). The second GroupNorm of each branch gets a random scale instead of TinyTL's initial 0,
    so that gradients reach into the branches from the first step."""
    from tinytune.models import attach_lite_residuals
    from tinytune.spaces import LiteResidualBranch, LiteResidualConfig

    net = tiny_net(UpdateScheme(0), seed)
    net.resolution = LITE_RESOLUTION
    g = torch.Generator().manual_seed(seed + 100)
    branches = ((1, LiteResidualBranch(3, 2, 2, 1.0)), (2, LiteResidualBranch(3, 2, 2, 0.5)))
    attach_lite_residuals(net, LiteResidualConfig(branches), g)
    for block in net.blocks:
        if block.lite is not None:
            norm = block.lite.norm2
            norm.weight.data = 0.5 * torch.randn(norm.weight.shape, generator=g)
    apply_update_scheme(net, scheme)
    return net


# conv indices of tiny_mbv3_net: 0 stem | 1 dw, 2 se reduce, 3 se expand, 4 pw2 (+ shortcut) |
# 5 pw1, 6 dw s2, 7 se reduce, 8 se expand, 9 pw2 | 10 pw1, 11 dw, 12 pw2 (+ shortcut) |
# 13 head before the pooling | 14 head after it (MobileNetV3's feature mix)
MBV3_SCHEMES = {
    # the biases of the last twelve convolutions (back through both squeeze-and-excitation
    # blocks into the first block), a whole SE expansion and 1/4 of an h-swish expansion
    "mbv3 bias+se": UpdateScheme(12, ((8, 1.0), (10, 0.25))),
    # everything, the stem included
    "mbv3 full": UpdateScheme(15, tuple((i, 1.0) for i in range(15))),
}


def _se(g: torch.Generator, channels: int, mid: int, index: int) -> SqueezeExcite:
    reduce = _unit(g, channels, mid, act="relu", kind="se1", index=index)
    expand = _unit(g, mid, channels, act="hsigmoid", kind="se2", index=index + 1)
    expand.bias.data += 3.0  # h-sigmoid near its middle, as trained networks have it
    return SqueezeExcite(reduce, expand)


def tiny_mbv3_net(scheme: UpdateScheme, seed: int = 0) -> TrainNet:
    """stem 3→8 s2 h-swish | dw-block 8 (ReLU, SE 8→8, shortcut) | 8→24→12 s2 (h-swish, dw
    5×5, SE 24→8) | 12→36→12 (h-swish, shortcut) | head 12→32 h-swish | pool | 32→40 h-swish |
    classifier 40→5, on 16×16 images, with ``scheme`` applied."""
    g = torch.Generator().manual_seed(seed)
    hs = "hswish"
    stem = _unit(g, 3, 8, k=3, stride=2, act=hs, kind="stem", index=0)
    b0 = MBBlock(
        None,
        _unit(g, 8, 8, k=3, groups=8, act="relu", kind="dw", index=1),
        _se(g, 8, 8, 2),
        _unit(g, 8, 8, act="none", kind="pw2", index=4),
        shortcut=True,
    )
    b1 = MBBlock(
        _unit(g, 8, 24, act=hs, kind="pw1", index=5),
        _unit(g, 24, 24, k=5, stride=2, groups=24, act=hs, kind="dw", index=6),
        _se(g, 24, 8, 7),
        _unit(g, 24, 12, act="none", kind="pw2", index=9),
        shortcut=False,
    )
    b2 = MBBlock(
        _unit(g, 12, 36, act=hs, kind="pw1", index=10),
        _unit(g, 36, 36, k=3, groups=36, act=hs, kind="dw", index=11),
        None,
        _unit(g, 36, 12, act="none", kind="pw2", index=12),
        shortcut=True,
    )
    head = _unit(g, 12, 32, act=hs, kind="head", index=13)
    mix = _unit(g, 32, 40, act=hs, kind="head", index=14)
    net = TrainNet(stem, [b0, b1, b2], [head], [mix], Classifier(40, N_CLASSES, g), RESOLUTION)
    apply_update_scheme(net, scheme)
    return net
