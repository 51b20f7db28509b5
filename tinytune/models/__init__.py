"""Torch modules: the supernet adapter, lite residuals, and update schemes applied to networks."""

from __future__ import annotations

from tinytune.models.build import (
    apply_update_scheme,
    attach_lite_residuals,
    build_candidate,
)
from tinytune.models.convert import from_ofa_subnet, recalibrate_bn, subnet_graph
from tinytune.models.graphnet import GraphNet, ImportedNetwork, save_module
from tinytune.models.layers import ConvUnit, LiteResidual
from tinytune.models.supernet import (
    PretrainRecipe,
    cache_dir,
    checkpoint_path,
    load_supernet,
    pretrain_supernet,
    save_supernet,
)

__all__ = [
    "ConvUnit",
    "GraphNet",
    "ImportedNetwork",
    "LiteResidual",
    "PretrainRecipe",
    "apply_update_scheme",
    "attach_lite_residuals",
    "build_candidate",
    "cache_dir",
    "checkpoint_path",
    "from_ofa_subnet",
    "load_supernet",
    "pretrain_supernet",
    "recalibrate_bn",
    "save_module",
    "save_supernet",
    "subnet_graph",
]
