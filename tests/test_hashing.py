"""The file digest shared by the checkpoints and the image folders."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tinytune import checkpoints
from tinytune.hashing import sha256_file


def test_digest_of_a_file_over_several_blocks(tmp_path: Path) -> None:
    data = bytes(range(256)) * (5 * 4096 + 7)  # 5 MiB and a bit: several 1 MiB blocks
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_digest_of_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert sha256_file(path) == hashlib.sha256(b"").hexdigest()


def test_checkpoints_still_offers_it() -> None:
    assert checkpoints.sha256_file is sha256_file
