"""A stratified share of the training images: the low fidelity of successive halving, and
what an evaluation on it counts as compute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinytune.data import Split, Splits, get_dataset, train_subset
from tinytune.errors import DataError
from tinytune.evaluators import FinetuneTask


def _splits(labels: list[int]) -> Splits:
    y = np.array(labels, np.int64)
    x = np.arange(len(y) * 3 * 8 * 8, dtype=np.float32).reshape(len(y), 3, 8, 8) / 1e6
    part = Split(x[:3], y[:3])
    return Splits(Split(x, y), part, part)


def test_a_subset_keeps_each_class_share_and_the_held_out_splits() -> None:
    splits = get_dataset("digits").load(32)
    half = train_subset(splits, 0.5, seed=1)
    n = len(splits.train)
    assert len(half.train) == round(0.5 * n)
    assert half.val is splits.val and half.test is splits.test
    whole = np.bincount(splits.train.y, minlength=10)
    part = np.bincount(half.train.y, minlength=10)
    assert np.all(np.abs(part - whole / 2) <= 1)  # stratified: within one image a class
    # the images are the training images with their own labels
    rows = {splits.train.x[i].tobytes(): splits.train.y[i] for i in range(n)}
    assert all(rows[half.train.x[i].tobytes()] == half.train.y[i] for i in range(len(half.train)))
    again = train_subset(splits, 0.5, seed=1)
    other = train_subset(splits, 0.5, seed=2)
    assert np.array_equal(again.train.x, half.train.x)  # deterministic in its seed
    assert not np.array_equal(other.train.x, half.train.x)


def test_the_whole_set_and_classes_too_small_to_split_are_kept_whole() -> None:
    splits = _splits([0, 0, 1, 1, 2, 2, 2, 2])
    assert train_subset(splits, 1.0, seed=0) is splits
    assert len(train_subset(splits, 0.5, seed=0).train) == 4
    assert len(train_subset(splits, 0.1, seed=0).train) == 3  # one image of each class at least
    lonely = _splits([0, 1, 1, 2, 2])  # class 0 has one training image
    assert train_subset(lonely, 0.5, seed=0) is lonely


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5])
def test_a_fraction_outside_0_1_is_refused(fraction: float) -> None:
    with pytest.raises(DataError, match=r"must lie in \(0, 1\]"):
        train_subset(_splits([0, 0, 1, 1]), fraction, seed=0)


def test_an_evaluation_on_a_subset_counts_its_share_of_the_epochs(tiny_checkpoint: Path) -> None:
    from tinytune.evaluators import FinetuneConfig, run_evaluation
    from tinytune.spaces import default_subnet, get_supernet, make_preset

    spec = get_supernet("ofa-proxyless-w0.35")
    candidate = make_preset("last", spec, default_subnet(spec))
    task = FinetuneTask(
        candidate=candidate.to_json(),
        checkpoint=str(tiny_checkpoint),
        dataset="digits",
        data_seed=0,
        finetune=FinetuneConfig(epochs=2, batch_size=64, lr=0.1),
    )
    whole = run_evaluation(task)
    quarter = run_evaluation(task.replace(train_fraction=0.25))
    n = len(get_dataset("digits").load(candidate.subnet.resolution).train)
    assert whole.status == quarter.status == "ok"
    assert whole.train_epochs == 2.0
    assert quarter.train_epochs == 2 * round(0.25 * n) / n
    assert quarter.details["train_fraction"] == 0.25
    assert quarter.details["steps"] == 2 * -(-round(0.25 * n) // 64)  # batches of the subset
    assert whole.details["steps"] == 2 * -(-n // 64)
