"""``tinytune pretrain``: pre-train a supernet on the procedural source task and cache it."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["pretrain"]


def pretrain(
    supernet: Annotated[
        str, typer.Option(help="ofa-proxyless-w<width> or ofa-mbv3-w<width>.")
    ] = "ofa-proxyless-w0.35",
    steps: Annotated[int, typer.Option(help="Sandwich-rule training steps.")] = 300,
    force: Annotated[bool, typer.Option(help="Train again even when cached.")] = False,
) -> None:
    """Pre-train a supernet with the sandwich rule and cache the checkpoint."""
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.cli.common import console, pretrain_bar, quiet_logs
    from tinytune.models import PretrainRecipe
    from tinytune.spaces import get_supernet

    quiet_logs()
    spec = get_supernet(supernet)
    with pretrain_bar(spec.name) as progress:
        recipe = PretrainRecipe(steps=steps)
        path = ensure_checkpoint(spec, recipe, force=force, progress=progress)
    console.print(f"{spec.name}: {path}")
