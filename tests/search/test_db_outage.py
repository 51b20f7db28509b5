"""A search whose PostgreSQL database goes away: Optuna's storage reconnects where Optuna alone
fails, a driver rides out a short outage with nothing lost or measured twice, and one that
outlasts the bound stops with one line and is resumed by the same call. Against the real server:
the test's own database refuses connections (its sessions ended, as in a restart), or the
server itself is restarted under a real ``tinytune search``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import optuna
import psycopg
import pytest
import sqlalchemy as sa

from tinytune.db import open_store
from tinytune.db.reconnect import Reconnect
from tinytune.errors import DatabaseUnavailableError
from tinytune.evaluators import EvaluationResult, FinetuneTask
from tinytune.search import InlineExecutor, SearchConfig, run_search
from tinytune.search.study.storage import ReconnectingStorage

from .fakes import FakeEvaluator

pytestmark = pytest.mark.requires_postgres

Refuse = Callable[[str], AbstractContextManager[None]]
AnswerLost = Callable[[sa.Engine, str], AbstractContextManager[list[bool]]]


def config(trials: int = 3) -> SearchConfig:
    """A study ``s`` of a few fake fine-tunes, with quick heartbeats."""
    return SearchConfig(
        checkpoint="unused-by-the-fake-evaluator",
        study_name="s",
        trials=trials,
        sampler="random",
        tune_lr=False,
        heartbeat_s=1,
        grace_s=5,
    )


def running(url: str, study: str = "s") -> list[int]:
    trials = optuna.load_study(study_name=study, storage=url).get_trials(
        states=(optuna.trial.TrialState.RUNNING,)
    )
    return [t.number for t in trials]


def measured(url: str, study: str = "s") -> list[str]:
    with open_store(url) as store:
        return [e.candidate_key for e in store.evaluations(study, fidelity="measured")]


class Outage(FakeEvaluator):
    """The fake evaluator; its ``at``-th evaluation makes the database refuse connections (and
    ends its sessions) before it returns, until :meth:`end` or for ``seconds``."""

    def __init__(self, refuse: Refuse, url: str, at: int, seconds: float = 600.0) -> None:
        super().__init__()
        self.refuse, self.url, self.at, self.seconds = refuse, url, at, seconds
        self._over = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, task: FinetuneTask) -> EvaluationResult:
        result = super().__call__(task)
        if len(self.candidates) == self.at:
            begun = threading.Event()

            def hold() -> None:
                with self.refuse(self.url):
                    begun.set()
                    self._over.wait(self.seconds)

            self._thread = threading.Thread(target=hold)
            self._thread.start()
            assert begun.wait(30)
        return result

    def end(self) -> None:
        self._over.set()
        if self._thread is not None:
            self._thread.join()


@pytest.fixture
def outages() -> Iterator[list[Outage]]:
    """Outages to end whatever happens, so that the database can be dropped."""
    made: list[Outage] = []
    yield made
    for outage in made:
        outage.end()


# -- Optuna's storage ----------------------------------------------------------------------------


def test_optuna_alone_fails_after_a_restart_where_the_reconnecting_storage_goes_on(
    postgres_url: str, refuse_connections: Refuse
) -> None:
    ours = ReconnectingStorage(postgres_url, Reconnect(postgres_url, 0))
    plain = optuna.storages.RDBStorage(postgres_url)
    study_id = ours.create_new_study([optuna.study.StudyDirection.MAXIMIZE], "s")
    assert plain.get_study_name_from_id(study_id) == "s"  # a pooled connection each

    with refuse_connections(postgres_url):
        pass  # every session ended, as by a restart; connections allowed again

    with pytest.raises(optuna.exceptions.StorageInternalError) as raised:
        plain.get_study_name_from_id(study_id)
    assert isinstance(raised.value.__cause__.orig, psycopg.errors.AdminShutdown)
    assert ours.get_study_name_from_id(study_id) == "s"  # no wait allowed: the pre-ping did it
    ours.engine.dispose()
    plain.engine.dispose()


def test_a_study_asks_and_tells_through_a_refusal(
    postgres_url: str, refuse_connections: Refuse
) -> None:
    storage = ReconnectingStorage(postgres_url, Reconnect(postgres_url, 30))
    study = optuna.create_study(study_name="s", storage=storage)
    trial = study.ask()
    refused, over = threading.Event(), threading.Event()

    def outage() -> None:
        with refuse_connections(postgres_url):
            refused.set()
            over.wait(2.0)

    thread = threading.Thread(target=outage)
    thread.start()
    assert refused.wait(30)
    start = time.monotonic()
    try:
        study.tell(trial, 1.5)
        study.ask()
    finally:
        over.set()
        thread.join()
    assert time.monotonic() - start > 1.0  # it waited for the database
    stored = optuna.load_study(study_name="s", storage=postgres_url).trials
    assert [t.state.name for t in stored] == ["COMPLETE", "RUNNING"]
    storage.engine.dispose()


def test_a_tell_whose_commit_went_through_but_whose_answer_was_lost_succeeds(
    postgres_url: str, answer_lost: AnswerLost
) -> None:
    """The connection drops after the server committed: the retry finds the trial finished in
    the state it was told, which is success, not Optuna's "finished trial" error."""
    storage = ReconnectingStorage(postgres_url, Reconnect(postgres_url, 30))
    study = optuna.create_study(study_name="s", storage=storage)
    trial = study.ask()
    with answer_lost(storage.engine, "UPDATE trials SET state") as lost:
        study.tell(trial, 2.5)
    assert lost == [True]
    (stored,) = optuna.load_study(study_name="s", storage=postgres_url).trials
    assert (stored.state, stored.value) == (optuna.trial.TrialState.COMPLETE, 2.5)
    storage.engine.dispose()


