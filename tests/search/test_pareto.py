"""Pareto front and hypervolume against hand-computed values."""

from __future__ import annotations

import pytest

from tinytune.search import hypervolume_2d, pareto_front


def test_front_of_a_staircase() -> None:
    pts = [(1, 3), (2, 2), (3, 1), (3, 3), (2.5, 2.5)]
    assert pareto_front(pts) == [0, 1, 2]


def test_front_keeps_one_of_equal_points() -> None:
    assert pareto_front([(1, 1), (1, 1), (2, 0)]) == [0, 2]


def test_hypervolume_by_hand() -> None:
    # strips: (4-1)·(4-3) + (4-2)·(3-2) + (4-3)·(2-1) = 3 + 2 + 1
    assert hypervolume_2d([(1, 3), (2, 2), (3, 1)], (4, 4)) == pytest.approx(6.0)


def test_hypervolume_ignores_dominated_and_outside_points() -> None:
    assert hypervolume_2d([(1, 3), (2, 3.5), (5, 0)], (4, 4)) == pytest.approx(3.0)
    assert hypervolume_2d([], (4, 4)) == 0.0


def test_hypervolume_of_accuracy_and_memory() -> None:
    # accuracy 0.8 at 100 B and 0.9 at 200 B, reference (accuracy 0, budget 256 B)
    hv = hypervolume_2d([(-0.8, 100.0), (-0.9, 200.0)], (0.0, 256.0))
    assert hv == pytest.approx(0.9 * 56 + 0.8 * 100)
