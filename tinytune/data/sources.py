"""Source tasks that supernets are pre-trained on, by name (as pre-training recipes name them).

``shapes-glyphs`` is :class:`~tinytune.data.glyphs.SourceTask` (filled shapes and stroke
glyphs, drawn afresh per sample); ``formula`` is :class:`~tinytune.data.formula.FormulaTask`
(IFS fractals, contours, shapes and glyphs from a cache of base images, augmented per sample).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tinytune.errors import DataError

__all__ = ["SOURCE_TASKS", "BatchFn", "get_source_task"]

BatchFn = Callable[[int, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]
"""``(n, resolution, rng) -> (x, y)``: images ``(n, 3, R, R)`` in [-1, 1], labels ``(n,)``."""

SOURCE_TASKS = ("shapes-glyphs", "formula")


def get_source_task(name: str, num_classes: int, seed: int, max_resolution: int) -> BatchFn:
    """The batch function of a named source task.

    Args:
        name: One of :data:`SOURCE_TASKS`.
        num_classes: Number of classes.
        seed: Seed of the class definitions.
        max_resolution: Largest resolution that batches will be drawn at.

    Raises:
        DataError: If ``name`` is unknown (the message lists the valid names).
    """
    if name == "shapes-glyphs":
        from tinytune.data.glyphs import SourceTask

        return SourceTask(num_classes, seed).batch
    if name == "formula":
        from tinytune.data.formula import FormulaTask

        return FormulaTask(num_classes, seed, max_resolution=max_resolution).batch
    raise DataError(f"unknown source task {name!r}; allowed: {', '.join(SOURCE_TASKS)}")
