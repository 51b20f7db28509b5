"""Supernet weights for a search or an export: given weights, else the checkpoint that the
package ships for the default supernet and recipe (verified by its SHA-256), else the cached
pre-trained checkpoint of the recipe, pre-trained on its source task when missing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinytune.hashing import sha256_file  # also importable from here, as before

if TYPE_CHECKING:
    from torch import nn

    from tinytune.models import PretrainRecipe
    from tinytune.spaces import SupernetSpec

__all__ = [
    "ensure_checkpoint",
    "pretrain_into",
    "sha256_file",
    "shipped_checkpoint",
]

PretrainProgress = Callable[[int, int, float], None]
"""Called as ``(step, steps, loss)`` while a supernet is pre-trained."""

WEIGHTS_DIR = Path(__file__).parent / "models" / "weights"
"""Checkpoints shipped inside the package: ``<supernet>.pt`` and its record ``<supernet>.json``
(recipe, SHA-256 of the ``.pt``, the command that made it and its wall time)."""


def shipped_checkpoint(spec: SupernetSpec, recipe: PretrainRecipe | None = None) -> Path | None:
    """The checkpoint the package ships for ``spec`` (pre-trained by ``recipe``, when given),
    if any; for a fixed pretrained network, its ImageNet weights from their registry package.

    Raises:
        ModelError: the shipped file's SHA-256 is not the one its record states.
    """
    from tinytune.errors import ModelError

    if spec.imported:  # a user's network holds its own weights
        return Path(spec.network_file)
    if spec.weights_package:
        from tinytune.models.pretrained import pretrained_weights

        return pretrained_weights(spec)
    if spec.fixed:
        return None

    record_path = WEIGHTS_DIR / f"{spec.name}.json"
    if not record_path.is_file():
        return None
    record = json.loads(record_path.read_text())
    if recipe is not None and record.get("recipe") != recipe.to_dict():
        return None
    path = WEIGHTS_DIR / f"{spec.name}.pt"
    actual = sha256_file(path) if path.is_file() else "missing"
    if actual != record["sha256"]:
        raise ModelError(
            f"shipped checkpoint {str(path)!r} is damaged: SHA-256 {actual}, "
            f"expected {record['sha256']}"
        )
    return path


def pretrain_into(
    spec: SupernetSpec,
    recipe: PretrainRecipe,
    path: Path,
    *,
    progress: PretrainProgress | None = None,
    device: str = "cpu",
    checkpoint_every: int = 0,
    half: bool = False,
    workers: int = 0,
    fresh: bool = False,
    on_resume: Callable[[int], None] | None = None,
) -> nn.Module:
    """Pre-train ``spec`` by ``recipe`` on its source task and save it at ``path``.

    Args:
        progress: told of each pre-training step.
        device: torch device to train on (``cpu`` or ``cuda``).
        checkpoint_every: also save (float32, with the optimiser's state) at
            ``<path>.partial.pt`` every so many steps, so that an interrupted run is usable
            and goes on where it stopped when started again; 0 does not.
        half: store the final checkpoint's tensors as float16.
        workers: processes drawing batches ahead (``per-step`` recipes only).
        fresh: start from scratch even where a partial run of this recipe is saved.
        on_resume: told the steps done when a partial run is resumed.

    Raises:
        ModelError: a partial run is saved there that cannot go on (another recipe, a
            ``sequential`` one, a file without the optimiser's state or not readable), and
            ``fresh`` is not set.
    """
    from tinytune.data.sources import get_source_task
    from tinytune.errors import ModelError
    from tinytune.models import pretrain_supernet, save_supernet
    from tinytune.models.supernet import load_partial

    batch_fn = get_source_task(
        recipe.source, recipe.source_classes, recipe.seed, max(spec.resolutions)
    )
    partial = path.with_suffix(".partial.pt")
    resume = None
    if partial.exists() and not fresh:  # never overwritten unasked: it may hold hours of work
        where = f"{str(partial)!r} holds a partial run"
        if recipe.stream != "per-step":
            raise ModelError(
                f"{where}, and this recipe draws its batches in one sequence, so no run of it "
                "can go on from one; start over with 'tinytune pretrain --force'"
            )
        resume = load_partial(spec, partial)
        if resume is None:
            raise ModelError(
                f"{where} saved without its optimiser's state (by an earlier version), which "
                "cannot go on; start over with 'tinytune pretrain --force'"
            )
        if resume.recipe != recipe:
            raise ModelError(
                f"{where} of another recipe (digest {resume.recipe.digest}, not "
                f"{recipe.digest}); start over with 'tinytune pretrain --force'"
            )
        if on_resume is not None:
            on_resume(resume.step)

    def save_partial(net: nn.Module, step: int, optimizer: dict[str, Any]) -> None:
        save_supernet(net, spec, recipe, partial, partial=(step, optimizer))

    net = pretrain_supernet(
        spec,
        recipe,
        batch_fn,
        progress,
        device=device,
        checkpoint=save_partial if checkpoint_every else None,
        checkpoint_every=checkpoint_every,
        workers=workers,
        resume=resume,
    )
    save_supernet(net, spec, recipe, path, half=half)
    partial.unlink(missing_ok=True)
    return net


def ensure_checkpoint(
    spec: SupernetSpec,
    recipe: PretrainRecipe | None = None,
    weights: Path | None = None,
    *,
    force: bool = False,
    progress: PretrainProgress | None = None,
    device: str = "cpu",
    workers: int = 0,
) -> Path:
    """The supernet checkpoint to use.

    Args:
        weights: a weights file; checked by loading it, then returned as it is.
        recipe: the pre-training recipe. None: the checkpoint the package ships for
            ``spec``, else the default recipe's (``quick``). The shipped checkpoint is returned
            when it was made by the recipe, else the cached one, pre-trained first when
            missing.
        force: pre-train again into the cache even when a checkpoint exists.
        progress: told of each pre-training step.
        device: torch device to pre-train on.
        workers: processes drawing batches ahead (``per-step`` recipes only).

    Raises:
        ModelError: the weights do not load, a published supernet has none, or the shipped
            checkpoint is damaged.
    """
    from tinytune.models import checkpoint_path, load_supernet
    from tinytune.models.supernet import DEFAULT_RECIPE, get_recipe, require_weights

    if weights is not None:
        load_supernet(spec, weights)  # fails early, with one line, on a bad file
        return weights
    require_weights(spec, weights)
    if not force:
        shipped = shipped_checkpoint(spec, recipe)
        if shipped is not None:
            return shipped
    recipe = recipe or get_recipe(DEFAULT_RECIPE)
    path = checkpoint_path(spec, recipe)
    if path.is_file() and not force:
        return path
    pretrain_into(spec, recipe, path, progress=progress, device=device, workers=workers)
    return path
