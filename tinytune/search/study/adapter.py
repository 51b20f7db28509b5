"""The Optuna side of a search: the study a driver works on, its sampler, and its trials.

:class:`StudyAdapter` opens (or creates) the study, checks that it was stored with the search
space the run asks for (:mod:`tinytune.search.study.space_checks`), enqueues a new one's opening
(the reference and the baselines, :mod:`tinytune.search.proposals.presets`), and asks and tells
trials; the names of the attributes it gives them are :class:`tinytune.search.study.attrs.Attr`.
The heartbeats of a driver's own trials and the trials of drivers that died are
:mod:`tinytune.search.study.heartbeats`.
"""

from __future__ import annotations

import datetime
import logging
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from tinytune.db import Store
from tinytune.errors import flag
from tinytune.samplers import EARLY_STARTUP_TRIALS
from tinytune.search.config.search_config import (
    DIRECTIONS,
    OBJECTIVES,
    SearchConfig,
    check_new_study_name,
)
from tinytune.search.study.attrs import Attr
from tinytune.search.study.heartbeats import MAX_RETRY, Heartbeats, StaleTrials
from tinytune.search.study.space_checks import (
    another_space,
    check_stored_space,
    foreign_study,
    nothing_to_resume,
    space_difference,
)
from tinytune.search.study.study_space import StudySpace

# Attr, MAX_RETRY, Heartbeats and check_stored_space are re-exported: they were defined here
__all__ = [
    "EARLY_STARTUP_TRIALS",
    "MAX_RETRY",
    "Attr",
    "Heartbeats",
    "StudyAdapter",
    "check_stored_space",
    "make_sampler",
]

T = TypeVar("T")
log = logging.getLogger(__name__)

SETUP_WAIT_S = 30.0
"""How long a driver waits for the driver that claimed a new study's setup to store its space
before it takes the setup over."""


def make_sampler(config: SearchConfig) -> Any:
    """Optuna's sampler named by ``config.sampler`` (:data:`tinytune.samplers.REGISTRY`),
    seeded. Every one of them reads the budgets from the constraints each trial carries
    (:meth:`StudyAdapter.constrain`): a trial over a budget is infeasible, ranked below every
    feasible one."""
    from tinytune.samplers import make_sampler as registered

    return registered(config.sampler, config.seed)


