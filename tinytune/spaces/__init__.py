"""The joint search space: sub-networks × lite residuals × sparse update schemes."""

from __future__ import annotations

from tinytune.spaces.candidate import (
    PATCHES,
    WEIGHT_RATIOS,
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    Schedule,
    StageConfig,
    SubnetConfig,
    UpdateScheme,
    block_count,
    conv_kinds,
)
from tinytune.spaces.presets import (
    PRESET_NAMES,
    default_subnet,
    make_preset,
    preset_scheme,
    smallest_subnet,
)
from tinytune.spaces.sampling import (
    JOINT,
    SCHEMES,
    subnet_params,
    suggest_candidate,
    suggest_subnet,
)
from tinytune.spaces.supernets import (
    DEFAULT_SUPERNET,
    FAMILIES,
    IMAGE_NETWORK,
    PRETRAINED_NETWORKS,
    PUBLISHED_SUPERNETS,
    SUPERNET_FORMS,
    SupernetSpec,
    default_network,
    family_supernets,
    get_supernet,
)

__all__ = [
    "DEFAULT_SUPERNET",
    "FAMILIES",
    "IMAGE_NETWORK",
    "JOINT",
    "PATCHES",
    "PRESET_NAMES",
    "PRETRAINED_NETWORKS",
    "PUBLISHED_SUPERNETS",
    "SCHEMES",
    "SUPERNET_FORMS",
    "WEIGHT_RATIOS",
    "Candidate",
    "LiteResidualBranch",
    "LiteResidualConfig",
    "Schedule",
    "StageConfig",
    "SubnetConfig",
    "SupernetSpec",
    "UpdateScheme",
    "block_count",
    "conv_kinds",
    "default_network",
    "default_subnet",
    "family_supernets",
    "get_supernet",
    "make_preset",
    "preset_scheme",
    "smallest_subnet",
    "subnet_params",
    "suggest_candidate",
    "suggest_subnet",
]
