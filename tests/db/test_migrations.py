"""tinytune's Alembic migrations: empty databases, Optuna's tables, re-runs, model agreement."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager

import optuna
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.orm import Session

from tinytune.db import EvaluationRecord, open_store
from tinytune.db.engine import create_engine
from tinytune.db.migrations import VERSION_TABLE, current_revision, head_revision, upgrade
from tinytune.db.migrations.runner import SCRIPT_LOCATION, include_name
from tinytune.db.models import Base
from tinytune.errors import StorageError

FIRST_TABLES = {"tt_calibrations", "tt_candidates", "tt_evaluations", "tt_pareto_snapshots"}
TT_TABLES = set(Base.metadata.tables)  # what the migrations must create, no more, no less
KEY = "c" * 16


@pytest.fixture(autouse=True)
def quiet_optuna() -> Iterator[None]:
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(level)


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    engine = create_engine(db_url)
    yield engine
    engine.dispose()


def table_names(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


@contextmanager
def optuna_storage(url: str) -> Iterator[optuna.storages.RDBStorage]:
    """Optuna's storage for ``url``, with its connections closed afterwards."""
    storage = optuna.storages.RDBStorage(url)
    try:
        yield storage
    finally:
        storage.engine.dispose()


def objective(trial: optuna.Trial) -> tuple[float, int]:
    return trial.suggest_float("x", 0, 1), trial.suggest_int("n", 1, 9)


def make_optuna_study(url: str) -> None:
    with optuna_storage(url) as storage:
        study = optuna.create_study(
            storage=storage, study_name="search", directions=["maximize", "minimize"]
        )
        study.optimize(objective, n_trials=3)


def count_optuna_trials(url: str) -> int:
    with optuna_storage(url) as storage:
        return len(optuna.load_study(study_name="search", storage=storage).trials)


def optuna_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def test_every_model_table_is_prefixed() -> None:
    assert TT_TABLES >= FIRST_TABLES
    assert all(name.startswith("tt_") for name in TT_TABLES)
    assert VERSION_TABLE == "tinytune_alembic_version"


def test_upgrade_creates_tables_on_an_empty_database(engine: sa.Engine) -> None:
    assert current_revision(engine) is None

    upgrade(engine)

    assert current_revision(engine) == head_revision()
    assert table_names(engine) == TT_TABLES | {VERSION_TABLE}  # never Optuna's alembic_version


def test_upgrade_twice_changes_nothing(engine: sa.Engine, db_url: str) -> None:
    upgrade(engine)
    with open_store(db_url) as store:
        store.add_candidate(KEY, "ofa_mbv3", "{}")

    upgrade(engine)
    upgrade(engine)

    assert current_revision(engine) == head_revision()
    with engine.connect() as connection:
        versions = connection.execute(sa.text(f"SELECT * FROM {VERSION_TABLE}")).all()
    assert versions == [(head_revision(),)]
    with open_store(db_url) as store:
        assert store.get_candidate(KEY).payload == "{}"


def test_upgrade_beside_existing_optuna_tables(engine: sa.Engine, db_url: str) -> None:
    make_optuna_study(db_url)
    optuna_tables = table_names(engine)
    revision_before = optuna_revision(engine)
    assert "alembic_version" in optuna_tables and revision_before is not None

    with open_store(db_url) as store:
        store.add_candidate(KEY, "ofa_mbv3", "{}")
        store.add_evaluation(EvaluationRecord("search", KEY, "measured", "ok", trial_number=0))

    assert table_names(engine) == optuna_tables | TT_TABLES | {VERSION_TABLE}
    assert optuna_revision(engine) == revision_before
    assert current_revision(engine) == head_revision()
    with optuna_storage(db_url) as storage:
        study = optuna.load_study(study_name="search", storage=storage)
        assert len(study.trials) == 3
        study.optimize(objective, n_trials=1)
    assert count_optuna_trials(db_url) == 4


def test_optuna_can_join_a_database_that_tinytune_created(engine: sa.Engine, db_url: str) -> None:
    with open_store(db_url) as store:
        store.add_candidate(KEY, "ofa_mbv3", "{}")

    make_optuna_study(db_url)

    assert count_optuna_trials(db_url) == 3
    with open_store(db_url) as store:
        assert store.get_candidate(KEY) is not None
    assert current_revision(engine) == head_revision()


def test_models_and_migrations_describe_the_same_schema(engine: sa.Engine, db_url: str) -> None:
    make_optuna_study(db_url)  # Optuna's tables must not show up as differences either
    upgrade(engine)

    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"include_name": include_name, "compare_type": True}
        )
        diffs = compare_metadata(context, Base.metadata)

    assert diffs == []


def test_unknown_stored_revision_raises_storage_error(engine: sa.Engine, db_url: str) -> None:
    upgrade(engine)
    with engine.begin() as connection:
        connection.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = 'f00dfeed'"))

    with pytest.raises(StorageError, match="f00dfeed") as info:
        open_store(db_url)
    assert "expected a database written by this or an older tinytune" in str(info.value)


