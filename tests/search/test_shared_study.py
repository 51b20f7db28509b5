"""Several drivers on one study, as Optuna users scale out: started at once they both finish,
no trial of a live driver is failed, and the study ends with exactly its budget of measured
candidates, none measured twice; a driver killed with SIGKILL has its trials retried by another
once its heartbeat is stale. On SQLite and on the real PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tinytune.db import open_store
from tinytune.evaluators import EvaluationResult, FinetuneTask

DRIVER = Path(__file__).with_name("drivers.py")
TRIALS = 6


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    return request.getfixturevalue("postgres_url")


def _driver(url: str, seed: int, seconds: float = 0.5) -> subprocess.Popen:
    args = ["--trials", str(TRIALS), "--seed", str(seed), "--seconds", str(seconds)]
    return subprocess.Popen(
        [sys.executable, str(DRIVER), url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _measured(url: str, twins: bool = False) -> list[str]:
    """Fine-tuned candidates on the budget (with ``twins``, their schedule twins too, stored
    beside it); the reference, measured beside it, must be there exactly once."""
    from tinytune.search.config.search_config import reference_candidate

    reference = reference_candidate("ofa-proxyless-w0.35").key
    with open_store(url) as store:
        stored = store.evaluations("shared", fidelity="measured")
    keys = [e.candidate_key for e in stored]
    assert keys.count(reference) == 1
    assert len(set(keys)) == len(keys)  # none stored twice, twins included
    return [
        e.candidate_key
        for e in stored
        if e.candidate_key != reference and (twins or "twin_of" not in (e.details or {}))
    ]


@pytest.mark.slow
def test_two_drivers_started_at_once_share_the_budget(url: str) -> None:
    with open_store(url):
        pass  # the schema exists before both start, as after any first run
    drivers = [_driver(url, seed) for seed in (0, 1)]
    outputs = [d.communicate(timeout=300) for d in drivers]
    for d, (_, err) in zip(drivers, outputs, strict=True):
        assert d.returncode == 0, err
        assert "Traceback" not in err, err
    measured = _measured(url)
    assert len(measured) == TRIALS
    assert len(set(measured)) == TRIALS  # none measured twice
    study = optuna.load_study(study_name="shared", storage=url)
    states = {t.state for t in study.trials}
    assert optuna.trial.TrialState.FAIL not in states  # no live driver's trial was failed
    assert optuna.trial.TrialState.RUNNING not in states
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    reference = [t for t in complete if t.user_attrs.get("reference")]
    # one driver claims the new study's setup: the reference and the baselines are enqueued
    # once, though both drivers found the study new at the same moment
    from tinytune.search.config.search_config import BASELINE_PRESETS

    assert len(reference) == 1
    enqueued = [
        t
        for t in study.trials
        if "fixed_params" in t.system_attrs
        and "mutant_of" not in t.user_attrs
        and "twin_of" not in t.user_attrs
    ]  # the study's set-up, not the mutants and twins each driver enqueues for itself
    assert len(enqueued) == 1 + len(BASELINE_PRESETS)
    others = {t.user_attrs["candidate_key"] for t in complete if t not in reference}
    assert others == set(_measured(url, twins=True))


@pytest.mark.slow
def test_a_killed_driver_has_its_trials_retried_by_the_other(url: str) -> None:
    with open_store(url):
        pass
    slow = _driver(url, seed=0, seconds=30.0)  # still fine-tuning when it is killed
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with open_store(url) as store:
                if store.measured_budget_spent("shared")[1]:
                    break  # it holds a claim: a fine-tune in flight
            time.sleep(0.2)
        else:
            pytest.fail("the first driver claimed no fine-tune in time")
        other = _driver(url, seed=1)
        time.sleep(1.0)
        os.killpg(slow.pid, signal.SIGKILL)
        slow.wait(timeout=30)
        out, err = other.communicate(timeout=300)
    finally:
        for proc in (slow, locals().get("other")):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert other.returncode == 0, err
    assert "Traceback" not in err, err
    measured = _measured(url)
    assert len(measured) == TRIALS and len(set(measured)) == TRIALS
    study = optuna.load_study(study_name="shared", storage=url)
    failed = study.get_trials(states=(optuna.trial.TrialState.FAIL,))
    assert len(failed) == 1  # the killed driver's fine-tune, failed once its beat was stale
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback
    retries = [t for t in study.trials if retry.retried_trial_number(t) == failed[0].number]
    assert len(retries) == 1 and retries[0].params == failed[0].params
    assert retries[0].state == optuna.trial.TrialState.COMPLETE
    assert "retried 1" in out
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))


@pytest.mark.parametrize("which", ["preset", "twin"])
def test_a_trial_another_driver_finished_between_ask_and_draw_is_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    """Between a driver's ask and its draw of the parameters, another driver may finish the
    trial: it failed it as stale when this one's heartbeat came late on a busy machine, or
    (SQLite) it popped the same enqueued trial. The driver lets it go and carries on, with no
    traceback; the study keeps the other driver's verdict."""
    from tinytune.search import InlineExecutor, run_search
    from tinytune.search.study.adapter import StudyAdapter

    from .fakes import FakeEvaluator, search_config

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    other = optuna.storages.RDBStorage(url)  # the other driver's connection
    ask, failed = StudyAdapter.ask, []

    def ask_then_lose(self: StudyAdapter) -> optuna.trial.Trial:
        trial = ask(self)
        twin = "twin_of" in trial.user_attrs
        if not failed and (twin if which == "twin" else trial.number == 1):
            other.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
            failed.append(trial.number)
        return trial

    monkeypatch.setattr(StudyAdapter, "ask", ask_then_lose)
    config = search_config(ckpt, trials=8, mutate=0.5)
    with caplog.at_level("INFO"), open_store(url) as store:
        result = run_search(config, store, InlineExecutor(FakeEvaluator()))
    assert len(failed) == 1
    assert f"trial {failed[0]} was finished by another driver before it was drawn" in (
        caplog.messages
    )
    study = optuna.load_study(study_name="s", storage=url)
    lost = study.trials[failed[0]]
    assert lost.state == optuna.trial.TrialState.FAIL and not lost.params
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert result.counts.measured == config.trials  # the budget spent on the others


