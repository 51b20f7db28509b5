"""Data sets by the names the command line gives them."""

from __future__ import annotations

from collections.abc import Callable

from tinytune.data.audio import AUDIO_PREFIX, AudioDataset
from tinytune.data.base import ImageDataset
from tinytune.data.digits import DigitsDataset
from tinytune.data.imagefolder import ImageFolderDataset
from tinytune.data.procedural import ProceduralDataset
from tinytune.data.series import SERIES_PREFIX, SeriesDataset
from tinytune.errors import DataError

__all__ = ["DATASET_NAMES", "get_dataset"]

_IMAGEFOLDER_PREFIX = "imagefolder:"

_BUILT_IN: dict[str, Callable[[int], ImageDataset]] = {
    "digits": DigitsDataset,
    "procedural": ProceduralDataset,
}

_FROM_FILES: dict[str, tuple[str, str, Callable[..., ImageDataset]]] = {
    _IMAGEFOLDER_PREFIX: ("folder", "PATH", ImageFolderDataset),
    SERIES_PREFIX: ("folder or file", "PATH", SeriesDataset),
    AUDIO_PREFIX: ("folder", "PATH", AudioDataset),
}
"""The data sets a user's files make: prefix -> (what it names, its form, its class)."""

DATASET_NAMES: tuple[str, ...] = (
    *_BUILT_IN, f"{_IMAGEFOLDER_PREFIX}PATH", f"{SERIES_PREFIX}PATH", f"{AUDIO_PREFIX}PATH"
)  # fmt: skip


def get_dataset(spec: str, seed: int = 0) -> ImageDataset:
    """Return the data set that ``spec`` names.

    Args:
        spec: ``"digits"``, ``"procedural"``, ``"imagefolder:PATH"``, ``"series:PATH"`` (a
            folder of CSV windows per class, or an ``.npz`` archive) or ``"audio:PATH"`` (a
            folder of WAV clips per keyword; ``audio:PATH?noise=V`` mixes its background
            noise into copies of the training clips); a relative PATH is taken from the current
            directory.
        seed: Seed of the data set's splits (and, for ``procedural``, of its classes).

    Returns:
        The data set; nothing but a folder listing is read before ``load``.

    Raises:
        DataError: If the spec names no data set, or the data set rejects its arguments.
    """
    if isinstance(spec, str):
        factory = _BUILT_IN.get(spec)
        if factory is not None:
            return factory(seed)
        for prefix, (what, form, kind) in _FROM_FILES.items():
            if spec.startswith(prefix):
                path = spec[len(prefix) :]
                if not path:
                    raise DataError(f"data set {spec!r} names no {what}; expected {prefix}{form}")
                return kind(path, seed=seed)
    raise DataError(f"unknown data set {spec!r}; expected one of: {', '.join(DATASET_NAMES)}")
