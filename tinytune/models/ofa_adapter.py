"""The one module that imports ``ofa`` (PyPI ``ofa==0.1.0.post202307202001``).

``import ofa.imagenet_classification...`` imports ``ofa.utils``, whose ImageNet data loader
imports ``torchvision.transforms`` at module level. tinytune never uses that loader, and the
PyPI torchvision wheel cannot be imported next to the CPU build of torch (its ``_C`` library links
the CUDA libraries), so when the real torchvision is missing or broken a minimal stand-in with the
three names ``ofa`` touches at import time (``transforms.RandomResizedCrop``,
``transforms.RandomCrop``, ``transforms.functional``) is registered in ``sys.modules``. The
stand-in raises if anything actually calls it. ``ofa.model_zoo`` is never imported: it imports
``gdown`` and fetches weights from the network.
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from typing import TYPE_CHECKING, Any

from tinytune.errors import ModelError

if TYPE_CHECKING:
    from torch import nn

    from tinytune.spaces import SubnetConfig, SupernetSpec

__all__ = [
    "build_ofa_supernet",
    "build_proxyless",
    "extract_subnet",
    "ofa_arch",
    "set_active",
    "torchvision_standin",
]

log = logging.getLogger(__name__)

_OFA_NETWORKS = "ofa.imagenet_classification.elastic_nn.networks"


class _Unavailable:
    """Placeholder for a torchvision transform that tinytune never calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ModelError(
            "torchvision is not installed; tinytune's torchvision stand-in only satisfies the "
            "imports of ofa and cannot run ofa's ImageNet data loader"
        )


def torchvision_standin() -> types.ModuleType:
    """Build the minimal ``torchvision`` stand-in module tree (not registered)."""
    tv = types.ModuleType("torchvision")
    transforms = types.ModuleType("torchvision.transforms")
    functional = types.ModuleType("torchvision.transforms.functional")
    transforms.RandomResizedCrop = _Unavailable  # type: ignore[attr-defined]
    transforms.RandomCrop = _Unavailable  # type: ignore[attr-defined]
    transforms.functional = functional  # type: ignore[attr-defined]
    tv.transforms = transforms  # type: ignore[attr-defined]
    tv.__tinytune_standin__ = True  # type: ignore[attr-defined]
    return tv


def _ensure_torchvision() -> None:
    if "torchvision" in sys.modules:
        return
    try:
        importlib.import_module("torchvision")
        return
    except Exception:
        sys.modules.pop("torchvision", None)
    tv = torchvision_standin()
    sys.modules["torchvision"] = tv
    sys.modules["torchvision.transforms"] = tv.transforms  # type: ignore[attr-defined]
    sys.modules["torchvision.transforms.functional"] = tv.transforms.functional  # type: ignore[attr-defined]
    log.debug("registered the torchvision stand-in for ofa")


def _networks() -> types.ModuleType:
    _ensure_torchvision()
    try:
        return importlib.import_module(_OFA_NETWORKS)
    except ImportError as e:
        raise ModelError(f"cannot import the once-for-all package (pip name 'ofa'): {e}") from e


def build_proxyless(config: dict[str, Any], seed: int = 0) -> nn.Module:
    """A static ``ProxylessNASNets`` from its JSON config (the format of ``ofa``'s and the
    MCUNet model zoo's ``net.config``), initialised from ``seed``.

    Raises:
        ModelError: the config does not describe such a network.
    """
    import torch

    _networks()
    from ofa.imagenet_classification.networks import ProxylessNASNets

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return ProxylessNASNets.build_from_config(config)
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as e:
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ModelError(
                f"not a ProxylessNASNets config ({type(e).__name__}: {detail})"
            ) from e


