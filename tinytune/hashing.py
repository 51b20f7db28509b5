"""Content digests of files, for the modules of every layer that check or key by them (the
shipped checkpoints, an image folder's cache key)."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["sha256_file"]


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file's bytes, read in blocks of 1 MiB.

    Args:
        path: the file to digest.

    Returns:
        The 64 lower-case hex digits of its SHA-256.
    """
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
