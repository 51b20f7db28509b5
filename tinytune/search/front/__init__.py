"""The front of a study: Pareto fronts and hypervolume over the objectives, and the measured
evaluations recorded with the snapshots of the study's front."""

from __future__ import annotations

from tinytune.search.front.pareto import (
    HYPERVOLUME_BOX,
    hypervolume,
    hypervolume_2d,
    pareto_front,
)
from tinytune.search.front.recording import (
    FrontPoint,
    hypervolume_history,
    recipe_point,
    reference_point,
)

__all__ = [
    "HYPERVOLUME_BOX",
    "FrontPoint",
    "hypervolume",
    "hypervolume_2d",
    "hypervolume_history",
    "pareto_front",
    "recipe_point",
    "reference_point",
]
