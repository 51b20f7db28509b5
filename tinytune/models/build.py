"""Build the network that fine-tunes one candidate, and apply its update scheme.

:func:`apply_update_scheme` decides what autograd computes and keeps: frozen tensors get
``requires_grad=False``; a weight updated on a ratio r keeps exactly its first ⌈r·C_in⌉ input
channels as a trainable parameter and the rest as a frozen one (:class:`ConvUnit`), so no full
gradient is ever formed and masked.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from tinytune.errors import ModelError
from tinytune.models.convert import from_ofa_subnet, recalibrate_bn
from tinytune.models.graphnet import GraphNet, ImportedNetwork
from tinytune.models.layers import LiteResidual
from tinytune.models.ofa_adapter import extract_subnet
from tinytune.models.pretrained import same_padded
from tinytune.spaces import Candidate, LiteResidualConfig, UpdateScheme

__all__ = [
    "apply_update_scheme",
    "attach_lite_residuals",
    "build_candidate",
]


def apply_update_scheme(net: GraphNet, update: UpdateScheme) -> None:
    """Freeze everything the scheme does not update; the classifier is always trained, and so
    are lite residual branches (they are new)."""
    convs = net.convs()
    try:
        update.validate(len(convs))
    except Exception as e:
        raise ModelError(f"the update scheme does not fit this network: {e}") from e
    first_bias = len(convs) - update.bias_last_k
    for i, conv in enumerate(convs):
        if conv.index != i:
            raise ModelError(
                f"convolution {i} carries index {conv.index}; the network is malformed"
            )
        tail = i >= first_bias
        conv.set_scale_update(update.norm and tail)
        conv.set_weight_update(update.weight_ratio(i))
        conv.set_bias_update(tail)
    for p in net.classifier.parameters():
        p.requires_grad_(True)
    for lite in net.modules():
        if isinstance(lite, LiteResidual):
            for conv in (lite.conv1, lite.conv2):
                conv.set_weight_update(1.0)
                conv.set_bias_update(False)  # followed by GroupNorm: a bias would be redundant
            for norm in (lite.norm1, lite.norm2):
                for p in norm.parameters():
                    p.requires_grad_(True)


def _shrunk(size: int, downsample: int, kernel: int) -> tuple[int, int]:
    """TinyTL's rule (``insert_lite_residual``) along one axis of ``size``: the pooling ratio
    is capped by the size and the kernel shrinks by 2 while it exceeds the pooled size."""
    ratio = max(1, min(downsample, size))
    while kernel > 1 and kernel > size // ratio:
        kernel -= 2
    return ratio, kernel


def attach_lite_residuals(
    net: GraphNet, config: LiteResidualConfig, generator: torch.Generator
) -> None:
    """Attach lite residual branches on the blocks the config names (block b is stage b + 1:
    ``GraphNet.lite_sites``); where a block's input is too small for the requested pooling or
    kernel, they shrink as in TinyTL, along each axis of it (:func:`_shrunk`)."""
    if not config.branches:
        return
    sites = net.lite_sites()
    for index, branch in config.branches:
        site = sites[index]
        if site.in_channels % branch.groups:
            raise ModelError(
                f"a lite residual branch of {branch.groups} groups cannot go on block {index}: "
                f"its input has {site.in_channels} channels (allowed: groups that divide them)"
            )
        (rh, kh), (rw, kw) = (
            _shrunk(size, branch.downsample, branch.kernel_size) for size in site.size
        )
        site.module.attach_lite(
            LiteResidual(
                site.in_channels,
                site.out_channels,
                stride=site.stride,
                kernel_size=(kh, kw),
                groups=branch.groups,
                downsample=(rh, rw),
                expand=branch.expand,
                generator=generator,
            )
        )


def build_candidate(
    candidate: Candidate,
    supernet: nn.Module,
    n_classes: int,
    calibration: Iterable[Tensor],
    seed: int = 0,
    recalibrate: bool | None = None,
) -> GraphNet:
    """The network that fine-tunes ``candidate``, with its update scheme applied.

    Args:
        candidate: the candidate.
        supernet: the dynamic ``ofa`` supernet holding the pre-trained weights (not modified
            beyond its active sub-network setting), or a user's network
            (:class:`~tinytune.models.graphnet.ImportedNetwork`).
        n_classes: classes of the target task (a fresh classifier is created).
        calibration: batches (N, 3, R, R) of target training images at the candidate's
            resolution, used to re-estimate a supernet's BatchNorm statistics before folding
            (a fixed pretrained network keeps its own).
        seed: seeds the new classifier and the lite residual branches.
        recalibrate: re-estimate the BatchNorm statistics on ``calibration``; None: for a
            supernet's sub-network, not for a fixed pretrained network.
    """
    generator = torch.Generator().manual_seed(seed)
    if isinstance(supernet, ImportedNetwork):
        # a user's network keeps the statistics it was trained with, as a fixed network does
        net = GraphNet(
            supernet.graph,
            n_classes,
            candidate.subnet.resolution,
            generator,
            stages=len(candidate.subnet.stages),
        )
        what = repr(supernet.graph.source)
    else:
        net = _subnet(candidate, supernet, n_classes, calibration, generator, recalibrate)
        what = "the sub-network"
    if len(net.convs()) != candidate.n_convs:
        raise ModelError(
            f"{what} has {len(net.convs())} convolutions, the search space expects "
            f"{candidate.n_convs}"
        )
    attach_lite_residuals(net, candidate.lite_residual, generator)
    apply_update_scheme(net, candidate.update)
    return net


def _subnet(
    candidate: Candidate,
    supernet: nn.Module,
    n_classes: int,
    calibration: Iterable[Tensor],
    generator: torch.Generator,
    recalibrate: bool | None,
) -> GraphNet:
    """The network of a built-in family's sub-network (see :func:`build_candidate`)."""
    if recalibrate is None:
        recalibrate = not candidate.spec.fixed
    # read only, unless its statistics are re-estimated in place: every tensor the candidate's
    # network keeps is cloned from it (from_ofa_subnet)
    static = extract_subnet(supernet, candidate.spec, candidate.subnet, copy=recalibrate)
    if recalibrate:
        # A supernet's statistics are those of its largest sub-networks (Once-for-All §3.3); a
        # fixed network keeps the ImageNet statistics it was trained with, which transfer
        # better than statistics of a few hundred target images (docs/pretrained.md).
        recalibrate_bn(static, calibration)
    # lite residual branches are new: they keep the symmetric padding whatever the network's
    same = same_padded(candidate.spec)
    return from_ofa_subnet(static, n_classes, candidate.subnet.resolution, generator, same=same)
