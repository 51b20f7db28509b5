"""What a search reports: typed counters, progress events, and the result of a run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tinytune.search.config.budgets import Sizing
from tinytune.search.front.recording import FrontPoint
from tinytune.search.run.lr_grid import StudyRates
from tinytune.search.run.timing import Late
from tinytune.search.run.verify_int8 import Int8Accuracy

__all__ = ["STOP_REASONS", "Counts", "SearchEvent", "SearchResult", "at_chance"]

STOP_REASONS = ("time", "epochs", "proposals", "idle", "screening", "late")
"""Why a run can end with the study's budget unspent: ``time_budget_s``, ``epoch_budget``,
``max_proposals``, ``max_idle_proposals`` proposals in a row over budget or measured, as
many short fine-tunes (``halving``) in a row that failed, or a proposal whose fine-tune would
end after the default run's deadline (:data:`~tinytune.search.config.budgets.DEFAULT_SEARCH_S`)."""


@dataclass
class Counts:
    """Trials of this run by outcome, and the fine-tunes spent on the proxy.

    Attributes:
        measured, failed: measured fine-tunes that succeeded or failed.
        pruned: trials over a budget (pruned before any training) or duplicates in flight.
        reused: trials told the stored result of a candidate measured before.
        twins: schedule twins stored and told: a candidate fine-tuned in this study under
            another schedule of its frozen prefix (patches per side), which computes the same
            values, so it is priced by the hardware model and never fine-tuned.
        proxy_scored, promoted, not_promoted: trials scored at the ladder's low fidelity (the
            proxy, or a short fine-tune with ``halving``), and of those, promoted to a
            measured fine-tune or told PRUNED.
        base_tasks: classifier-only fine-tunes of new sub-networks (the proxy's bases).
        screen_tasks: short fine-tunes that screened bracket members (``halving``).
        retried: trials of drivers that stopped beating, failed here and enqueued again.
        presets, mutants, sampled: the measured fine-tunes that succeeded, by where the
            candidate came from: a baseline preset on the default sub-network, a mutant of a
            front point (``mutate``), or the sampler (the reference is none of them).
        late: trials told PRUNED because their fine-tune, predicted, would end after the
            default run's deadline.
    """

    measured: int = 0
    failed: int = 0
    pruned: int = 0
    reused: int = 0
    twins: int = 0
    proxy_scored: int = 0
    promoted: int = 0
    not_promoted: int = 0
    base_tasks: int = 0
    screen_tasks: int = 0
    retried: int = 0
    presets: int = 0
    mutants: int = 0
    sampled: int = 0
    late: int = 0


@dataclass(frozen=True)
class SearchEvent:
    """One step of a search, for a progress display.

    Attributes:
        kind: ``start``, ``submitted``, ``finished``, ``pruned``, ``reused``, ``twin`` (a
            schedule twin told its ``accuracy``), ``promoted``, ``contributions`` (``done`` of
            ``total`` fine-tunes of the contribution analysis), ``contributions_ready``,
            ``base``, ``screened`` (a short fine-tune's validation ``accuracy``, None when it
            failed), ``waiting`` (on other drivers' fine-tunes) or
            ``calibrating`` (``done`` of ``total`` fine-tunes of the learning-rate grid),
            ``sized`` (the study's ``budget``, not given, sized from the grid's fine-tunes),
            ``late`` (a trial left out for the run's deadline: ``late``) or
            ``int8`` (``done`` of ``total`` front points trained as the device trains); before
            the search, ``decoding`` (``done`` of ``total`` images of an image folder decoded
            into the cache folder ``path``) or ``decoded`` (the images were in that cache).
        counts: this run's counters at that moment (a copy).
        finished: the study's finished measured fine-tunes (all runs and drivers), on its
            budget (the reference is measured beside it).
        reference: the study's reference (full fine-tuning of the default sub-network), when
            measured.
        budget: the study's budget of measured fine-tunes.
        in_flight: this run's measured fine-tunes running.
        trial: the trial concerned, if any.
        accuracy: the measured validation accuracy of a finished trial.
        error: the error of a failed one.
        done, total: progress of the contribution analysis or the learning-rate grid.
        path: the decoded-image cache folder of ``decoding`` and ``decoded``.
        late: what a ``late`` trial's fine-tune was and would have taken.
    """

    kind: str
    counts: Counts
    finished: int
    budget: int
    in_flight: int
    trial: int | None = None
    accuracy: float | None = None
    error: str | None = None
    done: int = 0
    total: int = 0
    path: str | None = None
    late: Late | None = None


