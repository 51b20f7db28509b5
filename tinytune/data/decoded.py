"""Decoded images on disk: an image folder decoded once per resolution, kept for every process
and every later run.

A folder's images decoded at ``R`` px are one file of raw bytes, ``(N, R, R, 3)`` uint8 in the
folder's sorted file order, under ``$TINYTUNE_CACHE/decoded/<key>/<R>px.uint8``
(:func:`tinytune.paths.cache_dir`), read back with ``np.memmap``: every process that maps it
shares the same pages of the page cache, and none holds the images as float32.

The key (:func:`content_key`) is a SHA-256 over :data:`FORMAT_VERSION`,
:data:`DECODING_VERSION` and the folder's ordered list of (class, path below the folder, the
file's SHA-256): the same files give the same key wherever the folder lies (a copy shipped to a
cluster node included), and changing, adding, removing or renaming a file gives another. A
file is written under a temporary name in the same folder, flushed to disk and renamed into
place, so a reader sees a whole file or none; it is used only when its size is the size its
shape asks for. Writers of one key take turns (an ``flock`` on ``<key>/.lock``), so that
workers that miss the same file at once decode it once.

Clearing the cache is deleting the folder (``rm -r "$TINYTUNE_CACHE/decoded"``, by default
``~/.cache/tinytune/decoded``); the next run decodes again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tinytune.errors import DataError
from tinytune.paths import cache_dir
from tinytune.units import format_bytes

__all__ = [
    "DECODING_VERSION",
    "FORMAT_VERSION",
    "DecodeProgress",
    "DecodedCache",
    "content_key",
    "decoded_root",
]

FORMAT_VERSION = 1
"""The layout of a decoded file: raw ``(N, R, R, 3)`` uint8, rows in the folder's order."""

DECODING_VERSION = 1
"""The rule that turns a file into pixels (``_to_rgb``, then a bilinear resize by Pillow):
raise it whenever that rule changes, so that no file decoded by the old rule is read."""

_SUFFIX = "px.uint8"
_SPARE_BYTES = 256 << 20  # left free on the disk after a decode, for everything else


@dataclass(frozen=True)
class DecodeProgress:
    """How far an image folder's first decoding has come, or that it was not needed.

    Attributes:
        done: images decoded so far (``total`` when the cache was reused).
        total: images of the folder.
        folder: the cache folder of this image folder (``…/decoded/<key>``).
        reused: every resolution asked was already decoded: no image was read.
    """

    done: int
    total: int
    folder: Path
    reused: bool = False


def decoded_root() -> Path:
    """``<cache>/decoded``: where every image folder's decoded files are kept."""
    return cache_dir() / "decoded"


def content_key(entries: Sequence[tuple[str, str, str]]) -> str:
    """The cache key of a folder whose images are ``entries``: (class, path below the folder
    in POSIX form, the file's SHA-256), in the folder's order, decoded by the installed Pillow
    (whose resize changes between versions: Pillow 13 runs a tall image's vertical pass first,
    which moves some pixels by one level)."""
    import PIL

    digest = hashlib.sha256(
        f"tinytune decoded {FORMAT_VERSION} {DECODING_VERSION} Pillow {PIL.__version__}\n".encode()
    )
    for entry in entries:
        digest.update(json.dumps(list(entry)).encode() + b"\n")
    return digest.hexdigest()


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


