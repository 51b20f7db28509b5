"""``imagefolder:PATH``: the user's own images, one sub-folder per class, decoded once per
resolution into the on-disk cache of :mod:`tinytune.data.decoded`."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from tinytune.data.base import ImageDataset, check_resolution
from tinytune.data.decoded import DecodedCache, DecodeProgress, ProgressCallback, content_key
from tinytune.data.splits import Pixels, Split, Splits
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


_digests: dict[tuple[str, int, int, int, int, int], str] = {}
"""SHA-256 of the image files this process has read, by (path, device, inode, size,
modification and change times in ns): a folder listed again in the same process (by the front
door, the preflight, an evaluation run in the process) is not read again unless a file
changed."""


def _sha256(path: Path) -> str:
    try:
        stat = path.stat()
        key = (
            str(path),
            stat.st_dev,
            stat.st_ino,
            stat.st_size,
            stat.st_mtime_ns,
            stat.st_ctime_ns,
        )
        digest = _digests.get(key)
        if digest is None:
            digest = _digests[key] = sha256_file(path)
        return digest
    except OSError as e:
        raise DataError(f"cannot read image '{path}': {_one_line(e)}") from e


def _without_copies(
    class_names: list[str], files_per_class: list[list[Path]]
) -> tuple[list[list[Path]], list[list[str]], int]:
    """Each image once: a file with the same bytes as one listed before it (a copy, a link, a
    duplicated sub-folder) is left out, so that no image is both trained on and tested on.

    Returns:
        The files of each class without copies, their SHA-256 digests, and how many copies
        were left out.

    Raises:
        DataError: the same image is in two classes, naming both files.
    """
    first: dict[str, tuple[int, Path]] = {}  # sha256 -> (class, the first file)
    kept: list[list[Path]] = []
    digests: list[list[str]] = []
    copies = 0
    for label, files in enumerate(files_per_class):
        kept.append([])
        digests.append([])
        for path in files:
            digest = _sha256(path)
            owner, original = first.setdefault(digest, (label, path))
            if original == path:
                kept[-1].append(path)
                digests[-1].append(digest)
            elif owner == label:
                copies += 1
            else:
                raise DataError(
                    f"image '{path}' of class '{class_names[label]}' has the same bytes as "
                    f"'{original}' of class '{class_names[owner]}'; an image can have one "
                    "class: remove one of the two"
                )
    return kept, digests, copies


def _scan(root: Path) -> tuple[list[str], list[Path], np.ndarray, int, str]:
    """List the classes of ``root`` and the image files of each, in a fixed order, each image
    once (:func:`_without_copies`).

    Returns:
        Class names (sorted), image paths (class by class, sorted by path), their labels, the
        number of copies left out, and the key of the folder's decoded images
        (:func:`~tinytune.data.decoded.content_key` of every class, path and SHA-256).
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
    files_per_class, digests, copies = _without_copies(names, files_per_class)
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
    key = content_key(
        [
            (name, path.relative_to(root).as_posix(), digest)
            for name, class_files, class_digests in zip(
                names, files_per_class, digests, strict=True
            )
            for path, digest in zip(class_files, class_digests, strict=True)
        ]
    )
    return names, files, labels, copies, key


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


_RULE = (
    f"every file of an image folder with an extension in {sorted(IMAGE_EXTENSIONS)} must be an "
    "image that Pillow can read (PNG, JPEG, BMP, GIF, PPM, TIFF): a folder with any other is "
    "refused before anything is decoded into the cache or trained"
)
"""The one rule for unreadable files, said in the error that applies it."""

_NAMED = 5  # unreadable files named in the error beside the first


def _resized(rgb: Image.Image, resolution: int) -> np.ndarray:
    """An RGB image resized to ``(R, R, 3)`` uint8 with bilinear resampling (the aspect ratio
    not kept)."""
    return np.asarray(rgb.resize((resolution, resolution), Image.Resampling.BILINEAR))


