"""A database that answers but cannot store (a read-only file, a full disk, a quota) ends a
search in one line that names it and says the same command resumes; what it stored is kept, and
the same call resumes once it is writable. Against a real SQLite file opened read-only."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from tinytune.db import open_store
from tinytune.db.reconnect import Reconnect, refused_write
from tinytune.errors import DatabaseRefusedError
from tinytune.search import InlineExecutor, SearchConfig, run_search

from .fakes import FakeEvaluator


def _config(trials: int) -> SearchConfig:
    return SearchConfig(
        checkpoint="unused-by-the-fake-evaluator",
        study_name="s",
        trials=trials,
        sampler="random",
        tune_lr=False,
    )


def _measured(url: str) -> list[str]:
    with open_store(url) as store:
        return [e.candidate_key for e in store.evaluations("s", fidelity="measured")]


def test_a_read_only_database_ends_the_search_in_one_line_and_the_same_call_resumes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db.sqlite"
    url = f"sqlite:///{db}"
    with open_store(url) as store:
        run_search(_config(2), store, InlineExecutor(FakeEvaluator()))
    before = _measured(url)
    assert len(before) >= 2
    read_only = f"sqlite:///file:{db}?mode=ro&uri=true"  # SQLite refuses every write
    with pytest.raises(DatabaseRefusedError) as refused, open_store(read_only) as store:
        run_search(_config(4), store, InlineExecutor(FakeEvaluator()))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("the database 'sqlite:///file") and str(db) in message
    assert "readonly database" in message and "run the same command again" in message
    assert _measured(url) == before  # nothing stored was lost
    with open_store(url) as store:  # writable again: the same call goes on
        run_search(_config(4), store, InlineExecutor(FakeEvaluator()))
    after = _measured(url)
    assert after[: len(before)] == before and len(after) > len(before)
    finished = optuna.load_study(study_name="s", storage=url).get_trials(
        states=(optuna.trial.TrialState.COMPLETE,)
    )
    assert len({t.number for t in finished}) == len(finished)


class _Driver(Exception):
    def __init__(self, sqlstate: str | None = None, sqlite_errorcode: int | None = None):
        super().__init__("the driver's message")
        self.sqlstate = sqlstate
        self.sqlite_errorcode = sqlite_errorcode


@pytest.mark.parametrize(
    ("sqlstate", "sqlite_code", "refused"),
    [
        ("53100", None, True),  # disk full (a quota is the same code)
        ("53200", None, True),  # out of memory
        ("58030", None, True),  # I/O error
        ("25006", None, True),  # a read-only transaction (a standby, a read-only database)
        ("23505", None, False),  # a unique key: the statement, not the database
        ("42P01", None, False),  # no such table
        (None, 13, True),  # SQLITE_FULL
        (None, 8, True),  # SQLITE_READONLY
        (None, 8 | (1 << 8), True),  # SQLITE_READONLY_RECOVERY: the primary code counts
        (None, 10, True),  # SQLITE_IOERR
        (None, 1, False),  # SQLITE_ERROR: e.g. no such table
        (None, 5, False),  # SQLITE_BUSY: the busy timeout's business
    ],
)
def test_which_errors_are_a_database_that_cannot_store(
    sqlstate: str | None, sqlite_code: int | None, refused: bool
) -> None:
    error = sa.exc.OperationalError("INSERT", {}, _Driver(sqlstate, sqlite_code))
    assert refused_write(error) is refused
    wrapped = RuntimeError("invalid data in the commit")  # as Optuna wraps it
    wrapped.__cause__ = error
    assert refused_write(wrapped) is refused


def test_a_full_disk_is_one_line_naming_the_database() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # type: ignore[attr-defined]
    error = sa.exc.OperationalError("INSERT INTO trials", {}, full)
    calls = []

    def once() -> None:
        calls.append(1)
        raise RuntimeError("An exception is raised during the commit.") from error

    reconnect = Reconnect("postgresql://u:secret@db.example/tt", wait_s=60)
    with pytest.raises(DatabaseRefusedError) as refused:
        reconnect.call(once)
    assert calls == [1]  # not waited for, as a lost connection is
    assert str(refused.value) == (
        "the database 'postgresql://u:***@db.example/tt' refused to store the search's results "
        "(database or disk is full); what it stored before is kept: make room or make it "
        "writable, then run the same command again to resume"
    )