# --- upgrading a database written at an earlier revision ---------------------------------------
#
# Generic over the revisions: the database is brought to each earlier revision, one row is
# written into every tinytune table that revision has (values chosen from the reflected column
# types, foreign keys and CHECK constraints), and after the upgrade to head the rows must read
# back unchanged, through SQL and through head's models.

WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)


def earlier_revisions() -> list[str]:
    script = ScriptDirectory(str(SCRIPT_LOCATION))
    return [r.revision for r in script.walk_revisions() if r.revision != head_revision()]


EARLIER = earlier_revisions()


def reflect_tt_tables(engine: sa.Engine) -> sa.MetaData:
    metadata = sa.MetaData()
    metadata.reflect(bind=engine, only=lambda name, _: name.startswith("tt_"))
    return metadata


def allowed_literals(engine: sa.Engine, table: sa.Table, column: sa.Column) -> list[str]:
    """The quoted literals of a CHECK constraint on ``column`` (``status IN ('ok', ...)``)."""
    for check in sa.inspect(engine).get_check_constraints(table.name):
        if re.search(rf"\b{column.name}\b", check["sqltext"]):
            return re.findall(r"'([^']*)'", check["sqltext"])
    return []


def sample_value(engine: sa.Engine, table: sa.Table, column: sa.Column, written: dict) -> object:
    kind = column.type
    if column.foreign_keys:
        (fk,) = column.foreign_keys
        return written[fk.column.table.name][fk.column.name]
    if allowed := allowed_literals(engine, table, column):
        return allowed[0]
    if isinstance(kind, sa.JSON):
        return {"table": table.name, "column": column.name, "values": [1, 2.5, None, "é"]}
    if isinstance(kind, sa.DateTime):  # written as the models write it: UTC, naive on SQLite
        return WHEN.replace(tzinfo=None) if engine.dialect.name == "sqlite" else WHEN
    if isinstance(kind, sa.Boolean):
        return True
    if isinstance(kind, sa.BigInteger):
        return 2**40 + 3
    if isinstance(kind, sa.Integer):
        return 7
    if isinstance(kind, sa.Float | sa.Numeric):
        return 0.625  # exact in binary
    if isinstance(kind, sa.String):
        text = hashlib.sha256(f"{table.name}.{column.name}".encode()).hexdigest()
        return text[: kind.length or len(text)]
    raise AssertionError(f"no sample value for {table.name}.{column.name} of type {kind!r}")


def write_one_row_each(engine: sa.Engine, metadata: sa.MetaData) -> dict[str, dict[str, object]]:
    """Inserts one row into every table (parents first); returns the values by table."""
    written: dict[str, dict[str, object]] = {}
    with engine.begin() as connection:
        for table in metadata.sorted_tables:
            row = {
                c.name: sample_value(engine, table, c, written)
                for c in table.columns
                if not (c.primary_key and isinstance(c.type, sa.Integer))  # assigned by the DB
            }
            result = connection.execute(table.insert().values(row))
            row.update(
                zip(table.primary_key.columns.keys(), result.inserted_primary_key, strict=True)
            )
            written[table.name] = row
    return written


def read_rows(engine: sa.Engine, metadata: sa.MetaData) -> dict[str, list[tuple]]:
    with engine.connect() as connection:
        return {
            table.name: [
                tuple(row)
                for row in connection.execute(
                    sa.select(table).order_by(*table.primary_key.columns)
                )
            ]
            for table in metadata.sorted_tables
        }


@pytest.mark.parametrize(
    "start",
    EARLIER
    or [pytest.param(None, marks=pytest.mark.skip(reason="only one revision exists so far"))],
)
def test_rows_written_at_an_earlier_revision_survive_the_upgrade_to_head(
    engine: sa.Engine, db_url: str, start: str
) -> None:
    upgrade(engine, start)
    assert current_revision(engine) == start
    old_schema = reflect_tt_tables(engine)
    assert old_schema.tables, f"revision {start} has no tinytune tables"
    written = write_one_row_each(engine, old_schema)
    before = read_rows(engine, old_schema)

    upgrade(engine)

    assert current_revision(engine) == head_revision()
    with engine.connect() as connection:
        versions = connection.execute(sa.text(f"SELECT * FROM {VERSION_TABLE}")).all()
    assert versions == [(head_revision(),)]
    assert table_names(engine) == TT_TABLES | {VERSION_TABLE}
    assert read_rows(engine, old_schema) == before
    # head's models read every old row, value for value
    mappers = {m.local_table.name: m for m in Base.registry.mappers}
    with Session(engine) as session:
        for table in old_schema.sorted_tables:
            mapper = mappers[table.name]
            (obj,) = session.scalars(sa.select(mapper.class_)).all()
            for name, value in written[table.name].items():
                key = mapper.get_property_by_column(mapper.local_table.c[name]).key
                expected = WHEN if isinstance(table.c[name].type, sa.DateTime) else value
                assert getattr(obj, key) == expected, f"{table.name}.{name}"
    # and the schema reached this way is the one the models describe
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"include_name": include_name, "compare_type": True}
        )
        assert compare_metadata(context, Base.metadata) == []
    with open_store(db_url):
        pass  # opening at head neither fails nor migrates again
    assert read_rows(engine, old_schema) == before