def build_ofa_supernet(spec: SupernetSpec, n_classes: int, seed: int = 0) -> nn.Module:
    """Construct the ``ofa`` network that ``spec`` describes, initialised from ``seed`` (ofa
    draws from torch's global generator; its state is restored afterwards): the dynamic
    supernet, or for a fixed pretrained network the whole static network
    (:func:`tinytune.models.pretrained.network_config`)."""
    import torch

    if spec.imported:  # the network with its own weights: what a candidate's shapes read
        from tinytune.models.graphnet import ImportedNetwork
        from tinytune.networks import read_network

        return ImportedNetwork(read_network(spec.network_file))
    if spec.fixed:
        from tinytune.models.pretrained import network_config

        return build_proxyless(network_config(spec, n_classes), seed)
    nets = _networks()
    cls = nets.OFAProxylessNASNets if spec.family == "proxyless" else nets.OFAMobileNetV3
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(
            n_classes=n_classes,
            dropout_rate=0.0,
            width_mult=spec.width_mult,
            ks_list=list(spec.ks_choices),
            expand_ratio_list=list(spec.expand_choices),
            depth_list=list(spec.depth_choices),
        )


def ofa_arch(spec: SupernetSpec, subnet: SubnetConfig) -> dict[str, list[int]]:
    """The ``ofa`` arch dict (``ks``, ``e``, ``d``) of a sub-network; inactive blocks get the
    smallest choice, which ``ofa`` ignores."""
    ks: list[int] = []
    es: list[int] = []
    for stage, cap in zip(subnet.stages, spec.stage_max_depth, strict=True):
        ks += list(stage.ks) + [min(spec.ks_choices)] * (cap - stage.depth)
        es += list(stage.e) + [min(spec.expand_choices)] * (cap - stage.depth)
    return {"ks": ks, "e": es, "d": list(subnet.depths)}


def set_active(supernet: nn.Module, spec: SupernetSpec, subnet: SubnetConfig) -> None:
    """Activate ``subnet`` inside the dynamic supernet (for sandwich-rule training)."""
    supernet.set_active_subnet(**ofa_arch(spec, subnet))  # type: ignore[operator]


def extract_subnet(
    supernet: nn.Module, spec: SupernetSpec, subnet: SubnetConfig, *, copy: bool = True
) -> nn.Module:
    """A static ``ofa`` network of the sub-network's weights: the active sub-network of a
    supernet, or the cut of a fixed network (the first blocks of each stage it keeps; its head
    only where every stage is kept, and no classifier: the candidate's network gets a new one).

    ``copy``: the network holds a copy of the weights. Without it, a fixed network's cut shares
    its modules with ``supernet``, and the caller only reads it (as
    :func:`~tinytune.models.convert.from_ofa_subnet` does, which clones every tensor it
    keeps): a deep copy of Lite0's modules is most of the time it takes to build a candidate's
    network to price it. A supernet's sub-network is always a copy (``ofa`` builds it anew)."""
    if spec.fixed:
        return _cut(supernet, spec, subnet, copy)
    set_active(supernet, spec, subnet)
    return supernet.get_active_subnet(preserve_weight=True)  # type: ignore[operator]


def _cut(network: nn.Module, spec: SupernetSpec, subnet: SubnetConfig, copy: bool) -> nn.Module:
    from copy import deepcopy

    from ofa.imagenet_classification.networks import ProxylessNASNets
    from torch import nn

    def own(module: nn.Module | None) -> nn.Module | None:
        return deepcopy(module) if copy else module

    blocks = [network.blocks[0]]  # type: ignore[index]
    start = 1
    for stage, cap in zip(subnet.stages, spec.stage_max_depth, strict=False):
        blocks += [network.blocks[start + b] for b in range(stage.depth)]  # type: ignore[index]
        start += cap
    whole = len(subnet.stages) == spec.n_stages
    head = network.feature_mix_layer if whole else None  # type: ignore[attr-defined]
    return ProxylessNASNets(
        own(network.first_conv),  # type: ignore[attr-defined]
        [own(b) for b in blocks],
        own(head),
        nn.Identity(),
    )
