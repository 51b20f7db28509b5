"""What a run settles before its loop: the study's learning rates and its number of trials,
each chosen once per study and stored with it, so later runs keep them."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tinytune.errors import flag
from tinytune.evaluators import EvaluationResult
from tinytune.search.config.budgets import DEFAULT_TRIALS, Sizing, size_trials
from tinytune.search.config.search_config import BASELINE_PRESETS, SearchConfig
from tinytune.search.execution.worker_tasks import Tasks
from tinytune.search.run.lr_grid import StudyRates, families_needed, rates_for_study
from tinytune.search.run.preflight import Preflight
from tinytune.search.run.timing import Timing, family_seconds
from tinytune.search.study.adapter import StudyAdapter
from tinytune.search.study.attrs import Attr

__all__ = ["GridResults", "study_rates", "study_trials"]

log = logging.getLogger(__name__)

GridResults = dict[tuple[str, float], EvaluationResult]
"""The learning-rate grid's fine-tunes at each family's chosen rate, by ``(candidate key,
lr)``."""


def study_rates(
    study: StudyAdapter,
    tasks: Tasks,
    config: SearchConfig,
    checked: Preflight,
    watch: Callable[[], None],
) -> tuple[StudyRates, GridResults | None]:
    """The study's rate per family (:func:`~tinytune.search.run.lr_grid.rates_for_study`):
    stored by an earlier run, or measured by this run's grid (its results returned) and stored
    with the study."""
    stored = study.study_attr(Attr.LR_CALIBRATION)
    rates, grid = rates_for_study(
        tasks, config, checked.spec, checked.hardware, watch, stored, checked.train_images
    )
    if grid is not None:
        study.set_study_attr(Attr.LR_CALIBRATION, rates.to_json())
    return rates, grid


def study_trials(
    study: StudyAdapter,
    config: SearchConfig,
    checked: Preflight,
    timing: Timing | None,
    slots: int,
    size: bool = True,
) -> Sizing | None:
    """The study's budget of measured fine-tunes where its ``trials`` are not given: as many of
    :data:`~tinytune.search.config.budgets.DEFAULT_TRIALS` as fit in
    :data:`~tinytune.search.config.budgets.DEFAULT_SEARCH_S` on ``slots`` workers, each
    family's fine-tune timed by the learning-rate grid's (``timing``:
    :func:`~tinytune.search.run.timing.family_seconds`;
    :func:`~tinytune.search.config.budgets.size_trials`; never fewer than the baseline presets
    the study measures first); one sized by an earlier run is kept. None: the most, and
    where none is stored and not ``size`` (a run whose deadline holds it to the same minutes:
    :class:`~tinytune.search.run.timing.Deadline`)."""
    if config.trials is not None:
        return None
    stored = study.study_attr(Attr.TRIALS_SIZED)
    if stored:
        return Sizing.from_json(stored)
    if timing is None or not config.tune_lr or not size:
        return None
    families = families_needed(config, checked.spec)
    sizing = size_trials(
        family_seconds(timing, families, checked.hardware),
        families,
        slots,
        reference=config.reference,
        least=len(BASELINE_PRESETS) if config.baselines and config.preset is None else 1,
    )
    if sizing is not None:
        study.set_study_attr(Attr.TRIALS_SIZED, sizing.to_json())
        if config.reproducible and sizing.trials < DEFAULT_TRIALS:
            log.warning(
                flag("reproducible", True)
                + f": the study's budget, {sizing.trials} measured fine-tunes, was "
                "sized from this machine's fine-tunes, so another machine may size "
                "another; " + flag("trials") + " fixes it"
            )
    return sizing
