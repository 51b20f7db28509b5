"""Small networks of the ProxylessNAS and MobileNetV3 families for the int8 tests, and their
update schemes."""

from __future__ import annotations

import math

import numpy as np
import torch

from tinytune.models import GraphNet, apply_update_scheme
from tinytune.networks import NetworkGraph, Node
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


_ACTS = {"relu": "relu", "relu6": "relu6", "hswish": "hardswish", "hsigmoid": "hardsigmoid"}


class _Writer:
    """Writes a small network's op graph: convolutions with random weights (drawn from one
    generator in the order they are written), their activations, sums and pools."""

    def __init__(self, g: torch.Generator, resolution: int) -> None:
        self.g = g
        self.nodes: list[Node] = []
        self.shapes: dict[str, tuple[int, ...]] = {"x": (1, 3, resolution, resolution)}

    def _node(self, op: str, inputs: tuple[str, ...], shape: tuple[int, ...], **kw: object) -> str:
        name = f"n{len(self.nodes)}"
        self.nodes.append(Node(name, op, op, inputs, name, **kw))  # type: ignore[arg-type]
        self.shapes[name] = shape
        return name

    def conv(
        self, x: str, c_out: int, *, k: int = 1, stride: int = 1, groups: int = 1,
        act: str = "relu6", role: str, bias_shift: float = 0.0,
    ) -> str:  # fmt: skip
        n, c_in, h, w = self.shapes[x]
        fan_in = c_in // groups * k * k
        weight = torch.randn(c_out, c_in // groups, k, k, generator=self.g)
        weight = weight * math.sqrt(2.0 / fan_in)
        bias = 0.1 * torch.randn(c_out, generator=self.g) + bias_shift
        p = k // 2
        attrs = {"kernel": (k, k), "stride": (stride, stride), "padding": (p, p, p, p),
                 "dilation": (1, 1), "groups": groups, "role": role}  # fmt: skip
        size = ((h + 2 * p - k) // stride + 1, (w + 2 * p - k) // stride + 1)
        y = self._node("conv", (x,), (n, c_out, *size), attrs=attrs,
                       params={"weight": weight.numpy(), "bias": bias.numpy()})  # fmt: skip
        return y if act == "none" else self._node(_ACTS[act], (y,), self.shapes[y])

    def add(self, a: str, b: str) -> str:
        return self._node("add", (a, b), self.shapes[a])

    def excite(self, x: str, mid: int) -> str:
        """Squeeze-and-excitation: x · h-sigmoid(expand(ReLU(reduce(mean(x)))))."""
        n, c, _, _ = self.shapes[x]
        s = self.conv(self._node("gap", (x,), (n, c, 1, 1)), mid, act="relu", role="se1")
        # h-sigmoid near its middle, as trained networks have it
        s = self.conv(s, c, act="hsigmoid", role="se2", bias_shift=3.0)
        return self._node("mul", (x, s), self.shapes[x])

    def net(self, x: str, n_classes: int, scheme: UpdateScheme) -> GraphNet:
        """The network of the graph so far, pooled if it is not, a classifier of
        ``n_classes`` (drawn next) after it, ``scheme`` applied."""
        if self.shapes[x][2:] != (1, 1):
            x = self._node("gap", (x,), (*self.shapes[x][:2], 1, 1))
        width = self.shapes[x][1]
        y = self._node("linear", (x,), (1, 1), params={"weight": np.zeros((1, width), "f4")})
        graph = NetworkGraph(tuple(self.nodes), self.shapes, "x", y, "test network")
        resolution = self.shapes["x"][2]
        net = GraphNet(graph, n_classes, resolution, self.g)
        apply_update_scheme(net, scheme)
        return net


def tiny_net(scheme: UpdateScheme, seed: int = 0, resolution: int = RESOLUTION) -> GraphNet:
    """stem 3→8 s2 | dw-block 8 (shortcut) | 8→24→12 s2 (dw 5×5) | 12→36→12 (shortcut) |
    head 12→32 | pool | classifier 32→5, on 16×16 images, with ``scheme`` applied."""
    w = _Writer(torch.Generator().manual_seed(seed), resolution)
    x = w.conv("x", 8, k=3, stride=2, role="stem")
    h = w.conv(x, 8, k=3, groups=8, role="dw")
    x = w.add(w.conv(h, 8, act="none", role="pw2"), x)
    h = w.conv(x, 24, role="pw1")
    h = w.conv(h, 24, k=5, stride=2, groups=24, role="dw")
    x = w.conv(h, 12, act="none", role="pw2")
    h = w.conv(x, 36, role="pw1")
    h = w.conv(h, 36, k=3, groups=36, role="dw")
    x = w.add(w.conv(h, 12, act="none", role="pw2"), x)
    return w.net(w.conv(x, 32, role="head"), N_CLASSES, scheme)


def images(n: int, seed: int = 1, resolution: int = RESOLUTION) -> torch.Tensor:
    """n smooth random images (N, 3, R, R): random fields blurred, so that neighbouring pixels
    correlate as in real pictures."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, resolution // 4, resolution // 4, generator=g)
    x = torch.nn.functional.interpolate(x, size=(resolution, resolution), mode="bilinear")
    return x + 0.2 * torch.randn(n, 3, resolution, resolution, generator=g)


LITE_RESOLUTION = 32


def lite_net(scheme: UpdateScheme, seed: int = 0) -> GraphNet:
    """:func:`tiny_net` on 32×32 images with TinyTL lite residual branches on blocks 1 (stride
    2: pooled 16→8, group conv stride 2 → 4, upsampled to 8) and 2 (pooled 8→4, upsampled to
    8). The second GroupNorm of each branch gets a random scale instead of TinyTL's initial 0,
    so that gradients reach into the branches from the first step."""
    from tinytune.models import attach_lite_residuals
    from tinytune.spaces import LiteResidualBranch, LiteResidualConfig

    net = tiny_net(UpdateScheme(0), seed, LITE_RESOLUTION)
    g = torch.Generator().manual_seed(seed + 100)
    branches = ((1, LiteResidualBranch(3, 2, 2, 1.0)), (2, LiteResidualBranch(3, 2, 2, 0.5)))
    attach_lite_residuals(net, LiteResidualConfig(branches), g)
    for stage in net.stages_:
        if stage.lite is not None:
            norm = stage.lite.norm2
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


def tiny_mbv3_net(scheme: UpdateScheme, seed: int = 0) -> GraphNet:
    """stem 3→8 s2 h-swish | dw-block 8 (ReLU, SE 8→8, shortcut) | 8→24→12 s2 (h-swish, dw
    5×5, SE 24→8) | 12→36→12 (h-swish, shortcut) | head 12→32 h-swish | pool | 32→40 h-swish |
    classifier 40→5, on 16×16 images, with ``scheme`` applied."""
    w, hs = _Writer(torch.Generator().manual_seed(seed), RESOLUTION), "hswish"
    x = w.conv("x", 8, k=3, stride=2, act=hs, role="stem")
    h = w.excite(w.conv(x, 8, k=3, groups=8, act="relu", role="dw"), 8)
    x = w.add(w.conv(h, 8, act="none", role="pw2"), x)
    h = w.conv(x, 24, act=hs, role="pw1")
    h = w.excite(w.conv(h, 24, k=5, stride=2, groups=24, act=hs, role="dw"), 8)
    x = w.conv(h, 12, act="none", role="pw2")
    h = w.conv(x, 36, act=hs, role="pw1")
    h = w.conv(h, 36, k=3, groups=36, act=hs, role="dw")
    x = w.add(w.conv(h, 12, act="none", role="pw2"), x)
    x = w.conv(x, 32, act=hs, role="head")
    pooled = w._node("gap", (x,), (*w.shapes[x][:2], 1, 1))
    return w.net(w.conv(pooled, 40, act=hs, role="head"), N_CLASSES, scheme)
