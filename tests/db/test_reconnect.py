"""Riding out a database server that goes away: the bounded retry on its own (an injected clock),
and the store against a real PostgreSQL database that drops and refuses its connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import optuna
import psycopg
import pytest
import sqlalchemy as sa

from tinytune.db import EvaluationRecord, open_store
from tinytune.db.reconnect import FIRST_DELAY_S, MAX_DELAY_S, Reconnect, lost_connection
from tinytune.errors import DatabaseUnavailableError, StorageError

URL = "postgresql+psycopg://tuner:s3cret@db.example:5432/studies"


def refused() -> sa.exc.OperationalError:
    """What SQLAlchemy raises when psycopg cannot connect (sqlstate None)."""
    return sa.exc.OperationalError(
        None,
        None,
        psycopg.OperationalError(
            'connection failed: connection to server at "db.example", port 5432 failed: '
            "Connection refused"
        ),
    )


def shut_down() -> sa.exc.OperationalError:
    """What a session gets when the server is shut down under it (57P01)."""
    return sa.exc.OperationalError(
        "SELECT 1", {}, psycopg.errors.AdminShutdown("terminating connection"), True
    )


class Clock:
    """Monotonic time that moves only when slept."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def failing(times: float, error: Callable[[], BaseException], result: object = "done"):
    """A call that raises ``error()`` its first ``times`` calls, then returns ``result``."""
    calls = []

    def call() -> object:
        calls.append(None)
        if len(calls) <= times:
            raise error()
        return result

    call.calls = calls  # type: ignore[attr-defined]
    return call


# -- the retry on its own -----------------------------------------------------------------------


def test_a_call_that_fails_a_few_times_succeeds_after_a_doubling_backoff(caplog) -> None:
    clock = Clock()
    reconnect = Reconnect(URL, 60.0, sleep=clock.sleep, clock=clock)
    call = failing(4, refused)

    with caplog.at_level("INFO", logger="tinytune.db.reconnect"):
        assert reconnect.call(call) == "done"

    assert len(call.calls) == 5
    assert clock.sleeps == [FIRST_DELAY_S, 2 * FIRST_DELAY_S, 4 * FIRST_DELAY_S, 8 * FIRST_DELAY_S]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1  # once per outage, not once per attempt
    assert "Connection refused" in warnings[0].getMessage()
    assert "s3cret" not in caplog.text and "***" in caplog.text


def test_the_pause_stops_doubling_at_its_cap() -> None:
    clock = Clock()
    reconnect = Reconnect(URL, 60.0, sleep=clock.sleep, clock=clock)

    reconnect.call(failing(8, shut_down))

    assert max(clock.sleeps) == MAX_DELAY_S
    assert clock.sleeps[-2:] == [MAX_DELAY_S, MAX_DELAY_S]


def test_a_server_that_never_answers_gives_one_line_after_the_bound() -> None:
    clock = Clock()
    reconnect = Reconnect(URL, 12.0, sleep=clock.sleep, clock=clock)
    call = failing(float("inf"), refused)

    with pytest.raises(DatabaseUnavailableError) as raised:
        reconnect.call(call)

    assert sum(clock.sleeps) == pytest.approx(12.0)  # the last pause clipped to the bound
    message = str(raised.value)
    assert "\n" not in message
    assert "'postgresql+psycopg://tuner:***@db.example:5432/studies'" in message
    assert "s3cret" not in message
    assert "did not answer for 12 s" in message and "Connection refused" in message
    assert "run the same command again to resume" in message
    assert isinstance(raised.value.__cause__, sa.exc.OperationalError)


def test_calls_after_the_bound_fail_at_once_until_one_succeeds() -> None:
    clock = Clock()
    reconnect = Reconnect(URL, 5.0, sleep=clock.sleep, clock=clock)
    with pytest.raises(DatabaseUnavailableError):
        reconnect.call(failing(float("inf"), refused))
    waited = len(clock.sleeps)

    with pytest.raises(DatabaseUnavailableError):  # the outage goes on: no second wait
        reconnect.call(failing(float("inf"), refused))
    assert len(clock.sleeps) == waited

    assert reconnect.call(failing(0, refused)) == "done"  # the server is back: outage over
    assert reconnect.call(failing(2, refused)) == "done"  # a new outage gets its own wait
    assert len(clock.sleeps) == waited + 2


