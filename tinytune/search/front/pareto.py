"""Pareto fronts and hypervolume for tinytune's objectives.

Points are (accuracy ↑, memory ↓) and optionally latency ↓. Internally every objective is turned
into one to minimise (accuracy → −accuracy).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "HYPERVOLUME_BOX",
    "Point",
    "contributions",
    "hypervolume",
    "hypervolume_2d",
    "hypervolume_gain",
    "normalised_hypervolume",
    "pareto_front",
    "reference",
]


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True)
    )


def pareto_front(points: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the non-dominated points, all objectives minimised; of equal points the
    first is kept."""
    front: list[int] = []
    for i, p in enumerate(points):
        if any(_dominates(points[j], p) for j in range(len(points)) if j != i):
            continue
        if any(tuple(points[j]) == tuple(p) for j in front):
            continue
        front.append(i)
    return front


def hypervolume_2d(points: Sequence[tuple[float, float]], reference: tuple[float, float]) -> float:
    """Area dominated by ``points`` (both objectives minimised) and bounded by ``reference``.

    Points that do not strictly dominate the reference contribute nothing.
    """
    inside = sorted((x, y) for x, y in points if x < reference[0] and y < reference[1])
    area = 0.0
    best_y = reference[1]
    for x, y in inside:  # sweep along x; each point adds the strip below the best y so far
        if y < best_y:
            area += (reference[0] - x) * (best_y - y)
            best_y = y
    return area


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """Volume dominated by ``points`` (all objectives minimised) and bounded by ``reference``,
    in any number of dimensions.

    Slices along the last objective: between consecutive values of it, the dominated region
    is the (d−1)-dimensional hypervolume of the points at or below the slice. Exact; fine for
    the few dozen points of a search's front.
    """
    d = len(reference)
    inside = [tuple(p) for p in points if all(x < r for x, r in zip(p, reference, strict=True))]
    if not inside:
        return 0.0
    if d == 1:
        return reference[0] - min(p[0] for p in inside)
    if d == 2:
        return hypervolume_2d([(p[0], p[1]) for p in inside], (reference[0], reference[1]))
    inside.sort(key=lambda p: p[-1])
    volume = 0.0
    for i, p in enumerate(inside):
        upper = inside[i + 1][-1] if i + 1 < len(inside) else reference[-1]
        if upper > p[-1]:
            volume += (upper - p[-1]) * hypervolume(
                [q[:-1] for q in inside[: i + 1]], reference[:-1]
            )
    return volume


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


def hypervolume_gain(points: Sequence[Point], front: Sequence[Point], ref: Point) -> float:
    """How much normalised hypervolume ``points`` add to ``front`` together (a candidate under
    several schedules adds the union of its points, not their sum); never below 0 (the two
    volumes, summed in other orders, can differ by a rounding)."""
    return max(
        0.0, normalised_hypervolume([*front, *points], ref) - normalised_hypervolume(front, ref)
    )


def contributions(groups: Sequence[str], points: Sequence[Point], ref: Point) -> dict[str, float]:
    """Each group's exclusive share of the hypervolume of ``points`` (normalised by ``ref``,
    the box 1): what the front loses without the group's points (SMS-EMOA's selection
    measure; a group is, say, one fine-tune under its several schedules). 0 for a group
    whose points others dominate or equal."""
    whole = normalised_hypervolume(points, ref)
    out: dict[str, float] = {}
    for group in dict.fromkeys(groups):
        rest = [p for g, p in zip(groups, points, strict=True) if g != group]
        out[group] = max(0.0, whole - normalised_hypervolume(rest, ref))
    return out
