"""bench/lr_grid.py's rules: the study's own rule on one partition or on the mean of several,
and the one-standard-error rule, on grids whose choice is computed by hand; the summary
reports the partition-0 test accuracy at each chosen rate."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from .benches import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("lr_grid")


GRID = {
    0.4: {"val": [0.975, 0.981, 0.981], "test": [0.983, 0.986, 0.969]},
    0.8: {"val": [0.989, 0.983, 0.981], "test": [0.983, 0.986, 0.989]},
    1.6: {"val": [0.994, 0.978, 0.983], "test": [0.972, 0.975, 0.989]},
}


def test_the_rules_choose_as_computed_by_hand(bench: ModuleType) -> None:
    assert bench.mean_of(1)(GRID) == 1.6  # 0.994 is the best on partition 0
    # means of two: 0.978, 0.986, 0.986: a tie, the smaller rate
    assert bench.mean_of(2)(GRID) == 0.8
    # means of three: 0.979, 0.9843, 0.985
    assert bench.mean_of(3)(GRID) == 1.6
    # one SE of 0.994 on 359 images: sqrt(0.994 * 0.006 / 359) = 0.00408; 0.989 is 0.005 below
    assert bench.one_se(GRID, 359) == 1.6
    # on 100 images the SE is 0.00772: 0.8 is within it, 0.4 (0.019 below) is not
    assert bench.one_se(GRID, 100) == 0.8


def test_summary_reports_the_partition_0_test_at_each_chosen_rate(bench: ModuleType) -> None:
    rows = [
        {"seed": seed, "family": "full", "lr": lr, **grid}
        for seed in (0, 1)
        for lr, grid in GRID.items()
    ]
    rows += [
        {"seed": 0, "family": "classifier", "lr": lr, "val": [v], "test": [t]}
        for lr, v, t in ((0.8, 0.90, 0.85), (1.6, 0.91, 0.87), (3.2, 0.91, 0.88))
    ] + [
        {"seed": 1, "family": "classifier", "lr": lr, "val": [v], "test": [t]}
        for lr, v, t in ((0.8, 0.92, 0.86), (1.6, 0.91, 0.87), (3.2, 0.90, 0.88))
    ]
    text = bench.summary({"epochs": 8, "n_val": 359, "rows": rows})
    lines = text.splitlines()
    assert lines[0].startswith("2 seeds (0, 1), 1 train/validation partitions, 8 epochs")
    table = [line for line in lines if line.startswith("| ")][1:]
    # the families in FAMILIES' order; one partition in common, so no "mean of k" rows
    assert [line.split(" | ")[0] for line in table] == ["| classifier"] * 5 + ["| full"] * 5
    assert table[0] == (
        "| classifier | partition 0 (the study's) | 1.6 0.8 "
        "| 86.5 (86.0–87.0) | 86.5 (86.0–87.0) |"
    )
    assert table[2] == "| classifier | fixed 0.8 | | 85.5 (85.0–86.0) | 85.5 (85.0–86.0) |"
    # the mean over the partitions every row has (one here), not over all of full's three
    assert table[5] == (
        "| full | partition 0 (the study's) | 1.6 1.6 | 97.2 (97.2–97.2) | 97.2 (97.2–97.2) |"
    )


def test_the_rate_and_the_length_are_chosen_together_on_partition_0(bench: ModuleType) -> None:
    """The best partition-0 validation accuracy over every rate and length; on a tie the fewer
    epochs, then the smaller rate; each length's own choice beside it."""
    seed0 = [  # (lr, epochs, val, test); the tied rows last, so that max's order cannot pick
        (0.4, 8, 0.975, 0.983),
        (0.8, 24, 0.986, 0.989),
        (0.4, 24, 0.989, 0.991),  # ties 0.8/8 on validation: the fewer epochs win
        (0.8, 8, 0.989, 0.983),
    ]
    seed1 = [
        (0.4, 8, 0.972, 0.972),
        (0.8, 8, 0.978, 0.975),
        (0.8, 24, 0.983, 0.980),  # ties 0.4/24: the smaller rate wins
        (0.4, 24, 0.983, 0.989),
    ]
    rows = [
        {"seed": seed, "family": "full", "lr": lr, "epochs": e, "val": [v], "test": [t]}
        for seed, grid in ((0, seed0), (1, seed1))
        for lr, e, v, t in grid
    ]
    for seed in (rows[:4], rows[4:]):  # in either order
        assert bench.chosen_pair(seed) == bench.chosen_pair(seed[::-1])
    assert bench.chosen_pair(rows[:4])["test"] == [0.983]
    assert bench.chosen_pair(rows[4:])["test"] == [0.989]
    table = [
        line
        for line in bench.length_summary({"n_val": 359, "rows": rows}).splitlines()
        if line.startswith("| full")
    ]
    assert table == [
        "| full | the rates at 8 epochs | 0.8/8 0.8/8 | 98.4 (97.8–98.9) | 97.9 (97.5–98.3) |",
        "| full | the rates at 24 epochs | 0.4/24 0.4/24 | 98.6 (98.3–98.9) | 99.0 (98.9–99.1) |",
        "| full | the rates and the lengths | 0.8/8 0.4/24 | 98.6 (98.3–98.9) "
        "| 98.6 (98.3–98.9) |",
    ]


def test_a_file_of_one_length_and_a_length_missing_at_a_seed_still_summarise(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files written before rows named their length keep it beside the rows; a seed that lacks
    a length is left out of that length's choice, not a crash."""
    import json

    old = {"epochs": 8, "n_val": 359, "rows": [
        {"seed": 0, "family": "full", "lr": lr, **grid} for lr, grid in GRID.items()
    ]}  # fmt: skip
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert bench.main(["--from-json", str(tmp_path / "old.json")]) == 0
    assert "| full | partition 0 (the study's) | 1.6 |" in capsys.readouterr().out
    rows = [
        {"seed": seed, "family": "full", "lr": 0.8, "epochs": e, "val": [v], "test": [t]}
        for seed, e, v, t in ((0, 8, 0.98, 0.97), (0, 24, 0.99, 0.99), (1, 8, 0.97, 0.96))
    ]
    table = bench.length_summary({"n_val": 359, "rows": rows}).splitlines()
    assert (
        "| full | the rates at 24 epochs | 0.8/24 | 99.0 (99.0–99.0) | 99.0 (99.0–99.0) |" in table
    )
    assert (
        "| full | the rates and the lengths | 0.8/24 0.8/8 | 98.0 (97.0–99.0) | 97.5 (96.0–99.0) |"
        in table
    )
