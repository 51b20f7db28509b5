"""The outputs of a frozen prefix for every image of an image folder, kept on disk across
fine-tunes, workers and runs.

A fine-tune that leaves the first stages of a network frozen (``GraphNet.frozen_prefix``)
trains the rest on those stages' outputs, computed once per image. Those outputs depend only on
the prefix's folded weights and the images, so the learning-rate grid's fine-tunes of one
preset, the repeated train/validation partitions of a candidate, and every candidate of a
study (or of a later study) that shares the sub-network's first blocks and resolution compute
them once between them.

The outputs of one prefix for one decoded image folder (:class:`~tinytune.data.Pixels`' storage
at one resolution) are one file of raw float32, ``(M, C, H, W)`` for the storage's ``M`` images
in its order, ``$TINYTUNE_CACHE/prefixes/<key>.f32`` (:func:`tinytune.paths.cache_dir`), read
back with ``np.memmap``. Its key (:func:`prefix_key`) is a SHA-256 over :data:`FORMAT_VERSION`,
the torch version and the kind of device that computes it, the storage's key (the folder's
content and the resolution), the number of stages, each stage's description and tensors (the
folded weights) and the prefix's output on the storage's first images: another network, other
weights or other images give another key, and so do arithmetic that differs in any bit.

Whether the file existed or not, the outputs are computed the same way (the storage's rows in
order, batches of :data:`BATCH`), so a fine-tune that reads them from disk trains bit for bit as
one that computes them. A file is written under a temporary name beside its place, flushed and
renamed into place; writers of one key take turns (an ``flock``), so workers that need the same
prefix at once compute it once. The folder is bounded (:data:`DISK_BYTES`): after each write
the least recently used files go until it fits. A prefix whose file would be larger than
:data:`FILE_BYTES`, or a cache that cannot be written, is computed in memory for the one
fine-tune instead (when it fits there).

Clearing it is deleting the folder (``rm -r "$TINYTUNE_CACHE/prefixes"``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from tinytune.data import Pixels
from tinytune.data.splits import TO_FLOAT
from tinytune.paths import cache_dir

__all__ = [
    "BATCH",
    "DISK_BYTES",
    "FILE_BYTES",
    "FORMAT_VERSION",
    "PrefixStore",
    "prefix_key",
    "prefixes_root",
    "to_float",
]

FORMAT_VERSION = 1
"""The layout of a file: raw float32 ``(M, C, H, W)``, rows in the storage's order."""

BATCH = 256
"""Images per forward pass of the prefix (the same whether or not the file is kept)."""

FILE_BYTES = 2 << 30
"""The largest file kept; a larger prefix output is not cached on disk."""

DISK_BYTES = 8 << 30
"""The most the ``prefixes`` folder keeps; the least recently used files go beyond it."""

_SPARE_BYTES = 256 << 20  # left free on the disk after a write
_PROBE = 4  # images of the storage whose prefix output enters the key


def prefixes_root() -> Path:
    """``<cache>/prefixes``: where the prefixes' outputs are kept."""
    return cache_dir() / "prefixes"


_lookup: dict[str, Tensor] = {}


def to_float(pixels: Tensor) -> Tensor:
    """``(B, R, R, 3)`` uint8 on a device as ``(B, 3, R, R)`` float32 in [-1, 1], contiguous,
    through :data:`TO_FLOAT` (the bits the numpy conversion gives)."""
    table = _lookup.get(str(pixels.device))
    if table is None:
        table = _lookup.setdefault(str(pixels.device), torch.tensor(TO_FLOAT).to(pixels.device))
    return table[pixels.long()].permute(0, 3, 1, 2).contiguous()


def _floats(rows: np.ndarray, device: torch.device) -> Tensor:
    """``(B, R, R, 3)`` uint8 rows of a storage as :func:`to_float` gives them on ``device``."""
    with warnings.catch_warnings():  # a read-only (memory-mapped) array; never written
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        pixels = torch.from_numpy(np.ascontiguousarray(rows)).to(device)
    return to_float(pixels)


@torch.no_grad()
def _run(stages: list[nn.Module], x: Tensor) -> Tensor:
    for module in stages:
        x = module(x)
    return x


def prefix_key(stages: list[nn.Module], pixels: Pixels, device: torch.device) -> str:
    """The key of ``stages``' outputs on ``pixels``' storage computed on ``device``'s kind."""
    return _key_and_shape(stages, pixels, device)[0]


