"""``imagefolder:PATH``: the user's own images, one sub-folder per class."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
from PIL import Image

from tinytune.data.base import ImageDataset
from tinytune.data.splits import Split, Splits
from tinytune.data.stratify import MIN_PER_CLASS, stratified_split
from tinytune.errors import DataError
from tinytune.hashing import sha256_file

__all__ = ["IMAGE_EXTENSIONS", "ImageFolderDataset"]

IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".tif", ".tiff"}
)

_EXPECTED = "expected a directory with one sub-folder of images per class"

# What Pillow raises on a file it cannot identify or decode (truncated, corrupt, too large).
_DECODE_ERRORS = (
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    struct.error,
    Image.DecompressionBombError,
)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _visible(path: Path) -> bool:
    return not path.name.startswith(".")


def _visible_below(path: Path, top: Path) -> bool:
    """No part of ``path`` below ``top`` is hidden (``cat/.thumbnails/x.png`` is not)."""
    return not any(part.startswith(".") for part in path.relative_to(top).parts)


def _sha256(path: Path) -> str:
    try:
        return sha256_file(path)
    except OSError as e:
        raise DataError(f"cannot read image '{path}': {_one_line(e)}") from e


def _without_copies(
    class_names: list[str], files_per_class: list[list[Path]]
) -> tuple[list[list[Path]], int]:
    """Each image once: a file with the same bytes as one listed before it (a copy, a link, a
    duplicated sub-folder) is left out, so that no image is both trained on and tested on.

    Returns:
        The files of each class without copies, and how many copies were left out.

    Raises:
        DataError: the same image is in two classes, naming both files.
    """
    first: dict[str, tuple[int, Path]] = {}  # sha256 -> (class, the first file)
    kept: list[list[Path]] = []
    copies = 0
    for label, files in enumerate(files_per_class):
        kept.append([])
        for path in files:
            owner, original = first.setdefault(_sha256(path), (label, path))
            if original == path:
                kept[-1].append(path)
            elif owner == label:
                copies += 1
            else:
                raise DataError(
                    f"image '{path}' of class '{class_names[label]}' has the same bytes as "
                    f"'{original}' of class '{class_names[owner]}'; an image can have one "
                    "class: remove one of the two"
                )
    return kept, copies


def _scan(root: Path) -> tuple[list[str], list[Path], np.ndarray, int]:
    """List the classes of ``root`` and the image files of each, in a fixed order, each image
    once (:func:`_without_copies`).

    Returns:
        Class names (sorted), image paths (class by class, sorted by path), their labels, and
        the number of copies left out.
    """
    if not root.exists():
        raise DataError(f"image folder '{root}' does not exist; {_EXPECTED}")
    if not root.is_dir():
        raise DataError(f"image folder '{root}' is not a directory; {_EXPECTED}")
    try:
        class_dirs = sorted(
            (p for p in root.iterdir() if p.is_dir() and _visible(p)), key=lambda p: p.name
        )
        files_per_class = [
            sorted(
                p
                for p in class_dir.rglob("*")
                if p.is_file()
                and _visible_below(p, class_dir)
                and p.suffix.lower() in IMAGE_EXTENSIONS
            )
            for class_dir in class_dirs
        ]
    except OSError as e:
        raise DataError(f"cannot list image folder '{root}': {_one_line(e)}") from e
    if len(class_dirs) < 2:
        raise DataError(
            f"image folder '{root}' has {len(class_dirs)} class sub-folder(s); expected at "
            "least 2, one sub-folder of images per class"
        )
    names = [p.name for p in class_dirs]
    files_per_class, copies = _without_copies(names, files_per_class)
    for class_dir, files in zip(class_dirs, files_per_class, strict=True):
        if len(files) < MIN_PER_CLASS:
            raise DataError(
                f"class '{class_dir.name}' of image folder '{root}' has {len(files)} image(s)"
                f"{' besides copies' if copies else ''}; each class needs at least "
                f"{MIN_PER_CLASS} different ones (one each for train, val and test) with an "
                f"extension in {sorted(IMAGE_EXTENSIONS)}"
            )
    files = [path for class_files in files_per_class for path in class_files]
    labels = np.repeat(
        np.arange(len(class_dirs), dtype=np.int64), [len(f) for f in files_per_class]
    )
    return names, files, labels, copies


def _to_rgb(image: Image.Image) -> Image.Image:
    """An image of any mode as 8-bit RGB.

    Pillow's ``convert("RGB")`` clips the modes wider than 8 bits to 0..255, which turns a
    16-bit image nearly white and a float one black; so their samples are scaled to 0..255
    first: 16-bit ones (``I;16*``, and ``I`` within 0..65535, as Pillow opens some 16-bit
    files) by 255/65535, float ones (``F``) within [0, 1] by 255, and any other range of ``I``
    or ``F`` from its own minimum to its maximum. Every other mode goes through ``convert``:
    palette and CMYK to their colours, grey to three equal channels, alpha dropped.
    """
    if image.mode.startswith("I;16") or image.mode in ("I", "F"):
        samples = np.asarray(image, dtype=np.float64)  # (H, W)
        low, high = float(samples.min()), float(samples.max())
        if image.mode == "F" and low >= 0.0 and high <= 1.0:
            scaled = samples * 255.0
        elif image.mode != "F" and low >= 0.0 and high <= 65535.0:
            scaled = samples * (255.0 / 65535.0)
        else:
            scaled = (samples - low) * (255.0 / (high - low)) if high > low else samples * 0.0
        grey = Image.fromarray(np.rint(scaled).astype(np.uint8))
        return grey.convert("RGB")
    return image.convert("RGB")


def _open_rgb(path: Path) -> Image.Image:
    """Open and decode one image file as RGB (:func:`_to_rgb`).

    Raises:
        DataError: naming the file, Pillow's reason and what an image folder may hold.
    """
    try:
        with Image.open(path) as image:
            return _to_rgb(image)
    except _DECODE_ERRORS as e:
        raise DataError(
            f"cannot read image '{path}': {_one_line(e)}; every file of an image folder with an "
            f"extension in {sorted(IMAGE_EXTENSIONS)} must be an image that Pillow can read "
            "(PNG, JPEG, BMP, GIF, PPM, TIFF)"
        ) from e


def _read_image(path: Path, resolution: int) -> np.ndarray:
    """Read one image as RGB, resized to ``(R, R, 3)`` uint8 with bilinear resampling."""
    rgb = _open_rgb(path)
    return np.asarray(rgb.resize((resolution, resolution), Image.Resampling.BILINEAR))


class ImageFolderDataset(ImageDataset):
    """Images in ``root/<class>/...``, one class per sub-folder, in the style of ImageFolder.

    Classes are the visible sub-folders of ``root`` in sorted order (class index = position);
    a class's images are the files below its sub-folder, at any depth, whose extension (any
    case) is in ``IMAGE_EXTENSIONS``; names starting with ``.``, and files below such a folder,
    are skipped. A file with the same bytes as one before it (in sorted order) is left out
    (``copies`` counts them), so that a copy cannot land in the training split and its
    original in the test split; the same image in two classes is refused. Each image, of any
    size and mode, is converted to 8-bit RGB (16-bit and float samples scaled, not clipped:
    :func:`_to_rgb`), resized to ``R x R`` with bilinear resampling (the aspect ratio is not
    kept) and mapped from 0..255 to [-1, 1]. The split is ``stratified_split(labels, seed)``
    over the files in sorted order, so it does not depend on the resolution.

    The folder is listed by the constructor; images are read by ``load``, and by ``check``,
    which finds an unreadable file before anything is trained.
    """

    root: Path

    def __init__(self, root: str | os.PathLike[str], seed: int = 0) -> None:
        """List the classes and image files of ``root``.

        Args:
            root: The folder; a relative path is taken from the current directory.
            seed: Seed of the train/val/test split.

        Raises:
            DataError: If the folder is missing, has fewer than two class sub-folders, has a
                class with fewer than ``MIN_PER_CLASS`` different images, or has the same
                image in two classes.
        """
        root_path = Path(root).expanduser().resolve()
        class_names, files, labels, copies = _scan(root_path)
        super().__init__(name=f"imagefolder:{root_path}", class_names=class_names, seed=seed)
        self.root = root_path
        self.copies = copies
        self._files = files
        self._labels = labels
        self._checked = False

    def check(self) -> None:
        """Open and decode every image file once (at its own size); later calls return at once.

        Raises:
            DataError: naming the first file, in sorted order, that Pillow cannot read, and why.
        """
        if self._checked:
            return
        for path in self._files:
            _open_rgb(path)
        self._checked = True

    def _build(self, resolution: int) -> Splits:
        parts = []
        for idx in stratified_split(self._labels, self.seed):
            pixels = np.stack(
                [_read_image(self._files[i], resolution) for i in idx]
            )  # (N, R, R, 3)
            x = pixels.transpose(0, 3, 1, 2).astype(np.float32) / 127.5 - 1.0  # (N, 3, R, R)
            parts.append(Split(np.ascontiguousarray(x), self._labels[idx]))
        train, val, test = parts
        return Splits(train=train, val=val, test=test)
