"""Dead drivers: the heartbeats of a driver's own trials, and the trials of drivers that died.

Dead drivers are found by Optuna's own mechanism: the storage's heartbeat. Each driver beats for
the trials it runs (:class:`Heartbeats`, one thread); any driver sharing the study fails the
trials whose beat is older than the grace period (:func:`optuna.storages.fail_stale_trials`),
releases their claims in tinytune's tables and has
:class:`optuna.storages.RetryHeartbeatStaleTrialCallback` enqueue them again (at most
:data:`MAX_RETRY` times). A trial of a live driver is never touched. A driver killed between
creating a trial and its first beat leaves a trial that Optuna never finds stale (it has no
heartbeat at all): so a driver records one beat for any trial of another driver still running a
grace period and a heartbeat after it first saw it (:meth:`StaleTrials.fail_stale`), and the
trial goes stale a grace period later unless its own driver beats. A live driver's trial only
gets one more beat; a dead one's failure can come up to a grace period later than without it;
and a running trial of a client that never beats (``study.ask()`` from a notebook on the same
study) is failed like a dead driver's.

A database server that restarts is ridden out: Optuna's storage shares the store's retries
(:mod:`tinytune.search.study.storage`), and a driver beats for its own trials before it looks for
stale ones, so that heartbeats missed while the server was away do not fail its live trials.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from tinytune.errors import DatabaseRefusedError, DatabaseUnavailableError

__all__ = ["MAX_RETRY", "Heartbeats", "StaleTrials"]

log = logging.getLogger(__name__)

MAX_RETRY = 2
"""Times a trial whose driver died is enqueued again."""


class Heartbeats:
    """One thread that records a heartbeat, every interval, for each trial this driver runs."""

    def __init__(self, storage: Any, interval_s: float) -> None:
        self._storage, self._interval = storage, interval_s
        self._trials: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="tinytune-heartbeat", daemon=True)
        self._thread.start()

    def add(self, trial_id: int) -> None:
        self._storage.record_heartbeat(trial_id)
        with self._lock:
            self._trials.add(trial_id)

    def beat(self) -> None:
        """Record a heartbeat now for each trial this driver runs."""
        for trial_id in self.trials():
            self._record(trial_id)

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self._trials.discard(trial_id)

    def trials(self) -> set[int]:
        """The ids of the trials this driver beats for."""
        with self._lock:
            return set(self._trials)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                trials = list(self._trials)
            for trial_id in trials:
                self._record(trial_id)

    def _record(self, trial_id: int) -> None:
        try:
            self._storage.record_heartbeat(trial_id)
        except (DatabaseUnavailableError, DatabaseRefusedError) as e:  # the driver stops on it
            log.info("cannot record the heartbeat of trial %d: %s", trial_id, e)
        except Exception as e:  # a missed beat is retried at the next interval
            log.warning("cannot record the heartbeat of trial %d: %s", trial_id, e)


class StaleTrials:
    """The running trials of a study that no live driver beats for (see the module docstring).

    Args:
        study: the Optuna study.
        storage: its storage, with the heartbeat (the one ``heartbeats`` records on).
        heartbeats: this driver's own heartbeats.
        heartbeat_s, grace_s: the heartbeat's interval and the grace period after which a
            trial without a beat is stale.
    """

    def __init__(
        self, study: Any, storage: Any, heartbeats: Heartbeats, heartbeat_s: float, grace_s: float
    ) -> None:
        self._study, self._storage, self._heartbeats = study, storage, heartbeats
        self._heartbeat_s, self._grace_s = heartbeat_s, grace_s
        self._checked = -float("inf")
        self._idle_since: float | None = None
        self._first_seen: dict[int, float] = {}  # others' running trials: trial id → when
        self._adopted: set[int] = set()

    def fail_stale(self, force: bool = False) -> bool:
        """Fail the trials of drivers that stopped beating, each retried (at most once a
        heartbeat unless ``force``); whether it checked. This driver's own trials get a beat
        first: the heartbeat thread may not have beaten since the database came back from a
        restart."""
        import optuna

        now = time.monotonic()
        if not (force or now - self._checked >= self._heartbeat_s):
            return False
        self._checked = now
        self._heartbeats.beat()
        optuna.storages.fail_stale_trials(self._study)
        self._adopt_unbeaten(now)
        return True

    def _adopt_unbeaten(self, now: float) -> None:
        """Record one heartbeat for each running trial of another driver that stayed running
        a grace period and a heartbeat after this driver first saw it (see the module
        docstring)."""
        import optuna

        states = (optuna.trial.TrialState.RUNNING,)
        running = {t._trial_id for t in self._study.get_trials(deepcopy=False, states=states)}
        mine = self._heartbeats.trials()
        self._first_seen = {t: self._first_seen.get(t, now) for t in running - mine}
        wait = self._grace_s + self._heartbeat_s
        for trial_id, seen in self._first_seen.items():
            if now - seen >= wait and trial_id not in self._adopted:
                try:
                    self._storage.record_heartbeat(trial_id)
                except (DatabaseUnavailableError, DatabaseRefusedError):  # the driver stops
                    raise
                except Exception as e:  # e.g. a locked SQLite file: tried again next beat
                    log.warning("cannot record a heartbeat for trial %d: %s", trial_id, e)
                    continue
                self._adopted.add(trial_id)

    def left_running(self) -> bool:
        """Whether trials of other drivers are left running with no claim (one died after
        storing its result, or before its first heartbeat): True for at most two grace
        periods and four checks, while they are adopted, go stale and are retried. A check
        comes every heartbeat or loop pass (up to 2 s), and SQLite's clock has whole seconds."""
        if not self.running():
            self._idle_since = None
            return False
        now = time.monotonic()
        self._idle_since = self._idle_since or now
        limit = 2 * self._grace_s + 4 * (self._heartbeat_s + 2)
        return now - self._idle_since < limit

    def running(self) -> list[int]:
        """Numbers of the study's running trials (of any driver)."""
        import optuna

        states = (optuna.trial.TrialState.RUNNING,)
        return [t.number for t in self._study.get_trials(deepcopy=False, states=states)]
