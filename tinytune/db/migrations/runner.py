"""Running tinytune's Alembic migrations programmatically.

tinytune's tables share a database with Optuna's, and Optuna keeps its own Alembic history in
the default ``alembic_version`` table. tinytune therefore records its revision in
:data:`VERSION_TABLE` and only ever looks at tables named ``tt_*`` (:func:`include_name`), so
the two histories never see each other.

To write a new migration, point an ``alembic.ini`` (``script_location`` = this folder,
``sqlalchemy.url`` = a scratch database) at this folder and run ``alembic revision
--autogenerate``; ``env.py`` applies the same version table and filter.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from tinytune.db.engine import SQLITE_BUSY_TIMEOUT_S, translate_error
from tinytune.db.models import TABLE_PREFIX, VERSION_TABLE
from tinytune.errors import StorageError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Engine

__all__ = ["VERSION_TABLE", "current_revision", "head_revision", "include_name", "upgrade"]

SCRIPT_LOCATION = Path(__file__).resolve().parent

# Serializes concurrent upgrades of one PostgreSQL database (any constant unique to tinytune).
_PG_ADVISORY_LOCK_KEY = 0x7474_5F6D_6967  # "tt_mig"


def include_name(name: str | None, type_: str, _parent_names: object) -> bool:
    """Alembic filter: tinytune's migrations see only ``tt_*`` tables, never Optuna's."""
    if type_ == "table":
        return name is not None and name.startswith(TABLE_PREFIX)
    return True


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Brings tinytune's tables in the database of ``engine`` up to ``revision``.

    Safe to run on an empty database, on one that already holds Optuna's tables, and again on
    one that is already up to date (then it changes nothing). The whole upgrade is one
    transaction, serialized against other processes' upgrades: by an advisory lock on
    PostgreSQL, by taking SQLite's write lock first (``BEGIN IMMEDIATE``).

    Raises:
        StorageError: the database cannot be reached, or it carries a tinytune revision that
            these migrations do not know (written by a newer tinytune).
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    delay = 0.1
    while True:
        try:
            return _upgrade_once(engine, revision)
        except StorageError as e:
            # processes that open one new SQLite file at once can meet "database is locked"
            # where SQLite does not wait (switching the new file to WAL): the upgrade is one
            # transaction, so it is tried again until the busy timeout has passed
            locked = engine.dialect.name == "sqlite" and "database is locked" in str(e)
            if not locked or time.monotonic() + delay > deadline:
                raise
            log.info("the new SQLite database is locked by another process; trying again")
            time.sleep(delay)
            delay = min(2 * delay, 1.0)


def _upgrade_once(engine: Engine, revision: str) -> None:
    from alembic import command
    from alembic.util import CommandError

    config = _config()
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_ADVISORY_LOCK_KEY}
                )
            elif connection.dialect.name == "sqlite":
                # SQLite's one write lock before Alembic reads the version table: a second
                # process waits (busy timeout), then finds the schema at head
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    except CommandError as e:
        stored = _stored_revision_or_none(engine)
        raise StorageError(
            f"cannot migrate database {engine.url.render_as_string(hide_password=True)!r} to "
            f"tinytune schema revision {revision!r}: {e} (stored revision: {stored!r}); expected "
            f"a database written by this or an older tinytune (known head: {head_revision()!r})"
        ) from e
    except sa.exc.SQLAlchemyError as e:
        raise translate_error("cannot open database", engine.url, e) from e


def current_revision(engine: Engine) -> str | None:
    """The tinytune schema revision stored in the database, or None before the first upgrade.

    Raises:
        StorageError: the database cannot be reached.
    """
    try:
        return _stored_revision(engine)
    except sa.exc.SQLAlchemyError as e:
        raise translate_error("cannot read schema revision of", engine.url, e) from e


def head_revision() -> str:
    """The newest revision that these migrations know."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None, "tinytune migrations have no head revision"
    return head


def _stored_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def _stored_revision_or_none(engine: Engine) -> str | None:
    try:
        return _stored_revision(engine)
    except sa.exc.SQLAlchemyError:
        return None


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    return config