def test_one_outage_is_waited_out_once_by_all_its_callers() -> None:
    """The bound counts from the outage's first failure, whichever call met it."""
    clock = Clock()
    reconnect = Reconnect(URL, 10.0, sleep=clock.sleep, clock=clock)
    inner_waited: list[float] = []

    def nested() -> object:
        try:
            return reconnect.call(failing(float("inf"), refused))
        finally:
            inner_waited.append(sum(clock.sleeps))

    with pytest.raises(DatabaseUnavailableError):
        reconnect.call(nested)  # the inner wait's give-up is not waited on again
    assert inner_waited == [pytest.approx(10.0)]
    assert sum(clock.sleeps) == pytest.approx(10.0)


def test_errors_wrapped_by_the_store_and_by_optuna_are_retried() -> None:
    clock = Clock()
    reconnect = Reconnect(URL, 60.0, sleep=clock.sleep, clock=clock)

    def wrapped(kind: type[Exception]) -> Callable[[], Exception]:
        def make() -> Exception:
            try:
                raise shut_down()
            except sa.exc.OperationalError as e:
                try:
                    raise kind("cannot read claims from database") from e
                except kind as outer:
                    return outer

        return make

    assert reconnect.call(failing(1, wrapped(StorageError))) == "done"
    assert reconnect.call(failing(1, wrapped(optuna.exceptions.StorageInternalError))) == "done"
    assert len(clock.sleeps) == 2


def test_a_query_tried_again_in_the_session_the_shutdown_broke_is_retried() -> None:
    """Optuna reads trials by a second query where its first fails, in the same session: that
    one raises SQLAlchemy's pending rollback while the shutdown is handled, and Optuna wraps it
    (the cause chain ends at the rollback; the shutdown is its context)."""

    def pending() -> Exception:
        try:
            try:
                raise shut_down()
            except sa.exc.OperationalError:
                raise sa.exc.PendingRollbackError("Can't reconnect until rolled back")  # noqa: B904
        except sa.exc.PendingRollbackError as e:  # its context: the shutdown
            try:
                raise optuna.exceptions.StorageInternalError("during the commit") from e
            except optuna.exceptions.StorageInternalError as outer:
                return outer

    clock = Clock()
    reconnect = Reconnect(URL, 60.0, sleep=clock.sleep, clock=clock)
    assert lost_connection(pending())
    assert reconnect.call(failing(1, pending)) == "done"
    assert clock.sleeps == [FIRST_DELAY_S]
    # a pending rollback with no lost connection behind it is a statement's error
    assert not lost_connection(sa.exc.PendingRollbackError("rolled back"))


@pytest.mark.parametrize(
    "error",
    [
        lambda: sa.exc.ProgrammingError(
            "SELECT x", {}, psycopg.errors.UndefinedTable('relation "x" does not exist')
        ),
        lambda: sa.exc.IntegrityError(
            "INSERT", {}, psycopg.errors.UniqueViolation("duplicate key value")
        ),
        lambda: sa.exc.OperationalError(
            "SELECT", {}, psycopg.errors.QueryCanceled("canceling statement due to timeout")
        ),
        lambda: StorageError("study 's' exists with another search space"),
        lambda: ValueError("not a database error"),
    ],
    ids=["undefined-table", "unique-violation", "statement-timeout", "tinytune", "other"],
)
def test_errors_of_a_statement_are_not_retried(error: Callable[[], BaseException]) -> None:
    clock = Clock()
    reconnect = Reconnect(URL, 60.0, sleep=clock.sleep, clock=clock)
    expected = type(error())

    with pytest.raises(expected):
        reconnect.call(failing(1, error))
    assert clock.sleeps == []
    assert not lost_connection(error())


