"""The arrays a data set hands to training: one ``Split`` per part, three parts in ``Splits``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytune.errors import DataError

__all__ = [
    "MAX_REPEATS",
    "MIN_VAL_IMAGES",
    "TO_FLOAT",
    "Images",
    "Pixels",
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


TO_FLOAT: np.ndarray = _read_only(np.arange(256, dtype=np.float32) / np.float32(127.5) - 1.0)
"""The float32 value in [-1, 1] of each 8-bit sample 0..255: ``v / 127.5 - 1`` in float32
arithmetic, the mapping every data set of images uses. Looking a sample up in this table gives
the same bits as computing it, on any device (a GPU's division by a constant may be a
multiplication by its reciprocal, one rounding off)."""


class Pixels:
    """Images kept as 8-bit RGB, handed out as float32 channels-first in [-1, 1].

    An image folder of tens of thousands of images at 128 px is 4 GB as float32 and a quarter
    of that as bytes; kept as bytes (a memory-mapped file of decoded pixels, shared by every
    process that maps it), it is converted one batch at a time instead of all at once. A
    ``Pixels`` stands where a float32 ``(N, 3, R, R)`` array stands in a :class:`Split`: it has
    the array's ``shape``, ``dtype`` (float32), ``ndim``, ``size`` and ``len``; indexing it
    returns the float32 array that indexing the float array would return, computed as
    ``storage.transpose(0, 3, 1, 2).astype(np.float32) / 127.5 - 1.0`` computes it, bit for
    bit (in place, so that a batch costs one float array); ``np.asarray`` gives the whole float
    array. It has no way to write: the storage is shared.

    Rows are an ``index`` into a ``storage`` of ``(M, R, R, 3)`` uint8, so that the train,
    validation and test splits, their repeats and subsets are views of one storage
    (:meth:`take`, :meth:`concatenate`) rather than copies of it.

    Attributes:
        storage: the decoded images, ``(M, R, R, 3)`` uint8 (an array or a read-only memmap).
        index: which rows of ``storage`` are this set's images, in order, ``(N,)`` int64.
        key: names the storage's content (the same key: the same bytes, in any process), so
            that a worker keeps one copy of it per device; empty when not known.
    """

    __slots__ = ("index", "key", "storage")

    storage: np.ndarray
    index: np.ndarray
    key: str

    def __init__(
        self, storage: np.ndarray, index: np.ndarray | None = None, key: str = ""
    ) -> None:
        """Wrap ``storage`` (its rows ``index``, default all in order).

        Raises:
            DataError: the storage is not ``(M, R, R, 3)`` uint8, or an index is out of range.
        """
        if (
            not isinstance(storage, np.ndarray)
            or storage.dtype != np.uint8
            or storage.ndim != 4
            or storage.shape[3] != 3
            or storage.shape[1] != storage.shape[2]
        ):
            raise DataError(
                f"Pixels storage must be a uint8 array of shape (M, R, R, 3), got "
                f"{_describe(storage)}"
            )
        rows = np.arange(len(storage)) if index is None else np.asarray(index)
        if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
            raise DataError(f"Pixels index must be 1-D integers, got {_describe(rows)}")
        rows = rows.astype(np.int64)
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= len(storage)):
            raise DataError(f"Pixels index out of range for {len(storage)} stored images")
        self.storage = _read_only(storage) if storage.flags.writeable else storage
        self.index = _read_only(rows)
        self.key = key

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(N, 3, R, R)``, as the float array's."""
        side = int(self.storage.shape[1])
        return (len(self.index), 3, side, side)

    @property
    def dtype(self) -> np.dtype:
        """float32: what indexing returns."""
        return np.dtype(np.float32)

    @property
    def ndim(self) -> int:
        return 4

    @property
    def size(self) -> int:
        """Elements of the float array."""
        n, c, h, w = self.shape
        return n * c * h * w

    def __len__(self) -> int:
        return len(self.index)

    def __repr__(self) -> str:
        return f"Pixels(shape={self.shape}, stored={self.storage.shape}, key={self.key!r})"

    def _floats(self, rows: np.ndarray) -> np.ndarray:
        """The float32 ``(n, 3, R, R)`` of the storage's ``rows``."""
        # the eager formula's float32 operations, in place: one float32 array at a time
        x = self.storage[rows].transpose(0, 3, 1, 2).astype(np.float32, order="C")
        np.divide(x, np.float32(127.5), out=x)
        np.subtract(x, np.float32(1.0), out=x)
        return x

    def __getitem__(self, key: object) -> np.ndarray:
        """What ``float_array[key]`` would be, as a new float32 array."""
        first, rest = (key[0], key[1:]) if isinstance(key, tuple) and key else (key, ())
        if (
            first is Ellipsis
            or first is None
            or any(k is Ellipsis or k is None or np.ndim(k) > 0 for k in rest)
        ):  # a first axis not of images, or arrays that index together: do it in full
            return np.asarray(self)[key]  # type: ignore[index]
        rows = np.asarray(self.index[first])  # type: ignore[index]
        out = self._floats(rows.reshape(-1)).reshape((*rows.shape, *self.shape[1:]))
        # the rest indexes the axes after the images' (none of them when one image was asked)
        return out[(slice(None),) * rows.ndim + rest] if rest else out

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        """The whole float32 ``(N, 3, R, R)`` array (4 bytes a sample: for small sets).

        Raises:
            ValueError: asked not to copy (``np.asarray(pixels, copy=False)``): the floats are
                always new.
        """
        if copy is False:
            raise ValueError("Pixels convert to a new float32 array: they cannot be read as one")
        out = self._floats(self.index)
        return out if dtype is None else out.astype(dtype)  # type: ignore[call-overload]

    def take(self, rows: np.ndarray) -> Pixels:
        """The images ``rows`` (positions in this set), as a view of the same storage."""
        return Pixels(self.storage, self.index[np.asarray(rows, dtype=np.int64)], self.key)

    @staticmethod
    def concatenate(first: Pixels, second: Pixels) -> Pixels:
        """``first``'s images, then ``second``'s, both views of one storage.

        Raises:
            DataError: they view different storages.
        """
        if first.storage is not second.storage and (not first.key or first.key != second.key):
            raise DataError("Pixels of different storages cannot be joined")
        return Pixels(first.storage, np.concatenate([first.index, second.index]), first.key)