def _key_and_shape(
    stages: list[nn.Module], pixels: Pixels, device: torch.device
) -> tuple[str, tuple[int, ...]]:
    """:func:`prefix_key`, and the shape of the outputs of the whole storage (from the same
    forward pass of the probe)."""
    digest = hashlib.sha256(
        f"tinytune prefix {FORMAT_VERSION} torch {torch.__version__} {device.type}\n".encode()
    )
    digest.update(f"{pixels.key}\n{pixels.storage.shape}\n{len(stages)}\n".encode())
    for module in stages:
        digest.update(repr(module).encode())
        for name, tensor in module.state_dict().items():
            data = tensor.detach().cpu().contiguous()
            digest.update(f"\n{name} {data.dtype} {tuple(data.shape)}\n".encode())
            digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    probe = _run(stages, _floats(pixels.storage[:_PROBE], device)).cpu().contiguous()
    digest.update(probe.numpy().tobytes())
    return digest.hexdigest(), (len(pixels.storage), *probe.shape[1:])


class PrefixStore:
    """The prefixes' outputs kept under ``root`` (default :func:`prefixes_root`, read when
    made).

    Attributes:
        computed: prefix outputs computed by this store (a file written, or in memory).
        reused: prefix outputs read from a file another fine-tune or run wrote.
    """

    def __init__(
        self,
        root: Path | None = None,
        disk_bytes: int = DISK_BYTES,
        file_bytes: int = FILE_BYTES,
    ) -> None:
        self._root = root
        self.disk_bytes = disk_bytes
        self.file_bytes = file_bytes
        self.computed = 0
        self.reused = 0

    @property
    def root(self) -> Path:
        return prefixes_root() if self._root is None else self._root

    def outputs(
        self,
        stages: list[nn.Module],
        pixels: Pixels,
        device: str | torch.device,
        memory_bytes: int,
    ) -> np.ndarray | None:
        """The outputs of ``stages`` for every image of ``pixels``' storage, ``(M, C, H, W)``
        float32 (a read-only memory-mapped file, or an array); None when the outputs take
        more than ``memory_bytes`` and cannot be kept on disk either (the caller runs the
        whole network at every step instead)."""
        where = torch.device(device)
        key, shape = _key_and_shape(stages, pixels, where)
        nbytes = int(np.prod(shape)) * 4
        path = self.root / f"{key}.f32"
        found = self._open(path, shape)
        if found is not None:
            self.reused += 1
            return found
        if nbytes <= self.file_bytes:
            with contextlib.suppress(OSError), self._locked(key):
                found = self._open(path, shape)  # another worker may have written it
                if found is not None:
                    self.reused += 1
                    return found
                if self._room(nbytes):
                    self._write(path, shape, lambda out: self._compute(stages, pixels, where, out))
                    self.computed += 1
                    self._evict(keep=path)
                    opened = self._open(path, shape)
                    if opened is not None:
                        return opened
        if nbytes > memory_bytes:
            return None
        out = np.empty(shape, np.float32)
        self._compute(stages, pixels, where, out)
        self.computed += 1
        return out

    @staticmethod
    def _compute(
        stages: list[nn.Module], pixels: Pixels, device: torch.device, out: np.ndarray
    ) -> None:
        storage = pixels.storage
        for i in range(0, len(storage), BATCH):
            out[i : i + BATCH] = _run(stages, _floats(storage[i : i + BATCH], device)).cpu()

    def _open(self, path: Path, shape: tuple[int, ...]) -> np.memmap | None:
        try:
            if path.stat().st_size != int(np.prod(shape)) * 4:
                return None
            os.utime(path)  # used now: the last to go
            return np.memmap(path, dtype=np.float32, mode="r", shape=shape)
        except OSError:
            return None

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / f".{key}.lock").open("a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _room(self, nbytes: int) -> bool:
        try:
            return shutil.disk_usage(self.root).free >= nbytes + _SPARE_BYTES
        except OSError:
            return False

    def _write(
        self, path: Path, shape: tuple[int, ...], fill: Callable[[np.ndarray], None]
    ) -> None:
        """Fill a temporary file of ``shape`` through ``fill``, flush it, rename it to
        ``path``; removed when anything fails."""
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            array = np.memmap(name, dtype=np.float32, mode="w+", shape=shape)
            fill(array)
            array.flush()
            del array
            with open(name, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(name, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)

    def files(self) -> list[tuple[Path, int]]:
        """The kept files and their sizes, least recently used first."""
        found = []
        with contextlib.suppress(OSError):
            for path in self.root.glob("*.f32"):
                with contextlib.suppress(OSError):
                    stat = path.stat()
                    found.append((stat.st_mtime, path, stat.st_size))
        return [(path, size) for _, path, size in sorted(found)]

    def _evict(self, keep: Path) -> None:
        """Delete the least recently used files (and their locks) beyond :attr:`disk_bytes`."""
        files = self.files()
        total = sum(size for _, size in files)
        for old, size in files:
            if total <= self.disk_bytes:
                break
            if old == keep:
                continue
            with contextlib.suppress(OSError):
                old.unlink()
                total -= size
                (self.root / f".{old.stem}.lock").unlink()
