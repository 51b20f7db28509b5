"""The arrays a data set hands to training: one ``Split`` per part, three parts in ``Splits``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytune.errors import DataError

__all__ = [
    "MAX_REPEATS",
    "MIN_VAL_IMAGES",
    "Split",
    "Splits",
    "repeated",
    "train_subset",
    "val_repeats",
]


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return type(value).__name__


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True, eq=False)
class Split:
    """Images and labels of one part (train, val or test) of a data set.

    Invariants, checked on construction:

    * ``x`` is a float32 array of shape ``(N, 3, R, R)`` (channels first) with values in [-1, 1];
    * ``y`` is an int64 array of shape ``(N,)`` with values >= 0.

    The split keeps read-only views of the arrays, because data sets cache and share what they
    load: copy before changing them in place (``torch.tensor(split.x)`` copies;
    ``torch.from_numpy`` warns about the read-only array). Equality is identity (``eq=False``);
    compare the arrays themselves.

    Attributes:
        x: Images, ``(N, 3, R, R)`` float32 in [-1, 1].
        y: Class indices, ``(N,)`` int64.
    """

    x: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        x, y = self.x, self.y
        if (
            not isinstance(x, np.ndarray)
            or x.dtype != np.float32
            or x.ndim != 4
            or x.shape[1] != 3
            or x.shape[2] != x.shape[3]
        ):
            raise DataError(
                f"Split.x must be a float32 array of shape (N, 3, R, R), got {_describe(x)}"
            )
        if not isinstance(y, np.ndarray) or y.dtype != np.int64 or y.shape != (x.shape[0],):
            raise DataError(
                f"Split.y must be an int64 array of shape ({x.shape[0]},), got {_describe(y)}"
            )
        if x.size:
            low, high = float(x.min()), float(x.max())
            if not (low >= -1.0 and high <= 1.0):
                raise DataError(f"Split.x values must lie in [-1, 1], got [{low}, {high}]")
        if y.size and int(y.min()) < 0:
            raise DataError(f"Split.y labels must be >= 0, got {int(y.min())}")
        object.__setattr__(self, "x", _read_only(x))
        object.__setattr__(self, "y", _read_only(y))

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def resolution(self) -> int:
        """The side ``R`` of the square images."""
        return int(self.x.shape[-1])


@dataclass(frozen=True, eq=False)
class Splits:
    """The train, val and test parts of a data set at one resolution.

    Invariant: all three parts hold images of the same resolution.

    Attributes:
        train: Samples to fine-tune on.
        val: Samples to choose among candidates with.
        test: Held-out samples, for the accuracy that is finally reported.
    """

    train: Split
    val: Split
    test: Split

    def __post_init__(self) -> None:
        parts = {"train": self.train, "val": self.val, "test": self.test}
        for part, split in parts.items():
            if not isinstance(split, Split):
                raise DataError(f"Splits.{part} must be a Split, got {_describe(split)}")
        resolutions = {part: split.resolution for part, split in parts.items()}
        if len(set(resolutions.values())) != 1:
            raise DataError(f"Splits parts must share one resolution, got {resolutions}")

    @property
    def resolution(self) -> int:
        """The side ``R`` of the square images of every part."""
        return self.train.resolution


MIN_VAL_IMAGES = 100
"""A validation split smaller than this cannot rank candidates on its own: one image is more
than one point of accuracy. Candidates are then measured on repeated train/val partitions."""

MAX_REPEATS = 5


def val_repeats(n_val: int) -> int:
    """How many train/val partitions a candidate is measured on, for a validation split of
    ``n_val`` images: 1 from :data:`MIN_VAL_IMAGES` up, else enough that the repeats see that
    many validation images together, at most :data:`MAX_REPEATS`."""
    if n_val >= MIN_VAL_IMAGES:
        return 1
    return min(MAX_REPEATS, -(-MIN_VAL_IMAGES // max(1, n_val)))


def repeated(splits: Splits, repeat: int, seed: int) -> Splits:
    """The splits with train and val re-partitioned (:func:`~tinytune.data.stratify.resplit`;
    repeat 0 returns ``splits`` itself); the test split is the same object."""
    from tinytune.data.stratify import resplit

    if repeat == 0:
        return splits
    train_idx, val_idx = resplit(splits.train.y, splits.val.y, repeat, seed)
    x = np.concatenate([splits.train.x, splits.val.x])
    y = np.concatenate([splits.train.y, splits.val.y])
    return Splits(Split(x[train_idx], y[train_idx]), Split(x[val_idx], y[val_idx]), splits.test)


def train_subset(splits: Splits, fraction: float, seed: int) -> Splits:
    """The splits with a stratified ``fraction`` of the training images (at least one image of
    each class, drawn by scikit-learn's ``train_test_split`` seeded by ``seed``); validation and
    test are the same objects. ``fraction`` 1 returns ``splits`` itself. A short fine-tune on a
    subset is the low fidelity of a multi-fidelity search (:mod:`tinytune.search.screening`)."""
    if not 0.0 < fraction <= 1.0:
        raise DataError(f"a training subset's fraction must lie in (0, 1], got {fraction}")
    if fraction == 1.0:
        return splits
    from sklearn.model_selection import train_test_split

    y = splits.train.y
    _, counts = np.unique(y, return_counts=True)
    keep = max(len(counts), round(fraction * len(y)))
    if keep >= len(y) or counts.min() < 2:  # too few images to leave any out of every class
        return splits
    index, _ = train_test_split(
        np.arange(len(y)), train_size=keep, stratify=y, random_state=seed, shuffle=True
    )
    index = np.sort(index)
    return Splits(Split(splits.train.x[index], y[index]), splits.val, splits.test)
