"""Whether a database exists, asked without creating one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinytune.db import database_exists, open_store, require_existing
from tinytune.errors import StorageError


def test_a_sqlite_file_exists_once_opened_and_asking_creates_none(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    url = f"sqlite:///{path}"
    assert not database_exists(url)
    with pytest.raises(StorageError, match=r"database file .*t\.db' does not exist"):
        require_existing(url)
    assert not path.exists()
    with open_store(url):
        pass
    assert database_exists(url)
    require_existing(url)


def test_memory_and_server_urls_count_as_existing() -> None:
    assert database_exists("sqlite://")
    assert database_exists("sqlite:///:memory:")
    assert database_exists("postgresql+psycopg://nobody@127.0.0.1:1/none")  # not connected


def test_a_malformed_url_is_an_error() -> None:
    with pytest.raises(StorageError):
        database_exists("not a url")


def test_a_folder_or_a_bare_path_is_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"database file '.*' is a folder; name the SQLite"):
        require_existing(f"sqlite:///{tmp_path}")
    path = tmp_path / "t.db"
    for given in (path, str(path)):  # a path where a URL goes: the URL that names the file
        with pytest.raises(StorageError, match=f"for a SQLite file write 'sqlite:///{path}'$"):
            require_existing(given)  # type: ignore[arg-type]
    for not_a_path in ("sqlite:t.db", "tt@dbhost/tinytune"):  # no SQLite advice for these
        with pytest.raises(StorageError, match="expected a URL such as") as raised:
            require_existing(not_a_path)
        assert "for a SQLite file" not in str(raised.value)
    assert sorted(tmp_path.iterdir()) == []