def test_a_sqlite_file_is_never_waited_for(tmp_path) -> None:
    clock = Clock()
    locked = sa.exc.OperationalError("INSERT", {}, Exception("database is locked"))
    reconnect = Reconnect(f"sqlite:///{tmp_path / 'db.sqlite'}", sleep=clock.sleep, clock=clock)

    with pytest.raises(sa.exc.OperationalError):
        reconnect.call(failing(1, lambda: locked))
    assert clock.sleeps == []


# -- the store against a real server --------------------------------------------------------------


@pytest.mark.requires_postgres
def test_the_store_reconnects_after_its_sessions_were_ended(postgres_url, refuse_connections):
    """A restart ends every session: the pooled connections are replaced at checkout."""
    with open_store(postgres_url, reconnect_wait_s=0) as store:
        assert store.study_names() == []
        with refuse_connections(postgres_url):
            pass  # every session of the database ended, then connections allowed again
        assert store.study_names() == []  # no wait allowed: the pre-ping did it


@pytest.mark.requires_postgres
def test_the_store_waits_for_a_database_that_refuses_connections_a_while(
    postgres_url, refuse_connections
) -> None:
    with open_store(postgres_url, reconnect_wait_s=30) as store:
        store.add_candidate("a" * 16, "ofa", "{}")
        refused_for = threading.Event()

        def outage() -> None:
            with refuse_connections(postgres_url):
                refused_for.set()
                time.sleep(2.0)

        thread = threading.Thread(target=outage)
        thread.start()
        refused_for.wait(10)
        start = time.monotonic()
        try:
            candidate = store.get_candidate("a" * 16)
        finally:
            thread.join()
        assert candidate is not None and candidate.payload == "{}"
        assert 1.0 < time.monotonic() - start < 20


@pytest.mark.requires_postgres
def test_a_database_that_stays_away_gives_one_line_and_is_used_again_once_back(
    postgres_url, refuse_connections
) -> None:
    with open_store(postgres_url, reconnect_wait_s=1.0) as store:
        with refuse_connections(postgres_url), pytest.raises(DatabaseUnavailableError) as raised:
            store.study_names()
        name = sa.make_url(postgres_url).database
        assert f"{name}' did not answer for 1 s" in str(raised.value)
        assert "not currently accepting connections" in str(raised.value)
        assert store.study_names() == []


@pytest.mark.requires_postgres
def test_a_measurement_whose_commit_answer_was_lost_is_stored_once(
    postgres_url, answer_lost
) -> None:
    with open_store(postgres_url, reconnect_wait_s=30) as store:
        store.add_candidate("a" * 16, "ofa", "{}")
        assert store.claim_measurement("s", "a" * 16, 1, budget=3).outcome == "claimed"
        record = EvaluationRecord(
            study_name="s",
            candidate_key="a" * 16,
            fidelity="measured",
            status="ok",
            trial_number=1,
            accuracy=0.5,
            val_accuracy=0.5,
        )
        with answer_lost(store._engine, "INSERT INTO tt_evaluations") as lost:
            stored = store.finish_measurement(record)
        assert lost == [True]
        (evaluation,) = store.evaluations("s")
        assert evaluation.id == stored
        assert store.measured_budget_spent("s") == (1, 0)  # stored once, its claim dropped


@pytest.mark.requires_postgres
def test_a_claim_whose_commit_answer_was_lost_stays_the_trials_own(
    postgres_url, answer_lost
) -> None:
    with open_store(postgres_url, reconnect_wait_s=30) as store:
        store.add_candidate("a" * 16, "ofa", "{}")
        with answer_lost(store._engine, "INSERT INTO tt_claims") as lost:
            claim = store.claim_measurement("s", "a" * 16, 1, budget=3)
        assert lost == [True]
        assert claim.outcome == "claimed"  # not "in flight" with trial 1: its own claim
        assert store.measured_budget_spent("s") == (0, 1)
        other = store.claim_measurement("s", "a" * 16, 2, budget=3)
        assert (other.outcome, other.holder) == ("in_flight", 1)
