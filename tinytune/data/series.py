"""``series:PATH``: windows of a sensor, or features such as a spectrogram, as arrays.

A user's samples that are not images — an IMU's windows, a microphone's MFCC frames — come as
a folder of CSV files or as one NumPy archive.

**A folder** holds one sub-folder per class (its name, the class's) of ``.csv`` files, one
window each: a row per time step, a column per channel, numbers only, an optional header row
(a first row that is not all numbers). Every window has the same steps and channels, read as
``(C, 1, T)``. Hidden entries and files of other suffixes are left alone; a ragged row, a
value that is not a number, a window of another shape and a class folder without a window
are refused in one line naming the file (and the line) and the rule. **Sources are held
apart** where the files are named as Speech Commands names its clips, ``SOURCE_nohash_N.csv``
(a machine, a subject, a recording session): all the windows of one source fall in one of the
training, validation and test splits, dealt at random (seeded) until each holds its share
(:func:`~tinytune.data.stratify.group_split`), so that the test accuracy is that of sources the
fine-tune never saw; the repeated partitions of a small validation split keep them apart too.
Other names are split window by window, stratified.

**An archive** is written by ``np.savez(PATH, X=..., y=...)``:

* ``X``: ``(N, C, T)`` (C channels of T steps, read as ``(N, C, 1, T)``: a 1-D network is
  written with 2-D layers of ``1×k`` kernels) or ``(N, C, H, W)`` (a spectrogram of H frames
  of W coefficients), any real dtype, every value finite;
* ``y``: ``(N,)`` integer labels; optionally ``classes``, their names (strings), one per
  distinct label in sorted order (else the labels themselves name them).

The archive is read with ``allow_pickle=False``: an object array (which only a pickle can
hold) is refused, never unpickled. The split is the stratified 60/20/20 of the image data sets
(:func:`~tinytune.data.stratify.stratified_split`). Each channel is standardised with the
mean and standard deviation of the training part alone (float64, then float32), so validation
and test data tell nothing to the scaling; :attr:`SeriesDataset.normalisation` holds both, for
a device to scale its raw samples alike.

The samples have one size, the one the network was exported at: ``load`` takes the height
``H`` (1 for a window) as its resolution, and only that.
"""

from __future__ import annotations

import csv
import os
import zipfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tinytune.data.base import ImageDataset
from tinytune.data.splits import Split, Splits
from tinytune.data.stratify import group_split, stratified_split
from tinytune.errors import DataError

if TYPE_CHECKING:
    from tinytune.data.decoded import ProgressCallback

__all__ = [
    "SERIES_PREFIX",
    "SOURCE_MARK",
    "SeriesDataset",
    "class_files",
    "file_sources",
    "source_of",
]

SERIES_PREFIX = "series:"

SOURCE_MARK = "_nohash_"
"""What separates a file's source from the rest of its name (as Speech Commands names its
clips: ``0a7c2a8d_nohash_1.wav``)."""


def source_of(file: str) -> str | None:
    """The source of a file name (``0a7c2a8d`` of ``0a7c2a8d_nohash_1.wav``), or None."""
    head, mark, _ = file.partition(SOURCE_MARK)
    return head if mark and head else None


def _read(path: str) -> dict[str, np.ndarray]:
    """The arrays of the archive, each read without unpickling anything."""
    not_npz = (
        f"series file {path!r} is not a NumPy archive (.npz) that np.savez writes; expected "
        "X and y in one"
    )
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"series file {path!r} does not exist") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):  # a pickle, or no NumPy file
        raise DataError(not_npz) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(not_npz)
    try:
        with archive:
            return {name: archive[name] for name in archive.files}
    except ValueError:  # an object array: only a pickle holds one
        raise DataError(
            f"series file {path!r} holds an object array, which only a pickle can hold; "
            "tinytune never unpickles a file: save X and y as numeric arrays "
            "(np.savez(path, X=X.astype(np.float32), y=y.astype(np.int64)))"
        ) from None
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"series file {path!r} cannot be read: {e}") from None