@pytest.mark.parametrize("reproducible", [True, False])
def test_a_reproducible_run_warns_once_when_another_driver_runs_trials_of_its_study(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, reproducible: bool
) -> None:
    """``reproducible`` orders one driver's results; a second driver on the study still
    changes which trials each one measures, and the run says so, once. A run without it, or
    alone on its study, says nothing."""
    from tinytune.search import InlineExecutor, run_search

    from .fakes import FakeEvaluator, search_config

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    started: list[optuna.trial.Trial] = []

    class BesideAnother(FakeEvaluator):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            if len(self.candidates) == 2:  # the other driver starts a trial of its own
                started.append(optuna.load_study(study_name="s", storage=url).ask())
            elif len(self.candidates) == 5:  # and finishes it
                optuna.load_study(study_name="s", storage=url).tell(started[0], [0.5, 1.0, 1.0])
            return super().__call__(task)

    config = search_config(ckpt, trials=6, reproducible=reproducible)
    with caplog.at_level("WARNING"), open_store(url) as store:
        run_search(config, store, InlineExecutor(BesideAnother()))
    warned = [m for m in caplog.messages if "another driver runs trials of this study" in m]
    assert warned == (
        [
            f"reproducible=True: another driver runs trials of this study (trial "
            f"{started[0].number}); which trials each driver measures depends on their "
            "timing, so another run may measure other candidates"
        ]
        if reproducible
        else []
    )
    caplog.clear()
    alone = search_config(ckpt, trials=4, reproducible=True, study_name="t")
    with caplog.at_level("WARNING"), open_store(url) as store:
        run_search(alone, store, InlineExecutor(FakeEvaluator()))
    assert not [m for m in caplog.messages if "another driver" in m]
