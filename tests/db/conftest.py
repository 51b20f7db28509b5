"""Database fixtures: a SQLite file per test, and a fresh PostgreSQL database per test.

PostgreSQL tests create a database ``tt_test_<random>`` through the admin database (AUTOCOMMIT)
and drop it afterwards, so runs never collide and leave nothing behind. They skip, with the
reason, when no server answers at ``TINYTUNE_TEST_POSTGRES_URL`` (default: the local server).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tinytune.db import Store, open_store

POSTGRES_ADMIN_URL = os.environ.get(
    "TINYTUNE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)

_server_problem: list[str | None] = []  # memo: [None] when the server answers, [reason] if not


def _postgres_problem() -> str | None:
    if not _server_problem:
        engine = sa.create_engine(POSTGRES_ADMIN_URL, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as connection:
                connection.execute(sa.text("SELECT 1"))
            _server_problem.append(None)
        except sa.exc.SQLAlchemyError as e:
            reason = str(getattr(e, "orig", e)).splitlines()[0]
            _server_problem.append(
                f"no PostgreSQL server answers at {POSTGRES_ADMIN_URL}: {reason}"
            )
        finally:
            engine.dispose()
    return _server_problem[0]


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'tinytune.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    problem = _postgres_problem()
    if problem is not None:
        pytest.skip(problem)
    name = f"tt_test_{uuid.uuid4().hex[:16]}"
    admin = sa.create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield (
            sa.make_url(POSTGRES_ADMIN_URL)
            .set(database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


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