class DecodedCache:
    """The decoded files of one image folder (one key), one per resolution.

    Args:
        key: :func:`content_key` of the folder.
        count: images in the folder (the rows of every file).
        source: the folder, recorded beside the files for people who look in the cache.
        root: the cache's ``decoded`` folder (default :func:`decoded_root`, read when made).
    """

    def __init__(self, key: str, count: int, source: Path, root: Path | None = None) -> None:
        self.key = key
        self.count = count
        self.source = source
        self.folder = (decoded_root() if root is None else root) / key

    def path(self, resolution: int) -> Path:
        """The file of the images decoded at ``resolution`` px."""
        return self.folder / f"{resolution}{_SUFFIX}"

    def nbytes(self, resolution: int) -> int:
        """The size of that file."""
        return self.count * resolution * resolution * 3

    def open(self, resolution: int) -> np.memmap | None:
        """The images decoded at ``resolution``, ``(N, R, R, 3)`` uint8 mapped read-only, or
        None when there is no whole file of them (none yet, or one of another size)."""
        path = self.path(resolution)
        try:
            if path.stat().st_size != self.nbytes(resolution):
                return None
            return np.memmap(
                path, dtype=np.uint8, mode="r", shape=(self.count, resolution, resolution, 3)
            )
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read decoded images '{path}': {_one_line(e)}") from e

    def missing(self, resolutions: Sequence[int]) -> list[int]:
        """The resolutions of ``resolutions`` (sorted, once each) with no whole file."""
        return [r for r in sorted(set(resolutions)) if self.open(r) is None]

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold this key's writer lock (other processes wait for it).

        Raises:
            DataError: the cache folder cannot be made or written (one line, naming it and
                what to do).
        """
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle = (self.folder / ".lock").open("a")
        except OSError as e:
            raise DataError(self._unwritable(e)) from e
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _unwritable(self, e: BaseException) -> str:
        return (
            f"cannot write decoded images under '{self.folder}': {_one_line(e)}; set "
            "TINYTUNE_CACHE to a writable folder with room for them"
        )

    def check_space(self, resolutions: Sequence[int]) -> None:
        """Refuse to start decoding when the disk has no room for the files.

        Raises:
            DataError: naming the folder, the bytes needed and free.
        """
        need = sum(self.nbytes(r) for r in resolutions)
        try:
            free = shutil.disk_usage(self.folder).free
        except OSError as e:
            raise DataError(self._unwritable(e)) from e
        if need + _SPARE_BYTES > free:
            raise DataError(
                f"decoding {self.count} images at {', '.join(map(str, resolutions))} px needs "
                f"{format_bytes(need)} under '{self.folder}' and "
                f"{format_bytes(_SPARE_BYTES, rounded=True)} left free beside them, and "
                f"{format_bytes(free)} is free; make room, or set TINYTUNE_CACHE to a folder on "
                "a disk with room"
            )

    def remove_leftovers(self) -> None:
        """Delete temporary files that a killed writer left (call with the lock held: no
        other writer of this key is running)."""
        for stale in self.folder.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()

    @contextlib.contextmanager
    def writer(self, resolutions: Sequence[int]) -> Iterator[Writer]:
        """A :class:`Writer` of the files of ``resolutions``; they are put in place only by
        its :meth:`Writer.commit`, and removed when the block raises instead.

        Raises:
            DataError: a file cannot be written (one line).
        """
        writer = Writer(self, resolutions)
        try:
            yield writer
        finally:
            writer.discard()


class Writer:
    """Writes one image at a time to a temporary file per resolution (see
    :meth:`DecodedCache.writer`)."""

    def __init__(self, cache: DecodedCache, resolutions: Sequence[int]) -> None:
        self.cache = cache
        self.resolutions = list(resolutions)
        self.rows = 0
        self._files: dict[int, tuple[BinaryIO, Path]] = {}
        try:
            for r in self.resolutions:
                fd, name = tempfile.mkstemp(
                    prefix=f".{r}{_SUFFIX}.", suffix=".tmp", dir=cache.folder
                )
                self._files[r] = (os.fdopen(fd, "wb", buffering=1 << 20), Path(name))
        except OSError as e:
            self.discard()
            raise DataError(cache._unwritable(e)) from e

    def add(self, images: dict[int, np.ndarray]) -> None:
        """Append the next image, ``(R, R, 3)`` uint8 at each resolution."""
        try:
            for r, (handle, _) in self._files.items():
                pixels = images[r]
                assert pixels.shape == (r, r, 3) and pixels.dtype == np.uint8, pixels.shape
                handle.write(np.ascontiguousarray(pixels).tobytes())
        except OSError as e:
            raise DataError(self._failed(e)) from e
        self.rows += 1

    def _failed(self, e: OSError) -> str:
        if e.errno == errno.ENOSPC:
            return (
                f"the disk under '{self.cache.folder}' filled up while decoding images; make "
                "room, or set TINYTUNE_CACHE to a folder on a disk with room"
            )
        return self.cache._unwritable(e)

    def commit(self) -> None:
        """Flush every file to disk and rename it into place, with a note of the source."""
        assert self.rows == self.cache.count, (self.rows, self.cache.count)
        try:
            for r, (handle, name) in list(self._files.items()):
                handle.flush()
                os.fsync(handle.fileno())
                handle.close()
                os.replace(name, self.cache.path(r))
                del self._files[r]
            _write_note(self.cache)
            _sync_folder(self.cache.folder)
        except OSError as e:
            raise DataError(self._failed(e)) from e

    def discard(self) -> None:
        """Close and delete the temporary files not committed."""
        for handle, name in self._files.values():
            with contextlib.suppress(OSError):
                handle.close()
            with contextlib.suppress(OSError):
                name.unlink()
        self._files.clear()


def _write_note(cache: DecodedCache) -> None:
    """``source.json`` beside the files: which folder they were decoded from, for people."""
    note = {
        "source": str(cache.source),
        "images": cache.count,
        "format": FORMAT_VERSION,
        "decoding": DECODING_VERSION,
        "layout": "raw uint8 (images, R, R, 3) per <R>px.uint8, the folder's sorted order",
    }
    fd, name = tempfile.mkstemp(prefix=".source.json.", suffix=".tmp", dir=cache.folder)
    with os.fdopen(fd, "w") as handle:
        json.dump(note, handle, indent=1)
    os.replace(name, cache.folder / "source.json")


def _sync_folder(folder: Path) -> None:
    """Make the renames in ``folder`` durable (where the platform allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


ProgressCallback = Callable[[DecodeProgress], None]
"""Called as an image folder is decoded (:class:`DecodeProgress`)."""