def _window(path: str) -> np.ndarray:
    """One CSV window as (channels, steps), float64."""
    rows: list[list[float]] = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            for number, row in enumerate(csv.reader(f), 1):
                if not row or all(not cell.strip() for cell in row):
                    continue  # a blank line
                try:
                    values = [float(cell) for cell in row]
                except ValueError:
                    if number == 1:
                        continue  # a header
                    bad = next(c for c in row if not _is_number(c))
                    raise DataError(
                        f"series file {path!r} line {number}: {bad.strip()[:20]!r} is not a "
                        "number; a window's rows hold one number per channel"
                    ) from None
                if rows and len(values) != len(rows[0]):
                    raise DataError(
                        f"series file {path!r} line {number} has {len(values)} values, the "
                        f"rows before it {len(rows[0])}; every row holds one number per channel"
                    )
                rows.append(values)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"series file {path!r} cannot be read as CSV text: {e}") from None
    if not rows:
        raise DataError(f"series file {path!r} holds no row of numbers; a window needs one")
    return np.asarray(rows, dtype=np.float64).T


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def class_files(
    path: str, kind: str, words: tuple[str, str, str], skip: tuple[str, ...] = ()
) -> tuple[list[tuple[str, int]], list[str]]:
    """The files of a folder of classes: each class folder's files of one suffix, as (path,
    label), and the class names, sorted. Hidden entries, other files and the folders ``skip``
    are left alone.

    Args:
        kind: what the folder is called in messages (``series``).
        words: what a class is called, the files' suffix and what a file is
            (``("class", ".csv", "window")``).

    Raises:
        DataError: the folder cannot be read, a class folder holds no such file, or there are
            fewer than two classes.
    """
    name, suffix, item = words
    try:
        classes = sorted(
            e.name
            for e in os.scandir(path)
            if e.is_dir() and not e.name.startswith(".") and e.name not in skip
        )
    except OSError as e:
        raise DataError(f"{kind} folder {path!r} cannot be read: {e.strerror or e}") from None
    found = []
    for label, cls in enumerate(classes):
        folder = os.path.join(path, cls)
        files = sorted(
            f for f in os.listdir(folder) if f.lower().endswith(suffix) and not f.startswith(".")
        )
        if not files:
            raise DataError(
                f"{kind} folder {path!r}: {name} folder {cls!r} holds no {suffix} {item}; each "
                f"{name} folder holds one {suffix[1:].upper()} file per {item}"
            )
        found += [(os.path.join(folder, f), label) for f in files]
    if len(classes) < 2:
        raise DataError(
            f"{kind} folder {path!r} has {len(classes)} {name} folder"
            f"{'' if len(classes) == 1 else 's'}; a classifier needs two or more"
        )
    return found, classes


def _read_folder(path: str) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """The windows of a folder of classes, (N, C, T), their labels, the class names and the
    windows' files."""
    files, classes = class_files(path, "series", ("class", ".csv", "window"))
    windows: list[np.ndarray] = []
    for file, _ in files:
        window = _window(file)
        if windows and window.shape != windows[0].shape:
            (c, t), (c0, t0) = window.shape, windows[0].shape
            raise DataError(
                f"series file {file!r} holds {t} steps of {c} channels, {files[0][0]!r} {t0} "
                f"of {c0}; every window has one shape"
            )
        windows.append(window)
    labels = np.asarray([label for _, label in files], dtype=np.int64)
    return np.ascontiguousarray(np.stack(windows)), labels, classes, [f for f, _ in files]


def file_sources(files: Sequence[str]) -> list[str] | None:
    """Each file's source, when every file's name has one; else None."""
    sources = [source_of(os.path.basename(f)) for f in files]
    return None if any(s is None for s in sources) else [s for s in sources if s is not None]