def _unreadable(bad: list[tuple[Path, BaseException]]) -> DataError:
    """The one-line error of a folder with unreadable files: the first, why, and how many
    others (the first of them named)."""
    path, error = bad[0]
    more = ""
    if len(bad) > 1:
        names = ", ".join(f"'{p}'" for p, _ in bad[1 : 1 + _NAMED])
        rest = len(bad) - 1 - _NAMED
        more = (
            f"; {len(bad) - 1} more unreadable: {names}{f' and {rest} more' if rest > 0 else ''}"
        )
    return DataError(f"cannot read image '{path}': {_one_line(error)}{more}; {_RULE}")


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

    The folder is listed (and each file hashed) by the constructor. Images are decoded into
    the cache of :mod:`tinytune.data.decoded`, once for every resolution asked at once, by
    ``check(resolutions)`` (the search's preflight asks for the resolution its study measures
    first, reporting progress) or by ``load`` on a resolution not decoded yet; ``load`` hands out
    :class:`~tinytune.data.splits.Pixels` over the memory-mapped file, never a float32 copy of
    the folder. A file that Pillow cannot read refuses the folder, naming it (and counting the
    others), before anything is written to the cache.
    """

    root: Path
    decoded: DecodedCache

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
        class_names, files, labels, copies, key = _scan(root_path)
        super().__init__(name=f"imagefolder:{root_path}", class_names=class_names, seed=seed)
        self.root = root_path
        self.copies = copies
        self.decoded = DecodedCache(key, len(files), root_path)
        self._files = files
        self._labels = labels
        self._checked = False

    def split_sizes(self) -> tuple[int, int, int]:
        """Images in the train, validation and test parts, from the labels alone."""
        train, val, test = stratified_split(self._labels, self.seed)
        return len(train), len(val), len(test)

    def check(
        self, resolutions: Sequence[int] = (), progress: ProgressCallback | None = None
    ) -> None:
        """Decode every image file once, at every resolution of ``resolutions`` at once, into
        the cache (none: only read each file, at its own size); resolutions already decoded
        are reused, without reading any file, and one call reports
        :class:`~tinytune.data.decoded.DecodeProgress` with ``reused``. A call after a
        successful one without resolutions returns at once.

        Args:
            resolutions: sides of the square images to decode.
            progress: told after each image (the library reports; the command line draws).

        Raises:
            DataError: naming the first file, in sorted order, that Pillow cannot read, why,
                how many others cannot be read, and the rule; or the cache cannot be written.
        """
        if not resolutions:
            if not self._checked:
                self._read_every_file(None, progress)
            return
        self._decode([check_resolution(r) for r in resolutions], progress)

    def _decode(self, resolutions: Sequence[int], progress: ProgressCallback | None) -> None:
        """Decode the resolutions not cached yet, all in one pass over the files, under the
        key's writer lock (:meth:`check`)."""
        cache = self.decoded
        if not cache.missing(resolutions):
            self._reused(progress)
            return
        with cache.locked():
            missing = cache.missing(resolutions)  # another process may have decoded them
            if not missing:
                self._reused(progress)
                return
            cache.remove_leftovers()
            cache.check_space(missing)
            with cache.writer(missing) as writer:
                self._read_every_file(
                    lambda rgb: writer.add({r: _resized(rgb, r) for r in missing}), progress
                )
                writer.commit()

    def _reused(self, progress: ProgressCallback | None) -> None:
        self._checked = True
        if progress is not None:
            n = len(self._files)
            progress(DecodeProgress(n, n, self.decoded.folder, reused=True))

    def _read_every_file(
        self, keep: Callable[[Image.Image], None] | None, progress: ProgressCallback | None
    ) -> None:
        """Open and decode each file in order, hand it to ``keep`` while every file so far was
        readable, report each; raise :func:`_unreadable` at the end if any was not."""
        bad: list[tuple[Path, BaseException]] = []
        total = len(self._files)
        for done, path in enumerate(self._files, start=1):
            try:
                with Image.open(path) as image:
                    rgb = _to_rgb(image)
            except _DECODE_ERRORS as e:
                bad.append((path, e))
            else:
                if keep is not None and not bad:
                    keep(rgb)
            if progress is not None:
                progress(DecodeProgress(done, total, self.decoded.folder))
        if bad:
            raise _unreadable(bad)
        self._checked = True

    def _storage(self, resolution: int) -> np.ndarray:
        """The folder's images decoded at ``resolution``, ``(N, R, R, 3)`` uint8, memory-mapped
        from the cache (decoded first when missing)."""
        storage = self.decoded.open(resolution)
        if storage is None:
            self._decode([resolution], None)
            storage = self.decoded.open(resolution)
        if storage is None:
            raise DataError(
                f"the decoded images '{self.decoded.path(resolution)}' vanished as they were "
                "written; is another program clearing the cache?"
            )
        return storage

    def _build(self, resolution: int) -> Splits:
        storage = self._storage(resolution)
        key = f"{self.decoded.key}/{resolution}"
        parts = [
            Split(Pixels(storage, idx, key), self._labels[idx])
            for idx in stratified_split(self._labels, self.seed)
        ]
        train, val, test = parts
        return Splits(train=train, val=val, test=test)
