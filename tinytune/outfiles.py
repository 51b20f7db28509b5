"""Files a command writes, checked before any work: a PNG or JSON path that is not a folder,
under a folder that exists or can be made, and (JSON) not a file of another kind, an input or
the database; anything else is a one-line error that names the option, and nothing is
overwritten."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tinytune.errors import Flag
from tinytune.errors import flag as _flag

__all__ = ["json_path", "png_path"]


def _writable_under(path: Path, flag: str | Flag, expected: str) -> None:
    """Refuse ``path`` as a file to write when it is a folder (``''`` included) or when the
    nearest folder above it that exists is not a writable folder."""
    from tinytune.errors import ConfigError
    from tinytune.paths import writable_folder

    if str(path) in ("", ".") or path.is_dir():
        raise ConfigError(flag + f" {str(path)!r} is a folder; expected {expected}")
    writable_folder(path.absolute().parent, flag, path)


def png_path(path: Path, flag: str | Flag) -> Path:
    """``path`` checked as a PNG to write, before any work: a ``.png`` name that is not a
    folder, under a folder that exists or can be made (the nearest existing one a writable
    folder); the command makes its missing folders when it writes, as ``profile``,
    ``calibrate`` and ``export`` do. Anything else is a one-line error that names ``flag``."""
    from tinytune.errors import ConfigError

    if path.suffix.lower() != ".png":
        raise ConfigError(flag + f" {str(path)!r} must name a .png file")
    _writable_under(path, flag, "a .png file")
    return path


def json_path(
    path: Path,
    flag: str | Flag,
    kind: str,
    same_kind: Callable[[dict[str, Any]], bool],
    *,
    inputs: Sequence[Path] = (),
    storage: str | None = None,
) -> Path:
    """``path`` checked, before any work, as a JSON file to write: not a folder, under a
    folder that exists or can be made, and, where it exists, a file of the same ``kind`` (a
    JSON object for which ``same_kind`` holds: what the command wrote before, replaced) that
    is none of ``inputs`` and not the SQLite file of ``storage``. Anything else (a database,
    another program's file, a file of another kind, the file being read) is a one-line error
    that names ``flag``, and nothing is overwritten."""
    import json

    from tinytune.errors import ConfigError

    _writable_under(path, flag, "a .json file")
    if not path.exists():
        return path
    if not path.is_file():
        raise ConfigError(flag + f" {str(path)!r} exists and is not a file")
    same = [p for p in inputs if Path(p).exists() and Path(p).samefile(path)]
    if same:
        raise ConfigError(flag + f" {str(path)!r} is one of the input files; write elsewhere")
    if storage is not None:
        from tinytune.db.engine import parse_url

        database = parse_url(storage).database
        if database and Path(database).exists() and Path(database).samefile(path):
            raise ConfigError(
                flag + f" {str(path)!r} is the database " + _flag("storage") + " names"
            )
    with path.open("rb") as f:
        head = f.read(16)
    if head.startswith(b"SQLite format 3"):
        raise ConfigError(
            flag + f" {str(path)!r} is a SQLite database, which writing would destroy; name "
            "another file"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        data = None
    if not isinstance(data, dict) or not same_kind(data):
        raise ConfigError(
            flag + f" {str(path)!r} exists and is not a {kind}; name a new file or remove it first"
        )
    return path