# -- the driver ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_search_rides_out_an_outage_with_nothing_lost_or_measured_twice(
    postgres_url: str, refuse_connections: Refuse, outages: list[Outage], caplog
) -> None:
    evaluator = Outage(refuse_connections, postgres_url, at=2, seconds=3.0)
    outages.append(evaluator)
    with open_store(postgres_url, reconnect_wait_s=60) as store:
        result = run_search(config(), store, InlineExecutor(evaluator))
    evaluator.end()

    lost = [r for r in caplog.records if r.getMessage().startswith("lost the connection")]
    assert len(lost) == 1  # the driver met the outage, and waited it out

    keys = measured(postgres_url)
    assert result.finished == 3 and len(keys) == 4  # the reference beside the budget
    assert sorted(keys) == sorted({c.key for c in evaluator.candidates})  # each measured once
    assert len(evaluator.candidates) == 4
    assert running(postgres_url) == []


@pytest.mark.slow
def test_a_search_stops_in_one_line_past_the_bound_and_the_same_call_resumes_it(
    postgres_url: str, refuse_connections: Refuse, outages: list[Outage]
) -> None:
    evaluator = Outage(refuse_connections, postgres_url, at=2)
    outages.append(evaluator)
    with open_store(postgres_url, reconnect_wait_s=1.5) as store:
        with pytest.raises(DatabaseUnavailableError) as raised:
            run_search(config(), store, InlineExecutor(evaluator))
        evaluator.end()
    message = str(raised.value)
    assert "\n" not in message
    assert f"{sa.make_url(postgres_url).database}' did not answer for 1.5 s" in message
    assert "run the same command again to resume" in message
    before = measured(postgres_url)
    assert len(before) == 1  # the second result came back while the database was away

    again = FakeEvaluator()
    with open_store(postgres_url) as store:
        result = run_search(config(), store, InlineExecutor(again))

    keys = measured(postgres_url)
    assert result.finished == 3 and len(keys) == 4 and len(set(keys)) == 4
    assert not set(before) & {c.key for c in again.candidates}  # what was stored is kept
    assert running(postgres_url) == []
    assert result.counts.retried == 1  # the trial in flight, failed once its beat went stale


