"""Supernet weights for a search or an export: given weights, else the cached pre-trained
checkpoint of the default recipe, pre-trained on the procedural source task when missing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinytune.models import PretrainRecipe
    from tinytune.spaces import SupernetSpec

__all__ = ["ensure_checkpoint", "require_weights"]

PretrainProgress = Callable[[int, int, float], None]
"""Called as ``(step, steps, loss)`` while a supernet is pre-trained."""


def require_weights(spec: SupernetSpec, weights: Path | None) -> None:
    """A published supernet cannot be pre-trained here: its weights must be given.

    Raises:
        ModelError: ``spec`` is published and ``weights`` is None.
    """
    from tinytune.errors import ModelError
    from tinytune.models.supernet import PUBLISHED_URL

    if spec.published and weights is None:
        raise ModelError(
            f"supernet {spec.name} needs its published ImageNet weights, which tinytune does not "
            f"download: fetch {PUBLISHED_URL.format(name=spec.name)} and pass the file with "
            "--weights FILE"
        )


def ensure_checkpoint(
    spec: SupernetSpec,
    recipe: PretrainRecipe | None = None,
    weights: Path | None = None,
    *,
    force: bool = False,
    progress: PretrainProgress | None = None,
) -> Path:
    """The supernet checkpoint to use.

    Args:
        weights: a weights file; checked by loading it, then returned as it is.
        recipe: the pre-training recipe of the cached checkpoint (default recipe if None).
        force: pre-train again even when the cached checkpoint exists.
        progress: told of each pre-training step.

    Raises:
        ModelError: the weights do not load, or a published supernet has none.
    """
    from tinytune.data import SourceTask
    from tinytune.models import (
        PretrainRecipe,
        checkpoint_path,
        load_supernet,
        pretrain_supernet,
        save_supernet,
    )

    if weights is not None:
        load_supernet(spec, weights)  # fails early, with one line, on a bad file
        return weights
    require_weights(spec, weights)
    recipe = recipe or PretrainRecipe()
    path = checkpoint_path(spec, recipe)
    if path.is_file() and not force:
        return path
    task = SourceTask(recipe.source_classes, recipe.seed)
    net = pretrain_supernet(spec, recipe, task.batch, progress)
    save_supernet(net, spec, recipe, path)
    return path
