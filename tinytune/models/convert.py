"""Convert a static Once-for-All sub-network into tinytune's :class:`TrainNet`.

BatchNorm is folded into the preceding convolution with its running statistics (recalibrate
them for the sub-network first, :func:`recalibrate_bn`): W' = W·γ/σ, b' = β − γ·μ/σ with
σ = √(var + ε). A convolution without BatchNorm gets a zero bias, so that every convolution has
one (as in tiny-training's int8 models, where BatchNorm is always folded).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from tinytune.errors import ModelError
from tinytune.models.layers import Classifier, ConvUnit, MBBlock, SqueezeExcite, TrainNet

__all__ = ["fold_batchnorm", "from_ofa_subnet", "recalibrate_bn"]

_ACTS = {"ReLU": "relu", "ReLU6": "relu6", "Hswish": "hswish", "Hsigmoid": "hsigmoid"}


def _act_name(module: nn.Module | None) -> str:
    if module is None:
        return "none"
    name = type(module).__name__
    if name not in _ACTS:
        raise ModelError(
            f"unsupported activation {name} in the sub-network; allowed: {list(_ACTS)}"
        )
    return _ACTS[name]


def fold_batchnorm(
    w: Tensor,
    b: Tensor,
    mean: Tensor,
    var: Tensor,
    eps: float,
    gamma: Tensor | None = None,
    beta: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """A convolution's weight and bias with the BatchNorm after it folded in (its running
    statistics; γ = 1 and β = 0 where it has none): W·γ/σ and β + (b − μ)·γ/σ, σ = √(var + ε)."""
    sigma = torch.sqrt(var + eps)
    gamma = gamma if gamma is not None else torch.ones_like(sigma)
    beta = beta if beta is not None else torch.zeros_like(sigma)
    return w * (gamma / sigma).view(-1, 1, 1, 1), beta + (b - mean) * gamma / sigma


def _fold(conv: nn.Conv2d, bn: nn.BatchNorm2d | None) -> tuple[Tensor, Tensor]:
    w = conv.weight.detach()
    b = conv.bias.detach() if conv.bias is not None else torch.zeros(w.shape[0])
    if bn is None:
        return w.clone(), b.clone()
    return fold_batchnorm(
        w,
        b,
        bn.running_mean,
        bn.running_var,
        bn.eps,
        bn.weight.detach() if bn.weight is not None else None,
        bn.bias.detach() if bn.bias is not None else None,
    )


def _unit(seq: nn.Module, kind: str, index: int) -> ConvUnit:
    """A ConvUnit from an ofa ``ConvLayer`` or a ``Sequential(conv, bn, act)``."""
    conv: nn.Conv2d = seq.conv
    w, b = _fold(conv, getattr(seq, "bn", None))
    return ConvUnit(
        w,
        b,
        stride=conv.stride[0],
        padding=conv.padding[0],
        groups=conv.groups,
        act=_act_name(getattr(seq, "act", None)),
        kind=kind,
        index=index,
    )


def _se_units(se: nn.Module, index: int) -> SqueezeExcite:
    fc = se.fc
    reduce = ConvUnit(fc.reduce.weight, fc.reduce.bias, act="relu", kind="se1", index=index)
    expand = ConvUnit(
        fc.expand.weight, fc.expand.bias, act="hsigmoid", kind="se2", index=index + 1
    )
    return SqueezeExcite(reduce, expand)


def from_ofa_subnet(
    subnet: nn.Module, n_classes: int, resolution: int, generator: torch.Generator
) -> TrainNet:
    """Build a :class:`TrainNet` from a static ``ProxylessNASNets``/``MobileNetV3`` with a
    fresh classifier for ``n_classes`` (initialised from ``generator``). Everything is frozen:
    apply an update scheme afterwards."""
    idx = 0
    stem = _unit(subnet.first_conv, "stem", idx)
    idx += 1
    blocks = []
    for block in subnet.blocks:
        mb = block.conv
        pw1 = None
        if getattr(mb, "inverted_bottleneck", None) is not None:
            pw1 = _unit(mb.inverted_bottleneck, "pw1", idx)
            idx += 1
        dw = _unit(mb.depth_conv, "dw", idx)
        idx += 1
        se = None
        if hasattr(mb.depth_conv, "se"):
            se = _se_units(mb.depth_conv.se, idx)
            idx += 2
        pw2 = _unit(mb.point_linear, "pw2", idx)
        idx += 1
        blocks.append(MBBlock(pw1, dw, se, pw2, shortcut=block.shortcut is not None))
    head_pre, head_post = [], []
    if hasattr(subnet, "final_expand_layer"):  # MobileNetV3: expand, pool, feature mix
        head_pre.append(_unit(subnet.final_expand_layer, "head", idx))
        head_post.append(_unit(subnet.feature_mix_layer, "head", idx + 1))
        idx += 2
    elif subnet.feature_mix_layer is not None:  # ProxylessNAS: feature mix, pool
        head_pre.append(_unit(subnet.feature_mix_layer, "head", idx))
        idx += 1
    # else a fixed network cut before its head: the classifier reads the last block
    in_features = (head_post or head_pre or [blocks[-1].pw2])[-1].out_channels
    return TrainNet(
        stem,
        blocks,
        head_pre,
        head_post,
        Classifier(in_features, n_classes, generator),
        resolution,
    )


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
