"""Budgets: what the device allows (checked before a search starts), what a candidate's
predicted cost violates (a constraint for Optuna, a reason to prune before training), and what
this run may still spend (time, proposals)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tinytune.db import Store
from tinytune.errors import BudgetError, ConfigError, flag
from tinytune.evaluators import HardwareCost, HardwareEvaluator
from tinytune.hwmodels.profile import DeviceProfile
from tinytune.search.config.search_config import SearchConfig
from tinytune.spaces import default_subnet, make_preset, smallest_subnet

__all__ = [
    "CONSTRAINTS",
    "DEFAULT_SEARCH_S",
    "DEFAULT_TRIALS",
    "Budgets",
    "RunLimits",
    "Sizing",
    "StudyBudget",
    "check_budgets",
    "check_feasible",
    "feasible_cuts",
    "over_budget",
    "size_trials",
    "violations",
]

_BUDGETS = (
    ("sram", "peak SRAM", " B"),
    ("flash", "flash", " B"),
    ("latency", "training-step latency", " s"),
)
CONSTRAINTS = tuple(name for name, _, _ in _BUDGETS)
"""The budgets a trial's constraints measure (``trial.constraints``), in the order of
:func:`violations`."""


def check_budgets(config: SearchConfig, device: DeviceProfile) -> None:
    """Raise :class:`BudgetError` when a budget exceeds what the device has."""
    for what, budget, has in (
        ("SRAM", config.sram_budget_bytes, device.sram_bytes),
        ("flash", config.flash_budget_bytes, device.flash_bytes),
    ):
        if budget is not None and budget > has:
            raise BudgetError(
                f"the {what} budget of {budget} bytes exceeds the {has} bytes of {device.name}; "
                f"use at most {has}B or another " + flag("device")
            )


def check_feasible(config: SearchConfig, hw: HardwareEvaluator) -> None:
    """Raise :class:`BudgetError` when no candidate of the space can meet the SRAM budget, the
    flash budget (the device's flash without one), or the latency budget on the evaluator's
    device: the cheapest scheme (classifier only) on the smallest sub-network at the smallest
    resolution, scheduled as the search schedules candidates, is the floor of all three (every
    scheme keeps every weight in flash, and the others add kernels). A fixed patch schedule
    (``N:B``) that the preset, or the classifier-only scheme, cannot run on the default
    sub-network raises :class:`~tinytune.errors.ConfigError` (one line, before anything is
    stored). The space is the evaluator's: the network's, narrowed to the sizes the data set
    makes (a series: its own)."""
    spec = hw.spec
    subnet = default_subnet(spec)
    if hw.fixed is not None:  # a fixed schedule the first preset cannot run: one line, now
        hw.schedule(make_preset(config.preset or "last", spec, subnet))
    floor = make_preset("last", spec, type(subnet)(min(spec.resolutions), subnet.stages))
    floor_cost = hw(hw.schedule(floor) if hw.fixed is None else floor)
    fastest, limit = floor_cost.latency_s, config.latency_budget_s
    if limit is not None and fastest is not None and fastest > limit and hw.device is not None:
        raise BudgetError(
            f"no candidate of {spec.name} fits a latency budget of {1000 * limit:g} ms on "
            f"{hw.device.name}: the fastest training step takes {1000 * fastest:.3g} ms"
            + (" with its front-end's input" if floor_cost.frontend is not None else "")
            + "; raise "
            + flag("latency_budget")
            + f" to at least {1000 * fastest:.3g}ms"
        )
    budget = config.sram_budget_bytes
    if budget is not None and floor_cost.sram_bytes > budget:
        floor = floor_cost.sram_bytes
        raise BudgetError(
            f"no candidate of {spec.name} fits an SRAM budget of {budget} bytes: the smallest "
            f"training step needs {floor} bytes ({config.hardware.precision}, batch "
            f"{config.hardware.batch_size}); raise "
            + flag("sram_budget")
            + f" to at least {floor}B"
        )
    flash = config.flash_budget_bytes
    if flash is not None and floor_cost.flash_bytes > flash:
        raise BudgetError(
            f"no candidate of {spec.name} fits a flash budget of {flash} bytes: the smallest "
            f"needs {floor_cost.flash_bytes} bytes (its weights and the training step's "
            "code); raise " + flag("flash_budget") + f" to at least {floor_cost.flash_bytes}B"
        )
    if hw.device is not None and floor_cost.flash_bytes > hw.device.flash_bytes:
        raise BudgetError(
            f"no candidate of {spec.name} fits the {hw.device.flash_bytes} bytes of flash of "
            f"{hw.device.name}: the smallest needs {floor_cost.flash_bytes} bytes (its weights "
            "and the training step's code); choose a device with more flash (tinytune devices)"
        )


def feasible_cuts(
    config: SearchConfig, hw: HardwareEvaluator, flash_budget: int
) -> tuple[int, ...]:
    """The cuts of a fixed network (stages kept) whose cheapest candidate — the classifier
    alone on the smallest sub-network of that cut, scheduled as the search schedules it — is
    within the SRAM, flash and latency budgets, and the default cut always (the reference and
    the baselines use it): where the sampler may cut the network. A cut none of whose
    candidates fits (EfficientNet-Lite0 after block 14 or 15 in 1 MB of flash) is no option
    worth a proposal. Every cut of a supernet (it has one)."""
    spec = hw.spec
    if not spec.fixed:
        return spec.stage_counts
    cuts = []
    for stages in spec.stage_counts:
        cheapest = make_preset("last", spec, smallest_subnet(spec, stages))
        try:
            cost = hw(hw.schedule(cheapest))
        except ConfigError:  # a fixed patch schedule this cut cannot run: the sampler's
            cuts.append(stages)
            continue
        if stages == spec.default_stages or over_budget(config, flash_budget, cost)[1] is None:
            cuts.append(stages)
    return tuple(cuts)


@dataclass(frozen=True)
class Budgets:
    """The budgets a front is chosen under (None or 0: no budget)."""

    sram_bytes: int | None = None
    flash_bytes: int | None = None
    latency_s: float | None = None

    @classmethod
    def of(cls, config: SearchConfig, flash_budget: int | None) -> Budgets:
        """A run's budgets."""
        return cls(config.sram_budget_bytes, flash_budget, config.latency_budget_s)

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any] | None) -> Budgets:
        """The budgets a Pareto snapshot stored (none for one stored without them)."""
        stored = stored or {}
        return cls(stored.get("sram_bytes"), stored.get("flash_bytes"), stored.get("latency_s"))

    def to_stored(self) -> dict[str, Any]:
        """The budgets as a Pareto snapshot stores them."""
        return {
            "sram_bytes": self.sram_bytes,
            "flash_bytes": self.flash_bytes,
            "latency_s": self.latency_s,
        }

    def exceeded(self, memory: int, flash: int, latency_s: float) -> list[float]:
        """How far each budget is exceeded (> 0) or met (<= 0): SRAM, flash, latency."""
        limits = (self.sram_bytes, self.flash_bytes, self.latency_s)
        values = (memory, flash, latency_s)
        return [
            float(v - limit) if limit else 0.0 for v, limit in zip(values, limits, strict=True)
        ]


