"""Alembic environment for tinytune's own tables (``tt_*``), never Optuna's.

Run from code by :func:`tinytune.db.migrations.upgrade`, which hands over an open connection in
``config.attributes["connection"]``. Run by the ``alembic`` command (to write a new revision),
it connects to ``sqlalchemy.url`` from the ini file instead.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from tinytune.db.engine import create_engine
from tinytune.db.migrations.runner import VERSION_TABLE, include_name
from tinytune.db.models import Base

config = context.config


def _run_online(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,
        compare_type=True,
        # SQLite cannot ALTER most things; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
elif (given := config.attributes.get("connection")) is not None:
    _run_online(given)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as connection:
            _run_online(connection)
    finally:
        engine.dispose()