# -- a real search while the server restarts ------------------------------------------------------


@pytest.mark.slow
def test_tinytune_search_rides_out_a_server_restart(
    postgres_url: str, restart_postgres: Callable[[], None], tmp_path: Path
) -> None:
    """The issue's run: ``tinytune search --storage postgresql+psycopg://...`` with Ray
    workers, the server restarted while it runs (here once its first trial is stored)."""
    command = [
        sys.executable,
        "-c",
        "import sys; from tinytune.cli.main import main; sys.exit(main())",
        "search",
        "--storage",
        postgres_url,
        "--study",
        "restart",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--workers",
        "1",
        "--lr",
        "0.05",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "COLUMNS": "200"}
    engine = sa.create_engine(postgres_url)

    def trials_stored() -> int:
        try:
            with engine.connect() as connection:
                return int(
                    connection.execute(
                        sa.text("SELECT count(*) FROM trials WHERE state = 'COMPLETE'")
                    ).scalar_one()
                )
        except sa.exc.SQLAlchemyError:  # no table yet
            return 0

    def search() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
        )

    try:
        with subprocess.Popen(
            command,
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as driver:
            deadline = time.monotonic() + 300
            while trials_stored() < 1 and driver.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            engine.dispose()
            assert driver.poll() is None, "the search ended before the restart"
            restart_postgres()
            out, err = driver.communicate(timeout=600)
        if driver.returncode == 2:  # stopped in one line: the same command resumes
            errors = [line for line in err.splitlines() if line.startswith("tinytune: error:")]
            assert len(errors) == 1 and "same command" in errors[0], err
            assert "Traceback" not in err
            rerun = search()
            out, err = rerun.stdout, rerun.stderr
            assert rerun.returncode == 0, err
        assert driver.returncode in (0, 2), err
        assert "Traceback" not in err
        assert "Pareto front of study 'restart'" in out
    finally:
        engine.dispose()

    keys = measured(postgres_url, "restart")
    assert len(keys) == 3 and len(set(keys)) == 3  # the budget and the reference, each once
    assert running(postgres_url, "restart") == []


# -- reading a study: pareto, report, export ----------------------------------------------------


def test_reading_a_study_rides_out_a_restart(
    postgres_url: str, refuse_connections: Refuse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tinytune.load`` (what ``pareto``, ``report`` and ``export`` read a study through),
    whose database starts refusing connections after it was opened, as in a restart, answers
    once it is back, as a search does."""
    import tinytune
    import tinytune.stored as studies

    with open_store(postgres_url) as store:
        run_search(config(), store, InlineExecutor(FakeEvaluator()))
    before = tinytune.load("s", postgres_url)
    refusing, over = threading.Event(), threading.Event()
    thread = threading.Thread()
    waited: list[float] = []
    real = studies._optuna_study

    def restart() -> None:
        with refuse_connections(postgres_url):
            refusing.set()
            over.wait(2.0)

    def during_a_restart(store: object, name: str) -> object:
        nonlocal thread
        thread = threading.Thread(target=restart)
        thread.start()
        assert refusing.wait(30)
        started = time.monotonic()
        loaded = real(store, name)  # type: ignore[arg-type]
        waited.append(time.monotonic() - started)
        return loaded

    monkeypatch.setattr(studies, "_optuna_study", during_a_restart)
    try:
        during = tinytune.load("s", postgres_url)
    finally:
        over.set()
        if thread.is_alive():
            thread.join()
    assert waited and waited[0] >= 1.0  # it waited for the server rather than failing
    assert [p.candidate_key for p in during.front] == [p.candidate_key for p in before.front]
    assert during.reference is not None and before.reference is not None
    assert during.reference.candidate_key == before.reference.candidate_key
