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

from tinytune.search.front.pareto import Point, hypervolume_gain

__all__ = ["calibration_offset", "choose_promotion"]


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

    gains = [hypervolume_gain([shifted(p)], front, ref) for p in contenders]
    return max(range(len(contenders)), key=lambda i: (gains[i], contenders[i][0], -i))
