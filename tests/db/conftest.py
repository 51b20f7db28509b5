"""Database fixtures: a SQLite file per test, and (from tests/conftest.py) a fresh PostgreSQL
database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tinytune.db import Store, open_store


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'tinytune.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def db_url(request) -> str:
    """The URL of an empty database, once for SQLite and once for PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def store(db_url) -> Iterator[Store]:
    with open_store(db_url) as opened:
        yield opened


@pytest.fixture
def sqlite_store(sqlite_url) -> Iterator[Store]:
    """A store for tests that fail before any SQL runs, so one backend is enough."""
    with open_store(sqlite_url) as opened:
        yield opened
