"""A deterministic stratified 60/20/20 split of sample indices, and repeated train/val
partitions for data too small for one validation split to rank candidates."""

from __future__ import annotations

import numpy as np

from tinytune.errors import DataError

__all__ = ["HELD_OUT_FRACTION", "MIN_PER_CLASS", "group_split", "resplit", "stratified_split"]

# The fraction of each class that goes to val, and the same fraction to test; the rest is train.
HELD_OUT_FRACTION = 0.2
# One sample for each of train, val and test.
MIN_PER_CLASS = 3


def stratified_split(labels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split sample indices 60/20/20 into train, val and test, class by class.

    A class of ``n`` samples gives ``max(1, round(0.2 n))`` of them to val, as many to test and
    the rest to train, so every class is in every part and each part's share of a class is
    within one sample of 60/20/20. Members are chosen at random and each part is then shuffled
    (so its classes interleave), all with one generator seeded by ``seed``. The result depends
    only on ``labels`` and ``seed``.

    Args:
        labels: Class index of every sample, shape ``(N,)``.
        seed: Seed of the generator that chooses and orders the samples (non-negative).

    Returns:
        Indices into ``labels`` of the train, val and test samples, each int64.

    Raises:
        DataError: If a class has fewer than ``MIN_PER_CLASS`` samples.
    """
    labels = np.asarray(labels)
    classes, counts = np.unique(labels, return_counts=True)
    too_small = {int(c): int(n) for c, n in zip(classes, counts, strict=True) if n < MIN_PER_CLASS}
    if too_small:
        raise DataError(
            f"cannot split classes {too_small} (class: samples); each class needs at least "
            f"{MIN_PER_CLASS} samples, one each for train, val and test"
        )
    rng = np.random.default_rng(seed)
    train, val, test = [], [], []
    for c in classes:
        members = rng.permutation(np.flatnonzero(labels == c))
        held_out = max(1, int(np.floor(HELD_OUT_FRACTION * len(members) + 0.5)))
        test.append(members[:held_out])
        val.append(members[held_out : 2 * held_out])
        train.append(members[2 * held_out :])
    train_idx, val_idx, test_idx = (
        rng.permutation(np.concatenate(part)).astype(np.int64) for part in (train, val, test)
    )
    return train_idx, val_idx, test_idx


def resplit(
    train_labels: np.ndarray,
    val_labels: np.ndarray,
    repeat: int,
    seed: int,
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Another stratified partition of train ∪ val, for repeated validation on small data.

    The pooled samples are indexed train first, then val. Each class keeps as many validation
    samples as it had; which ones is drawn by a generator seeded by ``(seed, repeat)``. Repeat 0
    is the original partition, unchanged. The test split is not touched.

    Where the samples come in ``groups`` (a speaker's clips), each group stays on one side:
    groups in a random order go to validation until it holds as many samples as before; a draw
    whose validation or training part lacks a class is drawn again, and after
    :data:`GROUP_DRAWS` such draws the repeat keeps the original partition (which holds the
    groups apart already).

    Args:
        train_labels, val_labels: Class index of every train and val sample.
        repeat: Which partition (0 = the original).
        seed: The data set's seed.
        groups: The group of every pooled sample, train first, then val; None: no groups.

    Returns:
        Indices into the pooled samples of the new train and val parts, each int64.
    """
    n_train = len(train_labels)
    pooled = np.concatenate([train_labels, val_labels])
    original = np.arange(n_train, dtype=np.int64), np.arange(n_train, len(pooled), dtype=np.int64)
    if repeat == 0:
        return original
    rng = np.random.default_rng([seed, repeat])
    if groups is not None:
        return _grouped(pooled, len(val_labels), groups, rng) or original
    train, val = [], []
    for c in np.unique(pooled):
        members = rng.permutation(np.flatnonzero(pooled == c))
        k = int(np.sum(val_labels == c))
        val.append(members[:k])
        train.append(members[k:])
    return (
        rng.permutation(np.concatenate(train)).astype(np.int64),
        rng.permutation(np.concatenate(val)).astype(np.int64),
    )


GROUP_DRAWS = 20
"""Draws of a grouped partition tried before a repeat keeps the original one."""


def _grouped(
    pooled: np.ndarray, n_val: int, groups: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray] | None:
    classes = set(np.unique(pooled).tolist())
    names = np.unique(groups)
    for _ in range(GROUP_DRAWS):
        in_val = np.zeros(len(pooled), bool)
        for g in rng.permutation(names):
            if in_val.sum() >= n_val:
                break
            in_val |= groups == g
        val, train = np.flatnonzero(in_val), np.flatnonzero(~in_val)
        if set(pooled[val].tolist()) == classes and set(pooled[train].tolist()) == classes:
            return rng.permutation(train).astype(np.int64), rng.permutation(val).astype(np.int64)
    return None


def group_split(
    labels: np.ndarray, groups: list[str], seed: int, words: tuple[str, str, str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training, validation and test indices with each group's samples (a speaker's clips, a
    machine's windows) in one of them: groups in a seeded random order, each to the split
    furthest below its share (60/20/20) of the samples; each split then shuffled.

    Args:
        words: what a sample, a class and a group are called in messages
            (``("clip", "keyword", "speaker")``).

    Raises:
        DataError: a class that some split holds no sample of (too few groups).
    """
    item, kind, group = words
    rng = np.random.default_rng(seed)
    names = sorted(set(groups))
    order = [names[i] for i in rng.permutation(len(names))]
    of_group: dict[str, list[int]] = {}
    for i, name in enumerate(groups):
        of_group.setdefault(name, []).append(i)
    shares = (0.6, 0.2, 0.2)
    parts: tuple[list[int], list[int], list[int]] = ([], [], [])
    total = len(groups)
    for name in order:
        behind = [share * total - len(part) for share, part in zip(shares, parts, strict=True)]
        parts[int(np.argmax(behind))].extend(of_group[name])
    train, val, test = (np.asarray(rng.permutation(part), np.int64) for part in parts)
    for split, part in (("training", train), ("validation", val), ("test", test)):
        missing = sorted(set(np.unique(labels).tolist()) - set(labels[part].tolist()))
        if missing:
            raise DataError(
                f"the {split} split holds no {item} of {kind}(s) {missing[:5]}: {len(names)} "
                f"{group}s are too few to hold every {kind} in every split (each {group}'s "
                f"{item}s stay in one); record more {group}s, at least {MIN_PER_CLASS} a {kind}"
            )
    return train, val, test