def violations(
    config: SearchConfig, flash_budget: int | None, memory: int, flash: int, latency_s: float
) -> list[float]:
    """How far each budget is exceeded (> 0) or met (<= 0): SRAM, flash, latency."""
    return Budgets.of(config, flash_budget).exceeded(memory, flash, latency_s)


def over_budget(
    config: SearchConfig, flash_budget: int | None, cost: HardwareCost
) -> tuple[list[float], str | None]:
    """The constraint values of a predicted cost, and why it is pruned (None when it fits)."""
    v = violations(
        config, flash_budget, cost.sram_bytes, cost.flash_bytes, float(cost.latency_s or 0.0)
    )
    over = [
        f"predicted {what} exceeds its budget by {amount:g}{unit}"
        for (_, what, unit), amount in zip(_BUDGETS, v, strict=True)
        if amount > 0
    ]
    return v, "; ".join(over) or None


def epoch_costs(config: SearchConfig, repeats: int) -> tuple[float, float]:
    """The epochs of a measured fine-tune and of a short one (``halving``'s screening), each
    on ``repeats`` train/validation partitions, in passes over the training split."""
    full = config.finetune.epochs * repeats
    return full, config.screen_epochs * config.screen_fraction * repeats


@dataclass
class RunLimits:
    """What this run may still do: its wall time, its proposals, proposals in a row that led
    nowhere (over budget or already measured), and short fine-tunes in a row that failed
    (``halving``: a run whose every screening fails would otherwise propose for ever, each
    bracket member that joins being no idle proposal); ``max_idle`` of either ends it, as does
    ``late``: a proposal whose fine-tune would end after the run's deadline."""

    time_budget_s: float | None
    max_proposals: int | None
    max_idle: int
    start: float
    proposals: int = 0
    idle: int = 0
    failed_screens: int = 0
    late: bool = False

    def time_left(self) -> bool:
        budget = self.time_budget_s
        return budget is None or time.monotonic() - self.start < budget

    def may_propose(self) -> bool:
        return self.spent() is None

    def screened(self, failed: bool) -> None:
        """Count a short fine-tune's result: one that failed adds to the row, one that scored
        its member ends it."""
        self.failed_screens = self.failed_screens + 1 if failed else 0

    def spent(self) -> str | None:
        """Which of these limits holds new proposals back (``proposals``, ``idle``,
        ``screening``, ``late``, ``time``), or None while none does. The counts grow only by
        proposals and their screenings, which a spent time forbids, so one that is spent was
        spent before the time: it comes first."""
        if self.max_proposals is not None and self.proposals >= self.max_proposals:
            return "proposals"
        if self.idle >= self.max_idle:
            return "idle"
        if self.failed_screens >= self.max_idle:
            return "screening"
        if self.late:
            return "late"
        if not self.time_left():
            return "time"
        return None


