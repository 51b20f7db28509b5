"""Where tinytune keeps what it caches, and checks of the paths a command will write, made
before any work."""

from __future__ import annotations

import os
from pathlib import Path

from tinytune.errors import ConfigError, Flag, TinyTuneError

__all__ = ["cache_dir", "writable_folder"]


def cache_dir() -> Path:
    """``$TINYTUNE_CACHE``, else ``$XDG_CACHE_HOME/tinytune``, else ``~/.cache/tinytune``: the
    folder of everything tinytune caches (pre-trained supernets, decoded image folders, files
    shipped to cluster workers). A leaf function, so that every layer finds the same folder."""
    if os.environ.get("TINYTUNE_CACHE"):
        return Path(os.environ["TINYTUNE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tinytune"


def writable_folder(
    folder: Path, flag: str | Flag, given: Path, error: type[TinyTuneError] = ConfigError
) -> None:
    """Refuse ``folder`` (the folder of what ``flag`` names as ``given``) unless the nearest of
    it and the folders above it that exists is a writable folder, so that the command can make
    what is missing when it writes.

    Raises:
        error: the nearest existing path is a file, or a folder this process cannot write.
    """
    existing = Path(folder).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise error(
            flag + f" {str(given)!r}: cannot write under {str(existing)!r} "
            f"({'not a folder' if not existing.is_dir() else 'not writable'})"
        )
