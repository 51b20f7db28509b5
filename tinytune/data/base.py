"""The contract every data set keeps, and the checks on the arguments data sets take."""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tinytune.data.splits import Splits

if TYPE_CHECKING:
    from tinytune.data.decoded import ProgressCallback
from tinytune.errors import DataError

__all__ = ["MAX_RESOLUTION", "MIN_RESOLUTION", "ImageDataset", "check_resolution", "check_seed"]

MIN_RESOLUTION = 8
MAX_RESOLUTION = 512


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_resolution(resolution: object) -> int:
    """Return ``resolution`` as an int after checking that it lies in the supported range.

    Raises:
        DataError: If it is not an int in [MIN_RESOLUTION, MAX_RESOLUTION].
    """
    if not _is_int(resolution) or not MIN_RESOLUTION <= resolution <= MAX_RESOLUTION:
        raise DataError(
            f"resolution must be an int in [{MIN_RESOLUTION}, {MAX_RESOLUTION}], "
            f"got {resolution!r}"
        )
    return int(resolution)


def check_seed(seed: object) -> int:
    """Return ``seed`` as an int after checking that it is a non-negative int.

    Raises:
        DataError: If it is not an int >= 0.
    """
    if not _is_int(seed) or seed < 0:
        raise DataError(f"seed must be an int >= 0, got {seed!r}")
    return int(seed)


class ImageDataset(ABC):
    """A labelled image data set that loads as train/val/test splits at any resolution.

    Contract, for every implementation:

    * ``name`` (canonical, e.g. ``"digits"`` or ``"imagefolder:/abs/path"``), ``class_names``,
      ``num_classes == len(class_names)`` and ``seed`` are fixed by the constructor. A constructor
      may read metadata (list a folder) but never downloads anything.
    * ``load(resolution)`` returns ``Splits`` whose ``x`` are float32 ``(N, 3, R, R)`` in
      [-1, 1] (arrays, or :class:`~tinytune.data.splits.Pixels` that read as them) and whose
      ``y`` are int64 in ``[0, num_classes)``; every class occurs in every part.
    * Loading is deterministic: the same class, constructor arguments (seed included) and
      resolution give identical arrays, in any process.
    * Which source sample lands in which part, and in which order, does not depend on the
      resolution: only the pixels are resampled.
    * Results are cached on the instance, one entry per resolution; a repeated call returns the
      same ``Splits`` object, whose arrays are read-only.
    * ``copies``: source files left out because another file has the same bytes (0 for the
      built-in data sets).

    Subclasses call ``super().__init__`` and implement ``_build``.
    """

    name: str
    class_names: tuple[str, ...]
    num_classes: int
    seed: int
    copies: int = 0
    input_shape: tuple[int, int, int] | None = None
    """(C, H, W) of samples that come at one size only (a sensor's windows, a spectrogram);
    None for images, which load at any resolution as (3, R, R)."""

    def __init__(self, *, name: str, class_names: Sequence[str], seed: int) -> None:
        """Set the fixed attributes.

        Args:
            name: Canonical name of the data set.
            class_names: Names of the classes, in the order of their indices.
            seed: Seed of every random choice the data set makes (non-negative).

        Raises:
            DataError: If the seed is not a non-negative int.
        """
        self.name = name
        self.class_names = tuple(class_names)
        self.num_classes = len(self.class_names)
        self.seed = check_seed(seed)
        self._cache: dict[int, Splits] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, seed={self.seed})"

    def load(self, resolution: int) -> Splits:
        """Return the train/val/test splits with images resampled to ``resolution``.

        Args:
            resolution: Side of the square images, in [MIN_RESOLUTION, MAX_RESOLUTION].

        Returns:
            The splits, cached on this instance per resolution.

        Raises:
            DataError: If the resolution is out of range or the data cannot be read.
        """
        resolution = check_resolution(resolution)
        splits = self._cache.get(resolution)
        if splits is None:
            splits = self._build(resolution)
            assert splits.resolution == resolution, (splits.resolution, resolution)
            for split in (splits.train, splits.val, splits.test):
                assert np.array_equal(np.unique(split.y), np.arange(self.num_classes))
            self._cache[resolution] = splits
        return splits

    def at(self, resolution: int) -> ImageDataset:
        """The data set as it is loaded at ``resolution``: itself, for a data set whose samples
        are the same whatever the resolution asked (images are resampled by ``load``); a
        keyword folder's features are computed by a front-end of that many frames
        (:meth:`tinytune.data.AudioDataset.at`), with a standardisation of their own."""
        return self

    def searched_at(self, offered: Sequence[int]) -> tuple[int, ...]:
        """Which of the resolutions a network ``offered`` a search tries on this data set: all
        of them for images (resampled) and keyword clips (a front-end of each size); a series
        data set's samples are not resized, so only their own size."""
        return tuple(offered)

    def split_sizes(self) -> tuple[int, int, int]:
        """Images in the train, validation and test parts (the same at every resolution). The
        default loads the smallest resolution; a data set that knows them without decoding any
        image says so at once."""
        splits = self.load(MIN_RESOLUTION)
        return len(splits.train), len(splits.val), len(splits.test)

    def check(
        self, resolutions: Sequence[int] = (), progress: ProgressCallback | None = None
    ) -> None:
        """Read every source sample once, so that an unreadable one fails before any training,
        and prepare the ``resolutions`` that will be loaded.

        ``load`` would fail on the same sample, but only once a resolution is asked for, and
        then inside every evaluation; a caller that checks first reports it once. The default
        does nothing: built-in data sets have no files of the user's to read. Implementations
        that read files open and decode each of them (an image folder decodes them at every
        resolution of ``resolutions`` into its on-disk cache, reporting to ``progress``); a
        second call may return at once.

        Raises:
            DataError: naming the first sample that cannot be read, why, and what is allowed.
        """
        return

    @abstractmethod
    def _build(self, resolution: int) -> Splits:
        """Make the splits at a resolution that ``load`` has already checked."""
