"""What a run reports when it ends: its tally besides the trials' counts, and the
:class:`~tinytune.search.run.events.SearchResult` made of it."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

from tinytune.db import Store
from tinytune.search.config.budgets import Budgets, RunLimits, Sizing, StudyBudget
from tinytune.search.config.search_config import SearchConfig
from tinytune.search.execution.executor import Metered
from tinytune.search.front.recording import FrontPoint, recipe_point, reference_point
from tinytune.search.ladder.brackets import Ladder
from tinytune.search.ladder.proxy import rank_correlation
from tinytune.search.run.events import SearchResult, at_chance
from tinytune.search.run.ledger import Ledger
from tinytune.search.run.preflight import Preflight
from tinytune.search.run.verify_int8 import int8_accuracies
from tinytune.spaces import default_subnet

__all__ = ["Ending", "Tally", "search_result", "warn_stops"]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Tally:
    """What a run counts besides its trials (:class:`~tinytune.search.run.events.Counts`)."""

    task_time: float = 0.0
    """Seconds its tasks took on the workers."""
    driver_s: float = 0.0
    """The loop's own seconds, not its waits on workers."""
    lr_cost: tuple[int, float] = (0, 0.0)
    """The learning-rate grid's fine-tunes and task seconds in this run."""
    stopped_by: str | None = None
    """The first of this run's limits that held a proposal back."""
    screen_error: str | None = None
    """The last short fine-tune's error, where one failed."""
    sizing: Sizing | None = None
    """How the study's number of trials was sized, where it was."""


@dataclasses.dataclass(frozen=True)
class Ending:
    """The study as a run leaves it."""

    finished: int
    """The study's measured fine-tunes."""
    front: tuple[FrontPoint, ...]
    hypervolume: float | None
    search_epochs: float
    """The epochs the run's search trained, before the int8 verification."""
    int8_cost: tuple[int, float]
    """The int8 verification's fine-tunes and seconds."""


def warn_stops(config: SearchConfig, limits: RunLimits, tally: Tally) -> None:
    """Warn where the run stopped on a row of idle proposals or of failed short fine-tunes."""
    if limits.idle >= config.max_idle_proposals:
        log.warning(
            "stopped after %d proposals in a row that were over budget or already measured",
            limits.idle,
        )
    if limits.failed_screens >= config.max_idle_proposals:
        log.warning(
            "stopped after %d short fine-tunes in a row failed; the last: %s",
            limits.failed_screens,
            str(tally.screen_error).splitlines()[0],
        )


def search_result(
    config: SearchConfig,
    store: Store,
    checked: Preflight,
    ledger: Ledger,
    ladder: Ladder | None,
    budget: StudyBudget,
    limits: RunLimits,
    executor: Metered,
    tally: Tally,
    ending: Ending,
) -> SearchResult:
    """What a run reports when it ends."""
    tau = rank_correlation(store, config.study_name, "short" if config.halving else "proxy")
    proxy = ladder.proxy if ladder is not None else None
    table = proxy.table if proxy is not None else None
    reference = reference_point(store, config.study_name, budget.reference_key)
    front, epochs = ending.front, ending.search_epochs
    keys = [p.candidate_key for p in front]
    return SearchResult(
        study_name=config.study_name,
        counts=ledger.counts,
        front=front,
        hypervolume=ending.hypervolume,
        finished=ending.finished,
        reference=reference,
        errors=tuple(ledger.errors),
        wall_time_s=time.monotonic() - limits.start,
        proposals=limits.proposals,
        contribution_tasks=table.tasks if table is not None else 0,
        contribution_s=proxy.contribution_s if proxy is not None else 0.0,
        task_time_s=tally.task_time + (table.task_time_s if table is not None else 0.0),
        driver_s=tally.driver_s,
        train_epochs=epochs,
        proxy_tau=tau.tau,
        proxy_pairs=tau.n,
        lr_calibration=ledger.lrs,
        lr_fine_tunes=tally.lr_cost[0],
        lr_s=tally.lr_cost[1],
        val_images=checked.val_images,
        repeats=checked.repeats,
        copies=checked.copies,
        stopped_by=tally.stopped_by if ending.finished < budget.trials else None,
        int8=int8_accuracies(store, config.study_name, keys),
        int8_runs=ending.int8_cost[0],
        int8_epochs=executor.train_epochs - epochs,
        int8_s=ending.int8_cost[1],
        latency_profile=checked.latency_profile,
        devices=dict(executor.devices),
        chance=_chance(config, checked, reference, front),
        recipe=recipe_point(
            store,
            config.study_name,
            Budgets.of(config, checked.flash_budget),
            default_subnet(checked.spec),
        ),
        trials=budget.trials,
        sizing=tally.sizing,
        late=tuple(ledger.late_fine_tunes),
    )


def _chance(
    config: SearchConfig, checked: Preflight, reference: Any, front: Sequence[FrontPoint]
) -> float | None:
    """One over the classes when the study's most accurate candidate is at chance
    (:func:`~tinytune.search.run.events.at_chance`), else None."""
    accuracies = [p.val_accuracy for p in front if p.val_accuracy is not None]
    if reference is not None and reference.val_accuracy is not None:
        accuracies.append(reference.val_accuracy)
    n_classes, val_images = config.n_classes, checked.val_images
    return 1.0 / n_classes if at_chance(accuracies, n_classes, val_images) else None
