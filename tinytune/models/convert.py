"""A static Once-for-All sub-network as an op graph, the one form every network takes.

:func:`subnet_graph` writes a ``ProxylessNASNets``/``MobileNetV3`` (an OFA sub-network, a cut
of a fixed network, a zoo config) as the :class:`~tinytune.networks.NetworkGraph` a user's
exported network is read into, so that one class, :class:`~tinytune.models.graphnet.GraphNet`,
trains both. Its convolutions keep the roles the built-in families give them (``stem``,
``pw1``, ``dw``, ``se1``, ``se2``, ``pw2``, ``head``); its strided convolutions pad as
TensorFlow's "SAME" where the weights were trained so.

The network folds each BatchNorm into the convolution before it with its running statistics
(:func:`~tinytune.models.graphnet.fold_batchnorm`): recalibrate them for the sub-network first
(:func:`recalibrate_bn`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from tinytune.errors import ModelError
from tinytune.models.graphnet import GraphNet
from tinytune.models.layers import same_padding
from tinytune.networks import NetworkGraph, Node

__all__ = ["from_ofa_subnet", "recalibrate_bn", "subnet_graph"]

_ACTS = {"ReLU": "relu", "ReLU6": "relu6", "Hswish": "hardswish", "Hsigmoid": "hardsigmoid"}
"""``ofa``'s activation modules, by the graph op they are."""


def _array(t: Tensor) -> np.ndarray:
    return t.detach().numpy()