def _samples(path: str, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    missing = [k for k in ("X", "y") if k not in arrays]
    if missing:
        raise DataError(
            f"series file {path!r} has no array {missing[0]!r}; expected X (N, C, T) or "
            f"(N, C, H, W) and y (N,), found {sorted(arrays)}"
        )
    x, y = arrays["X"], arrays["y"]
    if x.dtype.kind not in "iuf" or x.ndim not in (3, 4) or 0 in x.shape:
        raise DataError(
            f"series file {path!r}: X must be a real array of shape (N, C, T) or (N, C, H, W), "
            f"got {x.dtype} {x.shape}"
        )
    if y.dtype.kind not in "iu" or y.shape != (x.shape[0],):
        raise DataError(
            f"series file {path!r}: y must be {x.shape[0]} integer labels (N,), got {y.dtype} "
            f"{y.shape}"
        )
    x = x.astype(np.float64)
    if not np.isfinite(x).all():
        raise DataError(f"series file {path!r}: X holds a NaN or an infinity")
    return (x[:, :, None, :] if x.ndim == 3 else x), y.astype(np.int64)


def _class_names(path: str, arrays: dict[str, np.ndarray], labels: np.ndarray) -> list[str]:
    values = np.unique(labels)
    if "classes" not in arrays:
        return [str(int(v)) for v in values]
    names = arrays["classes"]
    if names.dtype.kind not in "US" or names.shape != (len(values),):
        raise DataError(
            f"series file {path!r}: classes must be {len(values)} strings, one per distinct "
            f"label in sorted order, got {names.dtype} {names.shape}"
        )
    out = [str(n) for n in names.tolist()]
    if len(set(out)) != len(out):
        raise DataError(f"series file {path!r}: classes names one class twice: {out}")
    return out


class SeriesDataset(ImageDataset):
    """Samples of one fixed shape (C, H, W) with labels, split 60/20/20 by class.

    It keeps the contract of :class:`~tinytune.data.base.ImageDataset`, but its samples are
    not images: ``load`` takes only their height as its resolution (they are not resized),
    and its splits hold standardised values (``Split.images`` False).

    Attributes:
        input_shape: (C, H, W) of one sample.
        normalisation: (mean, std) per channel, float64, of the training part.
        sources: each sample's source, where its file's name says (else None).
    """

    prefix = SERIES_PREFIX
    """What names a data set of this kind (``series:``)."""
    input_shape: tuple[int, int, int]
    words = ("window", "class", "source")
    """What a sample, a class and a source are called in messages."""
    sources: list[str] | None = None

    def __init__(self, path: str, seed: int = 0) -> None:
        self.path = os.path.abspath(path)
        x, labels, names = self._samples(path)
        super().__init__(name=f"{self.prefix}{self.path}", class_names=names, seed=seed)
        if self.num_classes < 2:
            raise DataError(
                f"{self.prefix[:-1]} {path!r} has one class; a classifier needs two or more"
            )
        _, indices = np.unique(labels, return_inverse=True)
        self._y = indices.astype(np.int64)
        self._parts = self._split()
        self._hold(x)

    def _hold(self, x: np.ndarray) -> None:
        """Take ``x`` (N, C, H, W), float64, as the samples, standardised by the training
        part's mean and standard deviation per channel."""
        self._x = x
        self.input_shape = (int(x.shape[1]), int(x.shape[2]), int(x.shape[3]))
        train = x[self._parts[0]]
        mean = train.mean(axis=(0, 2, 3))
        std = train.std(axis=(0, 2, 3))
        self.normalisation = (mean, np.where(std > 0, std, 1.0))
        self._splits: Splits | None = None

    def _samples(self, path: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """The samples (N, C, H, W) of ``path``, float64, their labels and the class names."""
        if os.path.isdir(self.path):
            x, labels, names, files = _read_folder(path)
            self.sources = file_sources(files)
            if not np.isfinite(x).all():
                raise DataError(f"series folder {path!r} holds a NaN or an infinity")
            return x[:, :, None, :], labels, names
        arrays = _read(self.path)
        x, labels = _samples(path, arrays)
        return x, labels, _class_names(path, arrays, labels)

    def _split(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The indices of the training, validation and test samples: each source in one,
        else stratified sample by sample."""
        if self.sources is None:
            return stratified_split(self._y, self.seed)
        return group_split(self._y, self.sources, self.seed, self.words)

    def _groups(self) -> np.ndarray | None:
        """Each sample's source as a number, that no split straddles (None: the samples stand
        alone)."""
        if self.sources is None:
            return None
        return np.unique(np.asarray(self.sources), return_inverse=True)[1].astype(np.int64)

    @property
    def resolution(self) -> int:
        """The samples' height, the one resolution they load at."""
        return self.input_shape[1]

    def searched_at(self, offered: Sequence[int]) -> tuple[int, ...]:
        """The samples' height alone: a series is not resized (a network's other sizes are
        not searched on it)."""
        return (self.resolution,) if self.resolution in offered else tuple(offered)

    def load(self, resolution: int) -> Splits:
        """The splits; ``resolution`` must be the samples' height.

        Raises:
            DataError: another resolution (samples are not resized).
        """
        if resolution != self.resolution:
            raise DataError(
                f"{self.name!r} holds samples of {'x'.join(map(str, self.input_shape))} "
                f"(C x H x W), which are not resized; resolution {resolution!r} was asked, "
                f"expected {self.resolution}"
            )
        if self._splits is None:
            self._splits = self._build(resolution)
        return self._splits

    def standardise(self, x: np.ndarray) -> np.ndarray:
        """Samples ``(N, C, H, W)`` (float64) as the splits hold them: each channel less the
        training split's mean, over its standard deviation, then float32."""
        mean, std = self.normalisation
        return ((x - mean[:, None, None]) / std[:, None, None]).astype(np.float32)

    def _build(self, resolution: int) -> Splits:
        scaled = self.standardise(self._x)
        groups = self._groups()
        train, val, test = (
            Split(scaled[i], self._y[i], False, None if groups is None else groups[i])
            for i in self._parts
        )
        return Splits(train, val, test)

    def _part(self, split: str) -> np.ndarray:
        """The sample indices of a split, ``train``, ``val`` or ``test``."""
        return self._parts[("train", "val", "test").index(split)]

    def recorded(self, split: str, count: int) -> np.ndarray:
        """The first ``count`` samples of a split (``train``, ``val`` or ``test``) as their
        files held them, in the order of its samples: float64 values, channels first, one row
        a sample (what a device's sensor gives, before the standardisation)."""
        part = self._part(split)[:count]
        return self._x[part].reshape(len(part), -1).copy()

    def split_sizes(self) -> tuple[int, int, int]:
        return tuple(len(idx) for idx in self._parts)  # type: ignore[return-value]

    def check(
        self, resolutions: Sequence[int] = (), progress: ProgressCallback | None = None
    ) -> None:
        """Nothing more to read: the archive was read and checked when it was named; a
        resolution other than the samples' height is refused here, before any training.

        Raises:
            DataError: a resolution other than the samples' height.
        """
        for resolution in resolutions:
            if resolution != self.resolution:
                self.load(resolution)
