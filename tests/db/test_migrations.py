"""tinytune's Alembic migrations: empty databases, Optuna's tables, re-runs, model agreement."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import optuna
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from tinytune.db import EvaluationRecord, open_store
from tinytune.db.engine import create_engine
from tinytune.db.migrations import VERSION_TABLE, current_revision, head_revision, upgrade
from tinytune.db.migrations.runner import include_name
from tinytune.db.models import Base
from tinytune.errors import StorageError

TT_TABLES = {"tt_calibrations", "tt_candidates", "tt_evaluations", "tt_pareto_snapshots"}
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
    assert set(Base.metadata.tables) == TT_TABLES
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
