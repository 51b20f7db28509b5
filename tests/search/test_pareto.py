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


def test_hypervolume_3d_by_hand() -> None:
    from tinytune.search.front.pareto import hypervolume

    assert hypervolume([(0, 0, 0)], (2, 2, 2)) == pytest.approx(8.0)
    assert hypervolume([(1, 1, 1), (0, 0, 0)], (2, 2, 2)) == pytest.approx(8.0)  # dominated
    # boxes 2×2×1 and 1×3×2 overlapping in 1×2×1: 4 + 6 − 2
    assert hypervolume([(0, 0, 1), (1, -1, 0)], (2, 2, 2)) == pytest.approx(8.0)
    assert hypervolume([(0, 0, 1), (1, 1, 0)], (2, 2, 2)) == pytest.approx(4 + 2 - 1)
    assert hypervolume([(3, 0, 0)], (2, 2, 2)) == 0.0


def test_hypervolume_matches_optuna() -> None:
    import numpy as np
    from optuna._hypervolume import compute_hypervolume

    from tinytune.search.front.pareto import hypervolume

    rng = np.random.default_rng(0)
    for d in (2, 3, 4):
        for _ in range(20):
            pts = rng.uniform(0, 1, size=(int(rng.integers(1, 12)), d))
            ref = np.ones(d) * 1.1
            assert hypervolume(pts.tolist(), ref.tolist()) == pytest.approx(
                compute_hypervolume(pts, ref)
            )


def test_exclusive_contributions_by_hand() -> None:
    from tinytune.search.front.pareto import contributions

    ref = (0.0, 100.0, 10.0)  # (accuracy, bytes, seconds): the box is 1
    a, b = (0.8, 50.0, 5.0), (0.4, 20.0, 2.0)  # 0.8·0.5·0.5 = 0.2 and 0.4·0.8·0.8 = 0.256
    dominated = (0.3, 60.0, 6.0)  # by a
    # they share 0.4·0.5·0.5 = 0.1: the union is 0.356, so a alone adds 0.1 and b 0.156
    got = contributions(["a", "b", "c"], [a, b, dominated], ref)
    assert got == pytest.approx({"a": 0.1, "b": 0.156, "c": 0.0})
    # a group of two points (one fine-tune at two schedules) counts as one
    twin = (0.8, 40.0, 6.0)  # 0.8·0.6·0.4 = 0.192; with a: 0.2 + 0.192 - 0.8·0.5·0.4
    grouped = contributions(["a", "b", "a"], [a, b, twin], ref)
    union_a = 0.2 + 0.192 - 0.16
    # b inside a and its twin: 0.4·0.8·0.8 less what a ∪ twin covers of it, 0.4·(0.5·0.5 +
    # 0.6·0.4 - 0.5·0.4) (slices of b's box), so the whole is union_a + 0.256 - 0.116
    whole = union_a + 0.256 - 0.4 * (0.25 + 0.24 - 0.2)
    assert grouped == pytest.approx({"a": whole - 0.256, "b": whole - union_a})


def test_within_the_budgets_by_hand() -> None:
    from tinytune.db import EvaluationRecord
    from tinytune.search.config import Budgets
    from tinytune.search.front.recording import within

    def measured(memory: int, flash: int, latency_ms: float) -> EvaluationRecord:
        return EvaluationRecord(
            "s", "0" * 16, "measured", "ok", val_accuracy=0.5, memory_bytes=memory,
            latency_ms=latency_ms, details={"flash_bytes": flash},
        )  # fmt: skip

    budgets = Budgets(sram_bytes=1000, flash_bytes=5000, latency_s=0.02)
    assert within(budgets, measured(1000, 5000, 20.0))  # each budget met exactly
    assert not within(budgets, measured(1001, 5000, 20.0))
    assert not within(budgets, measured(1000, 5001, 20.0))
    assert not within(budgets, measured(1000, 5000, 20.001))
    # a budget that is None is no budget; an evaluation without its accuracy is never within
    assert within(Budgets(), measured(9**9, 9**9, 1e6))
    no_accuracy = EvaluationRecord("s", "0" * 16, "measured", "ok", memory_bytes=1, latency_ms=1.0)
    assert not within(budgets, no_accuracy)
