"""Small networks of the ProxylessNAS family for the int8 tests, and their update schemes."""

from __future__ import annotations

import math

import torch

from tinytune.models import ConvUnit, MBBlock, TrainNet, apply_update_scheme
from tinytune.models.layers import Classifier
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