@dataclass(frozen=True)
class StudyBudget:
    """The study's budget of measured fine-tunes, shared by all its drivers and runs: its
    finished measured evaluations and the claims in flight, the reference's left out."""

    store: Store
    study_name: str
    trials: int
    reference_key: str

    def spent(self) -> tuple[int, int]:
        """Finished measured fine-tunes and those in flight."""
        return self.store.measured_budget_spent(self.study_name, self.reference_key)

    def left(self, reserved: int = 0) -> bool:
        """Whether another fine-tune may start beside ``reserved`` ones not yet claimed."""
        finished, claims = self.spent()
        return finished + claims + reserved < self.trials

    def others_in_flight(self, mine: int) -> bool:
        """Other drivers' fine-tunes run (``mine`` are this run's), and the budget is not
        finished: a dead driver's may come back to be retried."""
        finished, claims = self.spent()
        return claims > mine and finished < self.trials


DEFAULT_TRIALS = 12
"""The most measured fine-tunes a study makes when its ``trials`` are not given."""

DEFAULT_SEARCH_S = 600.0
"""The wall time that a study's measured fine-tunes (the reference's included) should take on
the run's workers when its ``trials`` are not given: as many of :data:`DEFAULT_TRIALS` as fit.
Without a time budget either, it is the run's deadline: a measured fine-tune starts only where
it is predicted to end within this long of the run's start (:mod:`tinytune.search.run.timing`)."""


@dataclass(frozen=True)
class Sizing:
    """The default budget of measured fine-tunes of a study, sized from fine-tunes that were
    measured before any of them (the learning-rate grid's).

    Attributes:
        trials: the budget: ``fit``, at least ``least`` and at most :data:`DEFAULT_TRIALS`.
        fit: how many fine-tunes of ``each_s`` fit in ``time_s`` on ``slots`` workers beside
            the reference's ``reference_s``.
        each_s: a measured fine-tune's predicted seconds: the mean over the families the
            study's candidates fall in (the reference's family left out).
        reference_s: the reference's predicted seconds (0 where the study has none to measure).
        slots: the fine-tunes that run at once.
        time_s: the time they should fit in (:data:`DEFAULT_SEARCH_S`).
        least: the fine-tunes the study makes first whatever the time (the baseline presets).
    """

    trials: int
    fit: int
    each_s: float
    reference_s: float
    slots: int
    time_s: float
    least: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sizing:
        return cls(
            trials=int(data["trials"]),
            fit=int(data["fit"]),
            each_s=float(data["each_s"]),
            reference_s=float(data["reference_s"]),
            slots=int(data["slots"]),
            time_s=float(data["time_s"]),
            least=int(data["least"]),
        )


def size_trials(
    seconds: Mapping[str, float],
    families: Sequence[str],
    slots: int,
    reference: bool,
    least: int,
    time_s: float = DEFAULT_SEARCH_S,
) -> Sizing | None:
    """How many measured fine-tunes fit in ``time_s`` of ``slots`` workers: ``seconds``, a
    fine-tune's predicted seconds by family (``full``, the reference's family, measured beside
    the budget where ``reference``), and ``families``, those the study's candidates fall in.
    The budget is at least ``least`` (``DEFAULT_TRIALS`` at most). None where no family the
    candidates fall in has a time."""
    timed = [seconds[f] for f in families if f != "full" and seconds.get(f, 0.0) > 0.0]
    if not timed:
        timed = [seconds[f] for f in families if seconds.get(f, 0.0) > 0.0]
    if not timed or slots < 1:
        return None
    each = statistics.fmean(timed)
    reference_s = seconds.get("full", 0.0) if reference else 0.0
    fit = max(0, math.floor((time_s * slots - reference_s) / each))
    least = min(least, DEFAULT_TRIALS)
    trials = min(DEFAULT_TRIALS, max(least, fit, 1))
    return Sizing(trials, fit, each, reference_s, slots, time_s, least)
