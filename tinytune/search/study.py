"""The Optuna side of a search: the study, its trials and every attribute name tinytune gives
them, in one place.

A study carries the search space it was created with (``tinytune.space``) and the weights its
last run searched with (``tinytune.checkpoint``, for export). A trial carries what
optuna-dashboard shows about its candidate (key, predicted cost, budgets, fidelity, the reason
it was pruned); the driver writes these and never reads them back.

Dead drivers are found by Optuna's own mechanism: the storage's heartbeat. Each driver beats for
the trials it runs (:class:`Heartbeats`, one thread); any driver sharing the study fails the
trials whose beat is older than the grace period (:func:`optuna.storages.fail_stale_trials`),
releases their claims in tinytune's tables and has
:class:`optuna.storages.RetryHeartbeatStaleTrialCallback` enqueue them again. A trial of a live
driver is never touched. A driver killed between creating a trial and its first beat leaves a
trial that Optuna never finds stale (it has no heartbeat at all): so a driver records one beat
for any trial of another driver still running a grace period and a heartbeat after it first
saw it (:meth:`StudyAdapter.fail_stale`), and the trial goes stale a grace period later unless
its own driver beats. A live driver's trial only gets one more beat; a dead one's failure can
come up to a grace period later than without it; and a running trial of a client that never
beats (``study.ask()`` from a notebook on the same study) is failed like a dead driver's.

A database server that restarts is ridden out: Optuna's storage shares the store's retries
(:mod:`tinytune.search.storage`), and a driver beats for its own trials before it looks for
stale ones, so that heartbeats missed while the server was away do not fail its live trials.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tinytune.db import Store
from tinytune.errors import DatabaseUnavailableError, StorageError
from tinytune.search.config import (
    DIRECTIONS,
    OBJECTIVES,
    SearchConfig,
    check_new_study_name,
)

__all__ = ["MAX_RETRY", "Attr", "Heartbeats", "StudyAdapter"]

log = logging.getLogger(__name__)

MAX_RETRY = 2
"""Times a trial whose driver died is enqueued again."""


class Attr:
    """Names of the study's and the trials' user attributes (and of the system attributes
    tinytune reads or writes, marked as such)."""

    SPACE = "tinytune.space"
    CHECKPOINT = "tinytune.checkpoint"
    CANDIDATE_KEY = "candidate_key"
    CANDIDATE = "candidate"
    MEMORY = "memory_bytes"
    FLASH = "flash_bytes"
    LATENCY = "latency_s"
    LATENCY_PROFILE = "latency_profile"
    MCUNETV3_EXTRA = "mcunetv3_extra_bytes"
    SRAM_BUDGET = "sram_budget_bytes"
    FIDELITY = "fidelity"
    TEST_ACCURACY = "test_accuracy"
    WALL_TIME = "wall_time_s"
    ERROR = "error"
    HYPERVOLUME = "hypervolume"
    PRUNED_REASON = "pruned_reason"
    REUSED_FROM = "reused_from_trial"
    BRACKET = "ladder_bracket"
    PROMOTED = "promoted"
    PROXY_ACCURACY = "proxy_accuracy"
    SCREEN_ACCURACY = "short_val_accuracy"  # the short fine-tune's (--halving)
    REFERENCE = "reference"
    LR_CALIBRATION = "lr_calibration"  # the study's rate per scheme family (search/lr.py)
    HYPERVOLUME_GRAPH = "tinytune-hypervolume"
    MUTANT_OF = "mutant_of"  # the key of the front point a mutant was made from
    FAILED_TRIAL = "failed_trial"  # system attribute of a retried trial (Optuna's callback)
    CONSTRAINTS = (
        "constraints"  # system attribute: budget violations, in budgets.CONSTRAINTS order
    )


EARLY_STARTUP_TRIALS = 4
"""Random trials before the ``tpe-early`` sampler models the finished ones."""


def make_sampler(config: SearchConfig) -> Any:
    """Optuna's sampler named by ``config.sampler``, seeded. Every one of them reads the budgets
    from the constraints each trial carries (:meth:`StudyAdapter.constrain`): a trial over a
    budget is infeasible, ranked below every feasible one."""
    import optuna

    if config.sampler == "random":
        return optuna.samplers.RandomSampler(seed=config.seed)
    if config.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=config.seed)
    if config.sampler == "tpe-early":
        # Optuna's TPE draws its first 10 trials at random, which at a budget of about ten
        # fine-tunes is random search; this one models from the 5th on, all parameters jointly
        # (multivariate), with ``group`` keeping the conditional parameters of each scheme
        # family (define-by-run) apart
        return optuna.samplers.TPESampler(
            seed=config.seed,
            n_startup_trials=EARLY_STARTUP_TRIALS,
            multivariate=True,
            group=True,
        )
    if config.sampler == "gp":
        # Optuna's Gaussian-process sampler (log EHVI for several objectives) models the
        # parameters every trial has (the sub-network's and the scheme family); the conditional
        # parameters of a family, which only some trials have, are drawn at random, as Optuna
        # does for any parameter outside the intersection of the trials' spaces
        return optuna.samplers.GPSampler(
            seed=config.seed,
            n_startup_trials=EARLY_STARTUP_TRIALS,
            warn_independent_sampling=False,
        )
    return optuna.samplers.TPESampler(seed=config.seed)


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
        except DatabaseUnavailableError as e:  # the driver stops on it, in one line
            log.info("cannot record the heartbeat of trial %d: %s", trial_id, e)
        except Exception as e:  # a missed beat is retried at the next interval
            log.warning("cannot record the heartbeat of trial %d: %s", trial_id, e)


class StudyAdapter:
    """The study a driver works on: asks, tells, and the attributes that describe trials."""

    def __init__(self, config: SearchConfig, store: Store) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        self.config, self.store = config, store
        self.retried = 0
        self._checked = -float("inf")
        self._idle_since: float | None = None
        self._first_seen: dict[int, float] = {}  # others' running trials: trial id → when
        self._adopted: set[int] = set()
        self.storage = self._storage(config)
        self._retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)
        names = optuna.get_all_study_names(self.storage)
        if config.study_name not in names:
            if config.resume:
                raise _nothing_to_resume(config, names)
            check_new_study_name(config.study_name)
        self.study = optuna.create_study(
            study_name=config.study_name,
            storage=self.storage,
            directions=list(DIRECTIONS),
            sampler=make_sampler(config),
            load_if_exists=True,
        )
        stored = self.study.user_attrs.get(Attr.SPACE)
        if stored is None and (foreign := _foreign_study(self.study)) is not None:
            raise foreign
        if stored is None:
            self.study.set_user_attr(Attr.SPACE, config.space())
            self.study.set_metric_names(list(OBJECTIVES))
            self._enqueue_baselines()
        elif diff := _space_difference(stored, config.space()):
            raise _another_space(config, diff, self.study.user_attrs.get(Attr.CHECKPOINT))
        if config.checkpoint:  # the weights this run searches with, for export
            self.study.set_user_attr(Attr.CHECKPOINT, str(config.checkpoint))
        self.heartbeats = Heartbeats(self.storage, config.heartbeat_s)

    def _storage(self, config: SearchConfig) -> Any:
        """Optuna's storage with the heartbeat, retried while the server is away as the store
        is. Drivers started at once on an empty database race to create Optuna's tables; the
        loser finds them made and opens them."""
        import sqlalchemy as sa

        from tinytune.search.storage import ReconnectingStorage

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

    def _enqueue_baselines(self) -> None:
        """The reference first (full fine-tuning, beside the budget), then the baselines: the
        baseline presets on the default sub-network, or, in a study of one preset, that preset
        on it (the learning-rate grid's fine-tune of its family, reused, not run again)."""
        from tinytune.search.config import BASELINE_PRESETS, REFERENCE_PRESET
        from tinytune.spaces import default_subnet, get_supernet, subnet_params

        spec = get_supernet(self.config.supernet)
        params = subnet_params(default_subnet(spec), spec)
        if self.config.reference:
            self.enqueue({"scheme": REFERENCE_PRESET, **params}, {Attr.REFERENCE: True})
        if not self.config.baselines:
            return
        if self.config.preset is None:
            for name in BASELINE_PRESETS:
                self.study.enqueue_trial({"scheme": name, **params})
        elif not (self.config.reference and self.config.preset == REFERENCE_PRESET):
            self.study.enqueue_trial(params)

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

    def fail_stale(self, force: bool = False) -> None:
        """Fail the trials of drivers that stopped beating, each retried (at most once a
        heartbeat unless ``force``). This driver's own trials get a beat first: the heartbeat
        thread may not have beaten since the database came back from a restart."""
        import optuna

        now = time.monotonic()
        if force or now - self._checked >= self.config.heartbeat_s:
            self._checked = now
            self.heartbeats.beat()
            optuna.storages.fail_stale_trials(self.study)
            self._adopt_unbeaten(now)

    def _adopt_unbeaten(self, now: float) -> None:
        """Record one heartbeat for each running trial of another driver that stayed running
        a grace period and a heartbeat after this driver first saw it (see the module
        docstring)."""
        import optuna

        states = (optuna.trial.TrialState.RUNNING,)
        running = {t._trial_id for t in self.study.get_trials(deepcopy=False, states=states)}
        mine = self.heartbeats.trials()
        self._first_seen = {t: self._first_seen.get(t, now) for t in running - mine}
        wait = self.config.grace_s + self.config.heartbeat_s
        for trial_id, seen in self._first_seen.items():
            if now - seen >= wait and trial_id not in self._adopted:
                try:
                    self.storage.record_heartbeat(trial_id)
                except DatabaseUnavailableError:  # the driver stops on it, in one line
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
        limit = 2 * self.config.grace_s + 4 * (self.config.heartbeat_s + 2)
        return now - self._idle_since < limit

    # -- trials --------------------------------------------------------------------------------

    def waiting(self) -> list[Any]:
        """Enqueued trials (baselines, retries, ladder siblings), oldest first."""
        import optuna

        trials = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        return sorted(trials, key=lambda t: t.number)

    def running(self) -> list[int]:
        """Numbers of the study's running trials (of any driver)."""
        import optuna

        states = (optuna.trial.TrialState.RUNNING,)
        return [t.number for t in self.study.get_trials(deepcopy=False, states=states)]

    def ask(self) -> Any:
        with warnings.catch_warnings():  # Optuna expects Study.optimize; Heartbeats beats here
            warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
            trial = self.study.ask()
        self.heartbeats.add(trial._trial_id)
        return trial

    def enqueue(self, params: dict[str, Any], attrs: dict[str, Any]) -> None:
        self.study.enqueue_trial(params, user_attrs=attrs)

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


def _weights_hint(config: SearchConfig, stored: str) -> str:
    """How to search with a study's own weights: its path, or none where the study searched
    with the checkpoint the package ships."""
    from tinytune.checkpoints import shipped_checkpoint
    from tinytune.errors import ModelError
    from tinytune.spaces import get_supernet

    try:
        shipped = shipped_checkpoint(get_supernet(config.supernet))
    except ModelError:  # a damaged shipped file: the path is all there is to say
        shipped = None
    if shipped is not None and Path(stored).resolve() == shipped.resolve():
        return " or leave out --weights (the study searched with the shipped checkpoint)"
    return f" or pass its own --weights={stored!r}"


_FINETUNE_OPTIONS = {
    "epochs": lambda v: f"--epochs={v}",
    "batch_size": lambda v: f"--batch-size={v}",
    "lr": lambda v: "learning rates (leave out --lr)" if v == "per family" else f"--lr={v}",
    "repeats": lambda v: "repeats (leave out --repeats)" if v == "auto" else f"--repeats={v}",
}
"""How to ask for a study's own fine-tuning setting, by the key of its space's ``finetune``."""


def _another_space(
    config: SearchConfig, diff: dict[str, Any], checkpoint: str | None
) -> StorageError:
    """The one-line refusal of a study stored with another search space (``diff``: what
    :func:`_space_difference` found), with what to pass instead."""
    if "device" in diff:  # its engine follows from its device, unless it was another
        from tinytune.hwmodels.registry import default_engine

        device = diff["device"][0]
        hint = f" or pass --device={device}"
        engine = diff.get("engine", (None,))[0]
        if engine is not None and engine != default_engine(str(device)):
            hint += f" --engine={engine}"
    else:
        hint = f" or pass --engine={diff['engine'][0]}" if "engine" in diff else ""
    if "weights" in diff and checkpoint:
        hint += _weights_hint(config, checkpoint)
    if "finetune" in diff:
        from tinytune.errors import ConfigError
        from tinytune.evaluators.finetune import FinetuneConfig

        settings = diff["finetune"]
        try:  # a length stored by a version without today's bound: no option asks for it
            FinetuneConfig(epochs=settings.get("epochs", (1,))[0])
        except ConfigError as e:
            return StorageError(
                f"study {config.study_name!r} exists with another search space (stored vs "
                f"requested: {diff}); choose another --study name (its length cannot be asked "
                f"for now: {e}; so it cannot be continued)"
            )
        hint += " or pass the study's own " + ", ".join(
            _FINETUNE_OPTIONS[k](was) for k, (was, _) in settings.items()
        )
    if diff.get("update", (None,))[0] == "reordered":
        hint += (
            " (its SRAM was planned with parameter-gradient buffers that the bundles' "
            "fused updates do not use)"
        )
    return StorageError(
        f"study {config.study_name!r} exists with another search space "
        f"(stored vs requested: {diff}); choose another --study name{hint}"
    )


def _nothing_to_resume(config: SearchConfig, names: Sequence[str]) -> StorageError:
    return StorageError(
        f"no study {config.study_name!r} to resume in the database; studies: "
        f"{', '.join(names) or '(none)'}"
    )


def check_stored_space(config: SearchConfig, store: Store) -> None:
    """Refuse a study stored with another search space before its weights exist: everything
    but the weights' SHA-256 (compared when the study is opened, once the checkpoint is there)
    is compared here, so that a mismatch costs no pre-training.

    Raises:
        StorageError: the study exists with another search space, or ``--resume`` names a
            study that does not exist.
    """
    import optuna
    import sqlalchemy as sa

    try:
        names = optuna.get_all_study_names(store.url)
        if config.study_name not in names:
            if config.resume:
                raise _nothing_to_resume(config, names)
            check_new_study_name(config.study_name)
            return
        study = optuna.load_study(study_name=config.study_name, storage=store.url)
        stored = study.user_attrs.get(Attr.SPACE)
    except sa.exc.SQLAlchemyError:  # another driver creating Optuna's tables at this moment:
        return  # the study's own check, when it is opened, still compares the whole space
    if stored is None:
        if (foreign := _foreign_study(study)) is not None:
            raise foreign
        return
    requested = {k: v for k, v in config.space().items() if k != "weights"}
    stored = {k: v for k, v in stored.items() if k != "weights"}
    if diff := _space_difference(stored, requested):
        raise _another_space(config, diff, None)


def _foreign_study(study: Any) -> StorageError | None:
    """Why an Optuna study without tinytune's search space is not one tinytune may take over:
    other objectives, or trials already (tinytune stores its space before its first trial, so
    a study of its own without one is one that another driver is creating); None if it may."""
    directions = tuple(d.name.lower() for d in study.directions)
    if directions != DIRECTIONS:
        return StorageError(
            f"study {study.study_name!r} was not made by tinytune: it has {len(directions)} "
            f"objective(s) ({', '.join(directions)}), a tinytune study {len(DIRECTIONS)} "
            f"({', '.join(OBJECTIVES)}); choose another --study"
        )
    if trials := len(study.get_trials(deepcopy=False)):
        return StorageError(
            f"study {study.study_name!r} was not made by tinytune: it holds {trials} trial(s) "
            "and no tinytune search space; choose another --study"
        )
    return None


def _space_difference(stored: dict[str, Any], requested: dict[str, Any]) -> dict[str, Any]:
    """The keys whose stored and requested values differ, as (stored, requested); of the
    fine-tuning settings, the settings that differ. A study stored before its space named the
    latency engine was measured with the engine a profile then had,
    :func:`tinytune.hwmodels.devices.unnamed_engine` (published; PyTorch on the host); one
    stored before it named the parameter update was planned with each gradient a buffer for its
    backward step (``reordered``); one stored before it named its fine-tuning settings or its
    weights did not record them, so they are not compared; any other key it lacks reads as
    None."""
    from tinytune.hwmodels.devices import unnamed_engine

    if "engine" not in stored:
        stored = {**stored, "engine": unnamed_engine(str(stored.get("device", "")))}
    if "update" not in stored:
        stored = {**stored, "update": "reordered"}
    for unrecorded in ("finetune", "weights"):
        if unrecorded not in stored:
            stored = {**stored, unrecorded: requested.get(unrecorded)}
    diff = {k: (stored.get(k), v) for k, v in requested.items() if stored.get(k) != v}
    if "weights" in diff:  # SHA-256s, shortened as git shortens commits
        diff["weights"] = tuple(f"{v[:12]}…" if v else v for v in diff["weights"])
    if "finetune" in diff:
        was, asked = stored["finetune"], requested["finetune"]
        diff["finetune"] = {k: (was.get(k), v) for k, v in asked.items() if was.get(k) != v}
    return diff
