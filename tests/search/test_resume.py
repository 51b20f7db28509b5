"""A search killed with SIGKILL mid-run and resumed: nothing stored is lost or changed, no
candidate is trained twice, and the study finishes its budget."""

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

TRIALS = 5


def _search(url: str, ckpt: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tinytune.cli.main",
        "search",
        "--inline",
        "--storage",
        url,
        "--study",
        "k",
        "--weights",
        str(ckpt),
        "--trials",
        str(TRIALS),
        "--epochs",
        "1",
        "--lr",
        "0.05",
        "--batch-size",
        "32",
        *extra,
    ]


@pytest.mark.slow
def test_sigkill_then_resume(tmp_path: Path, tiny_checkpoint: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        _search(url, tiny_checkpoint),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        before: list = []
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if (tmp_path / "db.sqlite").exists():
                try:
                    with open_store(url) as store:
                        before = store.evaluations("k")
                except Exception:  # the schema may still be being created
                    continue
            if len(before) >= 2:
                break
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert len(before) >= 2, "the search stored no evaluation in time"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    with open_store(url) as store:
        before = store.evaluations("k")
    study = optuna.load_study(study_name="k", storage=url)
    running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert len(_tuned(before)) < TRIALS

    done = subprocess.run(
        _search(url, tiny_checkpoint, "--resume"), env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    with open_store(url) as store:
        after = store.evaluations("k")
    assert after[: len(before)] == before  # unchanged, same ids and values
    # the study finished its budget, and its reference (its schedule twins stored beside it)
    assert len(_tuned(after)) == TRIALS + 1
    measured = [e.candidate_key for e in after if e.status == "ok"]
    assert len(measured) == len(set(measured))  # no candidate trained twice
    study = optuna.load_study(study_name="k", storage=url)
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    retried = {t.system_attrs.get("failed_trial") for t in study.trials} - {None}
    assert retried == {t.number for t in running}  # RetryHeartbeatStaleTrialCallback, by heartbeat


def _tuned(evaluations: list) -> list:
    """The evaluations of fine-tunes, not of the schedule twins that share them."""
    return [e for e in evaluations if "twin_of" not in (e.details or {})]
