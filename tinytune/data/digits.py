"""``digits``: scikit-learn's bundled 8x8 handwritten digits, real data available offline."""

from __future__ import annotations

import numpy as np
from PIL import Image

from tinytune.data.base import ImageDataset
from tinytune.data.splits import Split, Splits
from tinytune.data.stratify import stratified_split

__all__ = ["DigitsDataset"]

# Pixel values of load_digits are counts of set pixels in 4x4 blocks of a 32x32 bitmap: 0..16.
_MAX_PIXEL = 16.0


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 digits as ``(N, 8, 8)`` float32 in [0, 1] and their labels as int64."""
    from sklearn.datasets import load_digits  # deferred: scikit-learn is slow to import

    bunch = load_digits()
    images = (bunch.images / _MAX_PIXEL).astype(np.float32)
    return images, bunch.target.astype(np.int64)


def _to_model_input(images: np.ndarray, resolution: int) -> np.ndarray:
    """Resize ``(N, 8, 8)`` images in [0, 1] to ``(N, 3, R, R)`` grey RGB in [-1, 1]."""
    size = (resolution, resolution)
    resized = np.stack(
        [
            np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BILINEAR))
            for image in images
        ]
    )  # (N, R, R)
    grey = np.clip(resized, 0.0, 1.0) * 2.0 - 1.0
    return np.repeat(grey[:, None], 3, axis=1).astype(np.float32)  # (N, 3, R, R)


class DigitsDataset(ImageDataset):
    """The 1,797 handwritten digits of ``sklearn.datasets.load_digits`` (10 classes).

    Each 8x8 image is scaled from 0..16 to [0, 1], resized with PIL bilinear resampling (at
    resolution 8 it is left exactly as it is), copied to three channels and mapped to [-1, 1].
    The split is ``stratified_split(labels, seed)``, chosen before any resizing.
    """

    def __init__(self, seed: int = 0) -> None:
        """Describe the data set; nothing is read until ``load``.

        Args:
            seed: Seed of the train/val/test split.
        """
        super().__init__(name="digits", class_names=[str(d) for d in range(10)], seed=seed)

    def _build(self, resolution: int) -> Splits:
        images, labels = _load_digits()
        train, val, test = (
            Split(_to_model_input(images[idx], resolution), labels[idx])
            for idx in stratified_split(labels, self.seed)
        )
        return Splits(train=train, val=val, test=test)
