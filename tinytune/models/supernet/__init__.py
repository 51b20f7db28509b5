"""Supernet weights: pre-training on a source task (:mod:`.pretraining`), named recipes
(:mod:`.recipes`), the checkpoint files, their cache and published weights (:mod:`.files`).
"""

from __future__ import annotations

from tinytune.models.supernet.files import (
    CHECKPOINT_FORMAT,
    PartialRun,
    checkpoint_path,
    load_partial,
    load_supernet,
    require_weights,
    save_supernet,
)
from tinytune.models.supernet.pretraining import (
    StepDraws,
    pretrain_supernet,
    random_subnet,
    step_rng,
)
from tinytune.models.supernet.recipes import (
    DEFAULT_RECIPE,
    RECIPES,
    PretrainRecipe,
    get_recipe,
)
from tinytune.paths import cache_dir

__all__ = [
    "CHECKPOINT_FORMAT",
    "DEFAULT_RECIPE",
    "RECIPES",
    "PartialRun",
    "PretrainRecipe",
    "StepDraws",
    "cache_dir",
    "checkpoint_path",
    "get_recipe",
    "load_partial",
    "load_supernet",
    "pretrain_supernet",
    "random_subnet",
    "require_weights",
    "save_supernet",
    "step_rng",
]
