"""The fidelity ladder's promotion rule: which proxy-scored candidate earns a measured fine-tune.

The ladder works in brackets (successive halving with one rung between proxy and measured, and
reduction factor η): Optuna proposes a candidate, the driver enqueues η−1 more trials on the
same sub-network whose schemes the sampler draws freely, all η are scored by the proxy (no
training once the sub-network's classifier-only accuracy is known), and one is promoted to a
measured fine-tune; the others are told PRUNED.

Which one: the candidate whose estimated point (accuracy, predicted peak SRAM, predicted
latency) adds the most hypervolume to the current **measured** front, the hypervolume of the
three objectives normalised by the same reference point as the study's snapshots. The proxy's
accuracy is first shifted by the median gap between measured and proxy accuracy of the
candidates that have both (it estimates validation accuracy from a table measured on another
sub-network, so its level is off while its order is what matters). When no candidate would
enlarge the front, the one with the highest proxy accuracy is promoted.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from tinytune.search.pareto import hypervolume

__all__ = [
    "Point",
    "calibration_offset",
    "choose_promotion",
    "hypervolume_gain",
    "normalised_hypervolume",
    "reference",
]

Point = tuple[float, float, float]
"""(accuracy ↑, peak SRAM bytes ↓, step latency s ↓)."""


HYPERVOLUME_BOX = (
    "hypervolume: the share that the front dominates of the box between the ideal point (100 % "
    "accuracy, 0 bytes, 0 s) and the reference point (accuracy 0, the SRAM and latency budgets; "
    "without a budget, 1.1 × the largest value among the measured candidates within the "
    "budgets, which moves as larger ones are measured)"
)
"""What a printed hypervolume measures (:func:`reference`, :func:`normalised_hypervolume`)."""


def reference(
    points: Sequence[Point], sram_budget: float | None, latency_budget: float | None
) -> Point:
    """The hypervolume reference: accuracy 0 and each budget; without a budget, 10 % beyond
    the worst value among ``points``."""
    return (
        0.0,
        float(sram_budget or 1.1 * max((p[1] for p in points), default=1.0)),
        float(latency_budget or 1.1 * max((p[2] for p in points), default=1.0)),
    )


def _normalised(points: Sequence[Point], ref: Point) -> list[tuple[float, float, float]]:
    """All objectives minimised and divided by the reference, so the box is the unit cube."""
    return [
        (-p[0], p[1] / ref[1] if ref[1] else p[1], p[2] / ref[2] if ref[2] else p[2])
        for p in points
    ]


def normalised_hypervolume(points: Sequence[Point], ref: Point) -> float:
    """The hypervolume of ``points`` in the box between the ideal point and ``ref``, each
    objective divided by the reference's, so the whole box is 1."""
    return hypervolume(_normalised(points, ref), (0.0, 1.0, 1.0))


def hypervolume_gain(point: Point, front: Sequence[Point], ref: Point) -> float:
    """How much normalised hypervolume ``point`` adds to ``front``."""
    return normalised_hypervolume([*front, point], ref) - normalised_hypervolume(front, ref)


def calibration_offset(pairs: Sequence[tuple[float, float]]) -> float:
    """Median of measured − proxy accuracy over ``(proxy, measured)`` pairs; 0 without any."""
    return statistics.median(m - p for p, m in pairs) if pairs else 0.0


def choose_promotion(
    contenders: Sequence[Point], front: Sequence[Point], ref: Point, offset: float = 0.0
) -> int:
    """Index of the contender to promote (see the module docstring); ``contenders`` carry proxy
    accuracies, ``front`` measured ones."""
    if not contenders:
        raise ValueError("choose_promotion needs at least one contender")

    def shifted(p: Point) -> Point:
        return (min(1.0, max(0.0, p[0] + offset)), p[1], p[2])

    gains = [hypervolume_gain(shifted(p), front, ref) for p in contenders]
    return max(range(len(contenders)), key=lambda i: (gains[i], contenders[i][0], -i))