class StudyAdapter:
    """The study a driver works on: asks, tells, and the attributes that describe trials."""

    def __init__(
        self,
        config: SearchConfig,
        store: Store,
        opening: Sequence[tuple[dict[str, Any], dict[str, Any]]] = (),
    ) -> None:
        """Open the study of ``config`` (made, or continued where it exists); a new one stores
        its space and queues the trials of ``opening`` (parameters and attributes), in order.
        """
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        self.config, self.store = config, store
        self.retried = 0
        # the run's start by this machine's clock (Optuna's trial times are local, naive)
        self.started = datetime.datetime.now()
        self.shared = False  # another driver was seen running trials of the study
        self.storage = self._storage(config)
        self._retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)
        names = optuna.get_all_study_names(self.storage)
        if config.study_name not in names:
            if config.resume:
                raise nothing_to_resume(config, names)
            check_new_study_name(config.study_name)
        self.study = optuna.create_study(
            study_name=config.study_name,
            storage=self.storage,
            directions=list(DIRECTIONS),
            sampler=make_sampler(config),
            load_if_exists=True,
        )
        stored = self.study.user_attrs.get(Attr.SPACE)
        space = StudySpace.from_config(config).to_attrs()
        if stored is None and not self._sets_up():  # another driver is setting it up
            stored = self._space_set_up()
        if stored is None:
            if (foreign := foreign_study(self.study)) is not None:
                raise foreign
            self.study.set_user_attr(Attr.SPACE, space)
            self.study.set_metric_names(list(OBJECTIVES))
            for params, attrs in opening:
                self.enqueue(params, attrs)
        elif diff := space_difference(stored, space):
            raise another_space(config, diff, self.study.user_attrs.get(Attr.CHECKPOINT))
        if config.checkpoint:  # the weights this run searches with, for export
            self.study.set_user_attr(Attr.CHECKPOINT, str(config.checkpoint))
        self.heartbeats = Heartbeats(self.storage, config.heartbeat_s)
        self.stale = StaleTrials(
            self.study, self.storage, self.heartbeats, config.heartbeat_s, config.grace_s
        )

    def _sets_up(self) -> bool:
        """Whether this driver sets up the new study (stores its space and enqueues its
        reference and baselines): the first of the drivers that start it at one moment, by an
        atomic claim in tinytune's store on the study's name and Optuna's id of it (a study
        deleted and made again is set up again)."""
        setup = f"{self.config.study_name}#{self.study._study_id}"
        return self.store.claim_study_setup(setup, uuid.uuid4().hex)

    def _space_set_up(self) -> dict[str, Any] | None:
        """The space the driver that claimed the setup stores, once it has (None when it has
        not within :data:`SETUP_WAIT_S`: it died, and this driver sets the study up)."""
        deadline = time.monotonic() + SETUP_WAIT_S
        while time.monotonic() < deadline:
            stored = self.storage.get_study_user_attrs(self.study._study_id).get(Attr.SPACE)
            if stored is not None:
                return cast(dict[str, Any], stored)
            time.sleep(0.2)
        log.warning(
            "the driver that claimed the setup of study %r did not store its space within "
            "%g s; setting it up here",
            self.config.study_name,
            SETUP_WAIT_S,
        )
        return None

    def _storage(self, config: SearchConfig) -> Any:
        """Optuna's storage with the heartbeat, retried while the server is away as the store
        is. Drivers started at once on an empty database race to create Optuna's tables; the
        loser finds them made and opens them."""
        import sqlalchemy as sa

        from tinytune.search.study.storage import ReconnectingStorage

        def open_storage() -> Any:
            return ReconnectingStorage(
                self.store.url,
                self.store.reconnect,
                heartbeat_interval=config.heartbeat_s,
                grace_period=config.grace_s,
                heartbeat_stale_trial_callback=self._on_stale,
            )

        # Optuna creates its tables one statement at a time (no lock on SQLite), so the loser
        # may find some made and others not: it waits for the winner, up to half a minute
        deadline = time.monotonic() + 30.0
        delay = 0.2
        while time.monotonic() < deadline:
            try:
                return open_storage()
            except (sa.exc.IntegrityError, sa.exc.OperationalError, sa.exc.ProgrammingError):
                log.info("another driver is creating Optuna's tables; opening them again")
                time.sleep(delay)
                delay = min(2 * delay, 2.0)
        try:
            return open_storage()
        except sa.exc.SQLAlchemyError as e:
            from tinytune.db.engine import translate_error

            raise translate_error("cannot open Optuna's tables in", self.store.url, e) from e

    def close(self) -> None:
        self.heartbeats.close()
        self.storage.engine.dispose()

    # -- dead drivers --------------------------------------------------------------------------

    def _on_stale(self, study: Any, trial: Any) -> None:
        """A trial whose driver stopped beating was failed: release its claim, retry it."""
        released = self.store.release_claims(self.config.study_name, [trial.number])
        log.warning(
            "trial %d of a driver that stopped beating was failed (%d claim released); "
            "retrying it",
            trial.number,
            released,
        )
        self._retry(study, trial)  # constrained afresh when proposed again
        self.retried += 1

    def watch(self, force: bool = False) -> None:
        """Fail the trials of drivers that stopped beating, each retried (at most once a
        heartbeat unless ``force``; :meth:`StaleTrials.fail_stale`); with ``reproducible``,
        warn once when another driver runs trials of the study meanwhile (looked for as often:
        not on every turn of the loop)."""
        checked = self.stale.fail_stale(force)
        if checked and self.config.reproducible and not self.shared:
            others = self.others_started(self.started)
            if others:
                self.shared = True
                log.warning(
                    flag("reproducible", True)
                    + f": another driver runs trials of this study (trial {others[0]}); which "
                    "trials each driver measures depends on their timing, so another run may "
                    "measure other candidates"
                )

    def left_running(self) -> bool:
        """Whether trials of other drivers are left running with no claim, for a while
        (:meth:`StaleTrials.left_running`)."""
        return self.stale.left_running()

    def others_started(self, since: datetime.datetime) -> list[int]:
        """Numbers of the running trials that another driver started at ``since`` or later (by
        its clock): a live driver beside this one (one that died before ``since`` left none)."""
        import optuna

        mine = self.heartbeats.trials()
        running = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        return [
            t.number
            for t in running
            if t._trial_id not in mine
            and t.datetime_start is not None
            and t.datetime_start >= since
        ]

    # -- trials --------------------------------------------------------------------------------

    def waiting(self) -> list[Any]:
        """Enqueued trials (baselines, retries, ladder siblings), oldest first."""
        import optuna

        trials = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        return sorted(trials, key=lambda t: t.number)

    def ask(self) -> Any:
        with warnings.catch_warnings():  # Optuna expects Study.optimize; Heartbeats beats here
            warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
            trial = self.study.ask()
        self.heartbeats.add(trial._trial_id)
        return trial

    def suggest(self, trial: Any, draw: Callable[[Any], T]) -> T | None:
        """``draw(trial)``: the candidate a trial just asked for selects, its parameters
        sampled or read from the queue. None where another driver finished the trial between
        the ask and the draw: that driver failed it when this one's heartbeat came late (the
        machine busy), and the retry it enqueued carries the candidate on; or (SQLite has no
        ``SELECT ... FOR UPDATE``) both drivers popped the same enqueued trial, and that one
        tells it. The trial is let go, and the driver carries on with the next."""
        import optuna

        try:
            return draw(trial)
        except optuna.exceptions.UpdateFinishedTrialError:
            log.info("trial %d was finished by another driver before it was drawn", trial.number)
            self.let_go(trial)
            return None

    def choices(self, name: str) -> tuple[Any, ...] | None:
        """The choices of categorical parameter ``name`` as the study's trials sampled it
        (Optuna keeps a categorical parameter's choices for the whole study); None before any
        trial sampled it."""
        for trial in self.study.get_trials(deepcopy=False):
            distribution = trial.distributions.get(name)
            if distribution is not None:
                return tuple(distribution.choices)
        return None

    def enqueue(self, params: dict[str, Any], attrs: dict[str, Any]) -> None:
        self.study.enqueue_trial(params, user_attrs=attrs)

    def study_attr(self, name: str) -> Any:
        """The study's user attribute ``name``; None when it has none."""
        return self.study.user_attrs.get(name)

    def set_study_attr(self, name: str, value: Any) -> None:
        self.study.set_user_attr(name, value)

    def note(self, trial: Any, **attrs: Any) -> None:
        """Describe a trial for optuna-dashboard (never read back by the driver).

        A trial that another driver has finished meanwhile keeps what it has: that driver
        failed it when its heartbeat went stale, or (SQLite has no ``SELECT ... FOR UPDATE``)
        both drivers popped the same enqueued trial. The measurement is stored all the same,
        and the trial that retries the candidate is told from it.
        """
        import optuna

        try:
            for name, value in attrs.items():
                trial.set_user_attr(name, value)
        except optuna.exceptions.UpdateFinishedTrialError:
            log.info("trial %d was finished by another driver; its attributes stay", trial.number)

    def enqueued(self, trial: Any) -> bool:
        """Whether ``trial`` was enqueued with fixed parameters (a baseline, the reference, a
        mutant, a bracket's sibling) rather than proposed by the sampler."""
        return "fixed_params" in self.storage.get_trial_system_attrs(trial._trial_id)

    def constrain(self, trial: Any, violations: Sequence[float]) -> None:
        """Give the samplers how far a trial exceeds each budget (> 0) or meets it (<= 0), as
        the one list that Optuna's samplers (``trial.constraints``) and optuna-dashboard (which
        marks infeasible trials) both read. ``Trial.set_constraint`` writes one attribute per
        budget, which optuna-dashboard 0.21 does not read; ``constraints_func`` is deprecated.
        Overwrites what a retried trial was copied with."""
        import optuna

        values = [float(v) for v in violations]
        try:
            self.storage.set_trial_system_attr(trial._trial_id, Attr.CONSTRAINTS, values)
        except optuna.exceptions.UpdateFinishedTrialError:
            log.info("trial %d was finished by another driver; its constraints stay", trial.number)

    def let_go(self, trial: Any) -> None:
        """Leave a trial to the driver that holds its claim: no more heartbeats from here."""
        self.heartbeats.discard(trial._trial_id)

    def tell_values(self, trial: Any, values: tuple[float, float, float]) -> None:
        self.study.tell(trial, list(values), skip_if_finished=True)
        self.heartbeats.discard(trial._trial_id)

    def tell_pruned(self, trial: Any, reason: str) -> None:
        import optuna

        self.note(trial, **{Attr.PRUNED_REASON: reason})
        self.study.tell(trial, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
        self.heartbeats.discard(trial._trial_id)

    def tell_failed(self, trial: Any, error: str | None = None) -> None:
        import optuna

        if error is not None:
            self.note(trial, **{Attr.ERROR: error[:500]})
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        self.heartbeats.discard(trial._trial_id)