@dataclass(frozen=True)
class SearchResult:
    """What a run did and found.

    Attributes:
        counts: this run's trials by outcome (see :class:`Counts`).
        front, hypervolume: the study's measured Pareto front and its normalised hypervolume.
        finished: the study's finished measured fine-tunes (all runs and drivers).
        errors: the distinct errors of this run's failed fine-tunes.
        wall_time_s: the run's wall time, contribution analysis included.
        proposals: trials asked in this run.
        contribution_tasks, contribution_s: fine-tunes and wall time of the contribution
            analysis in this run.
        task_time_s: seconds spent inside evaluations, summed over workers.
        driver_s: the driver's own seconds in the search loop: asking the sampler, drawing and
            pricing mutants, storing results and the front; not its waits on workers nor the
            heartbeat's polls while it waits. A worker whose fine-tune came back waits on it.
        train_epochs: the compute of this run: epochs of every fine-tune it ran (learning-rate
            grid, reference, measured, short, classifier-only bases, contribution analysis), in
            passes over the whole training split; a measured fine-tune costs ``epochs`` of
            them, one on a partition repeated r times r·``epochs``.
        proxy_tau, proxy_pairs: Kendall's τ between the ladder's low fidelity (the proxy, or
            the short fine-tunes with ``halving``) and measured validation accuracy over the
            study's candidates that have both, and their number.
        lr_calibration: the study's learning rate per scheme family (None when the rate is
            fixed); ``lr_fine_tunes`` and ``lr_s``: fine-tunes and task seconds its grid cost
            in this run (0 when an earlier run chose the rates).
        val_images, repeats: the validation split's size, and the train/val partitions each
            accuracy is the mean over (1: the data set's own split).
        copies: image files of the data set left out as copies of others (the same bytes).
        stopped_by: why the run ended before the study's budget of measured fine-tunes was
            spent (:data:`STOP_REASONS`: ``time``, ``epochs``, ``proposals``, ``idle``,
            ``screening``, ``late``); None
            when it was spent, or when the run ended for none of these.
        int8: the device's accuracy (int8, batch 1, QAS) of front points, by candidate key,
            where measured; ``int8_runs``, ``int8_epochs`` and ``int8_s``: trainings, their
            epochs (every rate tried, at batch 1; not in ``train_epochs``) and task seconds
            spent on it in this run.
        devices: this run's evaluations by where their worker ran them (``cpu``, or
            ``cuda:0 (the GPU's name)``), read from their results.
        chance: the accuracy of guessing (one over the classes) when the most accurate
            candidate the study measured, the reference included, is within noise of it
            (:func:`at_chance`): the network learned nothing, and the weights are the first
            suspect; None otherwise.
        recipe: the most accurate within the budgets of the study's hand-written presets (the
            baseline presets on the default sub-network: :func:`~tinytune.search.front.
            recording.recipe_point`), what the papers' recipes alone give, to weigh the front's
            most accurate point against; None where the study measured none within them.
        trials: the study's budget of measured fine-tunes: as given, or sized (``sizing``).
        sizing: how the default budget was sized where the study's ``trials`` were not given
            (:func:`~tinytune.search.config.budgets.size_trials`, from the learning-rate
            grid's fine-tunes; stored with the study, so that later runs keep it); None where
            they were given, or where nothing was measured to size them by
            (:data:`~tinytune.search.config.budgets.DEFAULT_TRIALS` then).
        late: the fine-tunes the run left out because, predicted, they would have ended after
            its deadline (a default run's: neither ``trials`` nor a time budget given), in
            order.
        latency_profile: the device profile that predicted the latencies, for people
            (``"host, pytorch engine (calibration 3)"``); a calibration stored with
            ``--force`` says FORCED.
    """

    study_name: str
    counts: Counts
    front: tuple[FrontPoint, ...]
    hypervolume: float | None
    finished: int
    errors: tuple[str, ...]
    wall_time_s: float
    proposals: int
    contribution_tasks: int = 0
    contribution_s: float = 0.0
    task_time_s: float = 0.0
    driver_s: float = 0.0
    train_epochs: float = 0.0
    proxy_tau: float | None = None
    proxy_pairs: int = 0
    reference: FrontPoint | None = None
    lr_calibration: StudyRates | None = None
    lr_fine_tunes: int = 0
    lr_s: float = 0.0
    val_images: int = 0
    repeats: int = 1
    copies: int = 0
    stopped_by: str | None = None
    int8: dict[str, Int8Accuracy] = field(default_factory=dict)
    int8_runs: int = 0
    int8_epochs: float = 0.0
    int8_s: float = 0.0
    latency_profile: str = ""
    devices: dict[str, int] = field(default_factory=dict)
    chance: float | None = None
    recipe: FrontPoint | None = None
    trials: int = 0
    sizing: Sizing | None = None
    late: tuple[Late, ...] = ()


def at_chance(val_accuracies: list[float], n_classes: int, val_images: int) -> bool:
    """Whether the best of ``val_accuracies`` is within noise of guessing: at most one over
    ``n_classes`` plus three standard errors of a binomial at that rate over ``val_images``
    validation images (14.7 % for 10 classes on 360 images, 21.6 % on 60). False without
    accuracies."""
    if not val_accuracies or n_classes < 2 or val_images < 1:
        return False
    chance = 1.0 / n_classes
    noise = 3.0 * math.sqrt(chance * (1.0 - chance) / val_images)
    return max(val_accuracies) <= chance + noise
