"""Repeated train/val partitions for data sets whose validation split is too small to rank
candidates: the partitions, the rule that asks for them, and an evaluation's means over them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.data.test_data import write_image_folder
from tinytune.data import get_dataset, repeated, val_repeats
from tinytune.data.stratify import resplit
from tinytune.evaluators import FinetuneTask


@pytest.mark.parametrize(
    ("n_val", "repeats"), [(359, 1), (100, 1), (99, 2), (50, 2), (30, 4), (12, 5), (0, 5)]
)
def test_the_number_of_repeats(n_val: int, repeats: int) -> None:
    assert val_repeats(n_val) == repeats


def test_a_repeat_is_another_stratified_partition_of_train_and_val() -> None:
    train = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2], np.int64)
    val = np.array([0, 1, 1, 2], np.int64)
    t0, v0 = resplit(train, val, 0, seed=3)
    assert np.array_equal(t0, np.arange(10)) and np.array_equal(v0, np.arange(10, 14))
    pooled = np.concatenate([train, val])
    seen = set()
    for r in range(1, 6):
        t, v = resplit(train, val, r, seed=3)
        assert sorted(np.concatenate([t, v]).tolist()) == list(range(14))  # a partition
        assert np.bincount(pooled[v], minlength=3).tolist() == [1, 2, 1]  # same class counts
        t2, v2 = resplit(train, val, r, seed=3)
        assert np.array_equal(t, t2) and np.array_equal(v, v2)  # deterministic
        seen.add(tuple(sorted(v.tolist())))
    assert len(seen) > 1  # the repeats differ


def test_repeated_splits_keep_the_test_split(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images", images_per_class=8)
    splits = get_dataset(f"imagefolder:{root}").load(16)
    assert repeated(splits, 0, 0) is splits
    again = repeated(splits, 2, 0)
    assert again.test is splits.test
    assert len(again.train) == len(splits.train) and len(again.val) == len(splits.val)
    pooled = np.concatenate([np.asarray(splits.train.x), np.asarray(splits.val.x)]).reshape(
        len(splits.train) + len(splits.val), -1
    )
    rows = {row.tobytes() for row in pooled}
    assert all(
        row.tobytes() in rows for row in np.asarray(again.val.x).reshape(len(again.val), -1)
    )
    assert np.array_equal(np.sort(again.val.y), np.sort(splits.val.y))


@pytest.mark.slow
def test_an_evaluation_on_repeats_reports_their_means(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    from tinytune.evaluators import FinetuneConfig, run_evaluation
    from tinytune.spaces import get_supernet, make_preset

    root = write_image_folder(tmp_path / "images", images_per_class=8)
    task = FinetuneTask(
        candidate=make_preset("bias-only", get_supernet("ofa-proxyless-w0.35")).to_json(),
        checkpoint=str(tiny_checkpoint),
        dataset=f"imagefolder:{root}",
        data_seed=0,
        finetune=FinetuneConfig(epochs=2, batch_size=4, lr=0.1),
    )
    one = run_evaluation(task)
    three = run_evaluation(task.replace(repeats=3))
    assert one.status == three.status == "ok"
    details = three.details
    assert details["repeats"] == 3 and len(details["val_accuracies"]) == 3
    assert details["val_accuracies"][0] == one.val_accuracy  # repeat 0: the own split
    assert details["test_accuracies"][0] == one.accuracy
    assert three.val_accuracy == pytest.approx(np.mean(details["val_accuracies"]))
    assert three.accuracy == pytest.approx(np.mean(details["test_accuracies"]))
    assert details["steps"] == 3 * one.details["steps"]