Images = np.ndarray | Pixels
"""A split's images: float32 ``(N, 3, R, R)`` in [-1, 1], as an array or as :class:`Pixels`."""


def take(x: Images, rows: np.ndarray) -> Images:
    """The images ``rows`` of ``x``, without converting :class:`Pixels` to floats."""
    return x.take(rows) if isinstance(x, Pixels) else x[rows]


def concatenate(first: Images, second: Images) -> Images:
    """``first``'s images then ``second``'s, without converting :class:`Pixels` to floats."""
    if isinstance(first, Pixels) and isinstance(second, Pixels):
        return Pixels.concatenate(first, second)
    return np.concatenate([np.asarray(first), np.asarray(second)])


@dataclass(frozen=True, eq=False)
class Split:
    """Images and labels of one part (train, val or test) of a data set.

    Invariants, checked on construction:

    * ``x`` is a float32 array of shape ``(N, 3, R, R)`` (channels first) with values in [-1, 1],
      or :class:`Pixels` that read as one (an image folder's: its values are in [-1, 1] by
      construction); or, where ``images`` is False (a sensor's windows, a spectrogram), a
      float32 array of shape ``(N, C, H, W)`` of finite values;
    * ``y`` is an int64 array of shape ``(N,)`` with values >= 0.

    The split keeps read-only views of the arrays, because data sets cache and share what they
    load: copy before changing them in place (``torch.tensor(split.x)`` copies;
    ``torch.from_numpy`` warns about the read-only array). Slicing ``x`` gives float32 arrays
    either way; ``np.asarray(split.x)`` the whole float array. Equality is identity
    (``eq=False``); compare the arrays themselves.

    Attributes:
        x: Images, ``(N, 3, R, R)`` float32 in [-1, 1] (:data:`Images`), or other samples.
        y: Class indices, ``(N,)`` int64.
        images: whether ``x`` holds images.
        groups: where samples come in groups that must not straddle training and validation
            (a speaker's clips), each sample's group, ``(N,)`` int64; None otherwise.
    """

    x: Images
    y: np.ndarray
    images: bool = True
    groups: np.ndarray | None = None

    def __post_init__(self) -> None:
        x, y = self.x, self.y
        if isinstance(x, Pixels):
            pass  # shaped (N, 3, R, R) float32 in [-1, 1] by construction
        elif not self.images:
            if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 4:
                raise DataError(
                    f"Split.x must be a float32 array of shape (N, C, H, W), got {_describe(x)}"
                )
            if x.size and not np.isfinite(x).all():
                raise DataError("Split.x holds a NaN or an infinity")
        elif (
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
        if isinstance(x, np.ndarray) and x.size and self.images:
            low, high = float(x.min()), float(x.max())
            if not (low >= -1.0 and high <= 1.0):
                raise DataError(f"Split.x values must lie in [-1, 1], got [{low}, {high}]")
        if y.size and int(y.min()) < 0:
            raise DataError(f"Split.y labels must be >= 0, got {int(y.min())}")
        groups = self.groups
        if groups is not None and (
            not isinstance(groups, np.ndarray)
            or groups.dtype != np.int64
            or groups.shape != y.shape
        ):
            raise DataError(
                f"Split.groups must be an int64 array of shape {y.shape}, got {_describe(groups)}"
            )
        if isinstance(x, np.ndarray):
            object.__setattr__(self, "x", _read_only(x))
        object.__setattr__(self, "y", _read_only(y))
        if groups is not None:
            object.__setattr__(self, "groups", _read_only(groups))

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def resolution(self) -> int:
        """The side ``R`` of the square images (of other samples: their height ``H``)."""
        return int(self.x.shape[2])


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
    """The splits with train and val re-partitioned (:func:`~tinytune.data.stratify.resplit`,
    each group on one side where the samples come in groups; repeat 0 returns ``splits``
    itself); the test split is the same object."""
    from tinytune.data.stratify import resplit

    if repeat == 0:
        return splits
    train, val = splits.train, splits.val
    y = np.concatenate([train.y, val.y])
    groups = None
    if train.groups is not None and val.groups is not None:
        groups = np.concatenate([train.groups, val.groups])
    train_idx, val_idx = resplit(train.y, val.y, repeat, seed, groups)
    x = concatenate(train.x, val.x)

    def part(index: np.ndarray) -> Split:
        return Split(
            take(x, index), y[index], train.images, None if groups is None else groups[index]
        )

    return Splits(part(train_idx), part(val_idx), splits.test)


def train_subset(splits: Splits, fraction: float, seed: int) -> Splits:
    """The splits with a stratified ``fraction`` of the training images (at least one image of
    each class, drawn by scikit-learn's ``train_test_split`` seeded by ``seed``); validation and
    test are the same objects. ``fraction`` 1 returns ``splits`` itself. A short fine-tune on a
    subset is the low fidelity of a multi-fidelity search
    (:mod:`tinytune.search.ladder.brackets`)."""
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
    groups = None if splits.train.groups is None else splits.train.groups[index]
    train = Split(take(splits.train.x, index), y[index], splits.train.images, groups)
    return Splits(train, splits.val, splits.test)