class _Writer:
    """Appends nodes and the shapes of the tensors they write, at one input resolution."""

    def __init__(self, resolution: int, same: bool) -> None:
        self.nodes: list[Node] = []
        self.shapes: dict[str, tuple[int, ...]] = {"input": (1, 3, resolution, resolution)}
        self.same = same

    def node(
        self, name: str, op: str, inputs: tuple[str, ...], shape: tuple[int, ...], **kw: Any
    ) -> str:
        self.nodes.append(Node(name, op, op, inputs, name, **kw))
        self.shapes[name] = shape
        return name

    def act(self, name: str, module: nn.Module | None, x: str) -> str:
        if module is None:
            return x
        kind = type(module).__name__
        if kind not in _ACTS:
            raise ModelError(
                f"unsupported activation {kind} in the sub-network; allowed: {list(_ACTS)}"
            )
        return self.node(f"{name}.act", _ACTS[kind], (x,), self.shapes[x])

    def conv(self, name: str, conv: nn.Conv2d, role: str, x: str) -> str:
        """The convolution ``conv`` of ``role`` on ``x``: "SAME" padded where it strides and
        the network pads so, else symmetric."""
        n, _, h, w = self.shapes[x]
        (kh, kw), (sh, sw) = conv.kernel_size, conv.stride
        same = self.same and max(sh, sw) > 1
        if same:
            (top, bottom), (left, right) = same_padding(h, kh, sh), same_padding(w, kw, sw)
        else:
            (top, left) = (bottom, right) = conv.padding
        attrs = {
            "kernel": (kh, kw),
            "stride": (sh, sw),
            "padding": (top, bottom, left, right),
            "dilation": (1, 1),
            "groups": conv.groups,
            "role": role,
            "same": same,
        }
        params = {"weight": _array(conv.weight)}
        params |= {"bias": _array(conv.bias)} if conv.bias is not None else {}
        shape = (n, conv.out_channels, (h + top + bottom - kh) // sh + 1,
                 (w + left + right - kw) // sw + 1)  # fmt: skip
        return self.node(name, "conv", (x,), shape, attrs=attrs, params=params)

    def layer(self, name: str, seq: nn.Module, role: str, x: str) -> str:
        """An ``ofa`` ``ConvLayer`` or ``Sequential(conv, bn, act)``."""
        x = self.conv(name, seq.conv, role, x)
        bn = getattr(seq, "bn", None)
        if bn is not None:
            params = {"mean": _array(bn.running_mean), "var": _array(bn.running_var)}
            params |= {"weight": _array(bn.weight), "bias": _array(bn.bias)} if bn.affine else {}
            x = self.node(f"{name}.bn", "batchnorm", (x,), self.shapes[x],
                          attrs={"eps": bn.eps}, params=params)  # fmt: skip
        return self.act(name, getattr(seq, "act", None), x)

    def gap(self, name: str, x: str) -> str:
        n, c, _, _ = self.shapes[x]
        return self.node(name, "gap", (x,), (n, c, 1, 1))

    def excite(self, name: str, se: nn.Module, x: str) -> str:
        """Squeeze-and-excitation: x · h-sigmoid(expand(ReLU(reduce(mean(x)))))."""
        fc = se.fc
        s = self.conv(f"{name}.reduce", fc.reduce, "se1", self.gap(f"{name}.pool", x))
        s = self.node(f"{name}.reduce.act", "relu", (s,), self.shapes[s])
        s = self.conv(f"{name}.expand", fc.expand, "se2", s)
        s = self.node(f"{name}.expand.act", "hardsigmoid", (s,), self.shapes[s])
        return self.node(f"{name}.mul", "mul", (x, s), self.shapes[x])


def subnet_graph(subnet: nn.Module, resolution: int, same: bool = False) -> NetworkGraph:
    """The op graph of a static ``ProxylessNASNets``/``MobileNetV3`` at ``resolution``:
    stem, inverted-residual blocks (``blocks.<b>.*``), head, global pool, then a linear node
    that only gives the classifier its input width (the network's own classifier, which the
    candidate's network makes anew for its classes, or none: a fixed network cut before its
    head). ``same``: the strided convolutions pad as TensorFlow's "SAME"."""
    g = _Writer(resolution, same)
    x = g.layer("stem", subnet.first_conv, "stem", "input")
    for b, block in enumerate(subnet.blocks):
        mb, h = block.conv, x
        if getattr(mb, "inverted_bottleneck", None) is not None:
            h = g.layer(f"blocks.{b}.pw1", mb.inverted_bottleneck, "pw1", h)
        h = g.layer(f"blocks.{b}.dw", mb.depth_conv, "dw", h)
        if hasattr(mb.depth_conv, "se"):
            h = g.excite(f"blocks.{b}.se", mb.depth_conv.se, h)
        h = g.layer(f"blocks.{b}.pw2", mb.point_linear, "pw2", h)
        if block.shortcut is not None:
            h = g.node(f"blocks.{b}.add", "add", (h, x), g.shapes[h])
        x = h
    if hasattr(subnet, "final_expand_layer"):  # MobileNetV3: expand, pool, feature mix
        x = g.layer("head", subnet.final_expand_layer, "head", x)
        x = g.layer("feature_mix", subnet.feature_mix_layer, "head", g.gap("pool", x))
    else:  # ProxylessNAS: feature mix (none on a fixed network cut before it), pool
        if subnet.feature_mix_layer is not None:
            x = g.layer("head", subnet.feature_mix_layer, "head", x)
        x = g.gap("pool", x)
    width = g.shapes[x][1]
    g.node("classifier", "linear", (x,), (1, 1), params={"weight": np.zeros((1, width), "f4")})
    return NetworkGraph(tuple(g.nodes), g.shapes, "input", "classifier", "sub-network")


def from_ofa_subnet(
    subnet: nn.Module,
    n_classes: int,
    resolution: int,
    generator: torch.Generator,
    *,
    same: bool = False,
) -> GraphNet:
    """The trainable network of a static ``ProxylessNASNets``/``MobileNetV3``
    (:func:`subnet_graph`), with a fresh classifier for ``n_classes`` (initialised from
    ``generator``). Everything is frozen: apply an update scheme afterwards."""
    graph = subnet_graph(subnet, resolution, same)
    return GraphNet(graph, n_classes, resolution, generator)


@torch.no_grad()
def recalibrate_bn(net: nn.Module, batches: Iterable[Tensor]) -> None:
    """Re-estimate the BatchNorm running statistics of a sub-network (Once-for-All §3.3:
    weights shared with larger sub-networks give wrong statistics) as exact averages over
    ``batches``."""
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative moving average: the exact mean over all batches
    was_training = net.training
    net.train()
    for x in batches:
        net(x)
    net.train(was_training)
