"""The joint search space: sub-networks × lite residuals × sparse update schemes."""

from __future__ import annotations

from tinytune.spaces.candidate import (
    WEIGHT_RATIOS,
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    StageConfig,
    SubnetConfig,
    UpdateScheme,
    conv_kinds,
)
from tinytune.spaces.presets import PRESET_NAMES, default_subnet, make_preset, preset_scheme
from tinytune.spaces.sampling import (
    JOINT,
    SCHEMES,
    subnet_params,
    suggest_candidate,
    suggest_subnet,
)
from tinytune.spaces.supernets import (
    FAMILIES,
    PUBLISHED_SUPERNETS,
    SUPERNET_FORMS,
    SupernetSpec,
    family_supernets,
    get_supernet,
)

__all__ = [
    "FAMILIES",
    "JOINT",
    "PRESET_NAMES",
    "PUBLISHED_SUPERNETS",
    "SCHEMES",
    "SUPERNET_FORMS",
    "WEIGHT_RATIOS",
    "Candidate",
    "LiteResidualBranch",
    "LiteResidualConfig",
    "StageConfig",
    "SubnetConfig",
    "SupernetSpec",
    "UpdateScheme",
    "conv_kinds",
    "default_subnet",
    "family_supernets",
    "get_supernet",
    "make_preset",
    "preset_scheme",
    "subnet_params",
    "suggest_candidate",
    "suggest_subnet",
]
