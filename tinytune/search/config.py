"""What a search is asked to do: :class:`SearchConfig`, validated once, and its vocabulary
(objectives, samplers, the reference and the baselines a new study measures first)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

from tinytune.errors import BudgetError, ConfigError
from tinytune.evaluators import FinetuneConfig, HardwareConfig
from tinytune.evaluators.finetune import MAX_EPOCHS
from tinytune.hwmodels.devices import ENGINES
from tinytune.hwmodels.memory import PRECISIONS
from tinytune.samplers import DEFAULT_SAMPLER, SAMPLERS
from tinytune.search.contribution import ContributionPlan
from tinytune.spaces import (
    DEFAULT_SUPERNET,
    PRESET_NAMES,
    Candidate,
    default_subnet,
    get_supernet,
    make_preset,
)
from tinytune.units import check_integer, check_real, check_seed

__all__ = [
    "BASELINE_PRESETS",
    "DIRECTIONS",
    "OBJECTIVES",
    "SAMPLERS",
    "SearchConfig",
    "check_new_study_name",
    "reference_candidate",
]

OBJECTIVES = ("accuracy", "peak_sram_bytes", "latency_s")
DIRECTIONS = ("maximize", "minimize", "minimize")
BASELINE_PRESETS = ("last", "bias-only", "mcunetv3", "tinytl")
REFERENCE_PRESET = "full"


def check_new_study_name(name: str) -> None:
    """Refuse to create a study whose name begins or ends with a space (``--study " x"`` is
    almost always a quoting slip, and would make a second study beside ``x``). A study stored
    under such a name by an earlier version is still continued: callers check only names that
    are not in the database yet.

    A control, format or separator character (a line break, an escape, a bidirectional
    override, U+2028) is refused too: the name is printed in every line that names the
    study, and would break or rewrite them.

    Raises:
        ConfigError: the name has a space at either end, or such a character.
    """
    if name != name.strip():
        raise ConfigError(
            f"--study {name!r:.80} begins or ends with a space; give the name without them"
        )
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name):
        raise ConfigError(
            f"--study {name!r:.80} holds a control or format character; give a name of "
            "printable characters"
        )


def reference_candidate(supernet: str) -> Candidate:
    """The study's reference: full fine-tuning of the supernet's default sub-network, measured
    once per study beside its budget (even over the SRAM budget, and then never on the front),
    so that each front point can be told its accuracy loss and its SRAM saving against it."""
    spec = get_supernet(supernet)
    return make_preset(REFERENCE_PRESET, spec, default_subnet(spec))


@dataclass(frozen=True)
class SearchConfig:
    """Everything a search needs besides its store and executor.

    Attributes:
        checkpoint: Path of the supernet weights the workers load.
        trials: The study's budget of measured fine-tunes (successful or failed), over all its
            runs and all the drivers that share it.
        time_budget_s: Stop submitting after this many seconds of this run.
        epoch_budget: Start no fine-tune that could take this run's compute beyond this many
            fine-tuning epochs (passes over the training split: a measured fine-tune costs
            ``finetune.epochs``, a short one its share); fine-tunes in flight and those the
            ladder's open brackets still need count as spent.
        max_proposals: Trials this run may ask Optuna for (any fidelity).
        baselines: Measure the baseline presets on the default sub-network first (without a
            preset).
        reference: Measure the study's reference (:func:`reference_candidate`) first, beside
            the budget.
        tune_lr: Choose the fine-tuning learning rate of each scheme family on the validation
            split before the first measurement (:mod:`tinytune.search.lr`); False fine-tunes
            every candidate at ``finetune.lr``.
        repeats: Train/val partitions each candidate is measured on, its accuracies their
            means; None: 1, or more where the validation split has under 100 images
            (:func:`tinytune.data.val_repeats`).
        engine: What the latency objective predicts (:data:`~tinytune.hwmodels.ENGINES`);
            None: the device's default, the bundle's own kernels where they have a profile
            (built in or calibrated).
        verify_int8: At the end, train each point of the front as the device does (int8,
            batch 1, QAS) and store its accuracy (:mod:`tinytune.search.verify`).
        proxy: The fidelity ladder with the additive proxy as its low rung: brackets of
            ``proxy_eta`` candidates scored by a contribution analysis, one promoted to a
            measured fine-tune (:mod:`tinytune.search.brackets`).
        halving: The fidelity ladder with short fine-tunes as its low rung (successive halving
            on epochs and training images): each member of a bracket is fine-tuned for
            ``screen_epochs`` epochs on a stratified ``screen_fraction`` of the training images,
            and the one that adds most to the measured front is fine-tuned in full.
        mutate: Every other fresh proposal is a mutant of a front point (its update scheme and
            sub-network one or two steps away), or a baseline over the SRAM budget shrunk into
            it, proposed to the sampler as a joint-scheme trial
            (:mod:`tinytune.search.mutation`); the others are the sampler's. Off with a preset
            (only the sub-network is searched then).
        gpus_per_trial: The share of a GPU each fp32 fine-tune's Ray task asks for (measured,
            short, learning-rate grid, contribution analysis): 0 (the default) fine-tunes on
            CPUs; a fraction lets several fine-tunes share one device; more than 1 must be a
            whole number. The int8 measurement of ``verify_int8`` asks for none: it is the
            bundle's integer arithmetic, run on a CPU. Not part of the search space: where a
            fine-tune ran is stored with its evaluation (``details.device``).
        heartbeat_s: How often a driver beats for its running trials; a trial whose driver has
            not beaten for ``grace_s`` is failed by any other driver and retried (Optuna's
            heartbeat with ``RetryHeartbeatStaleTrialCallback``).
    """

    checkpoint: str
    study_name: str = "tinytune"
    supernet: str = DEFAULT_SUPERNET
    dataset: str = "digits"
    n_classes: int = 10
    data_seed: int = 0
    preset: str | None = None
    trials: int = 12
    time_budget_s: float | None = None
    epoch_budget: float | None = None
    max_proposals: int | None = None
    device: str = "stm32f746"
    engine: str | None = None
    sram_budget_bytes: int | None = 256 * 1024
    flash_budget_bytes: int | None = None
    latency_budget_s: float | None = None
    seed: int = 0
    sampler: str = DEFAULT_SAMPLER
    baselines: bool = True
    reference: bool = True
    tune_lr: bool = True
    repeats: int | None = None
    verify_int8: bool = False
    max_idle_proposals: int = 200
    resume: bool = False
    proxy: bool = False
    proxy_eta: int = 4
    halving: bool = False
    screen_epochs: int = 2
    screen_fraction: float = 0.5
    mutate: bool = False
    gpus_per_trial: float = 0.0
    heartbeat_s: int = 10
    grace_s: int = 30
    contribution_plan: ContributionPlan = field(default_factory=ContributionPlan)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.study_name, str) or not 0 < len(self.study_name.strip()) <= 512:
            raise ConfigError(
                f"--study must be a name of 1 to 512 characters, not only spaces; got "
                f"{self.study_name!r:.80}"
            )
        check_seed(self.seed)
        check_integer(self.trials, "--trials")
        for what, count in (
            ("--proposals", self.max_proposals),
            ("--repeats", self.repeats),
            ("--proxy-eta", self.proxy_eta),
            ("--screen-epochs", self.screen_epochs),
        ):
            if count is not None:
                check_integer(count, what)
        for what, amount in (
            ("--time-budget", self.time_budget_s),
            ("--epoch-budget", self.epoch_budget),
            ("--sram-budget", self.sram_budget_bytes),
            ("--flash-budget", self.flash_budget_bytes),
            ("--latency-budget", self.latency_budget_s),
            ("--screen-fraction", self.screen_fraction),
            ("--gpus-per-trial", self.gpus_per_trial),
        ):
            if amount is not None:
                check_real(amount, what)
        if self.trials < 1:
            raise BudgetError(f"--trials must be >= 1, got {self.trials}")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise BudgetError(f"--time-budget must be > 0 seconds, got {self.time_budget_s}")
        if self.epoch_budget is not None and self.epoch_budget <= 0:
            raise BudgetError(f"--epoch-budget must be > 0 epochs, got {self.epoch_budget}")
        if self.max_proposals is not None and self.max_proposals < 1:
            raise BudgetError(f"--proposals must be >= 1, got {self.max_proposals}")
        for what, value in (
            ("SRAM budget", self.sram_budget_bytes),
            ("flash budget", self.flash_budget_bytes),
            ("latency budget", self.latency_budget_s),
        ):
            if value is not None and value <= 0:
                raise BudgetError(f"the {what} must be > 0, got {value}")
        if self.engine is not None and self.engine not in ENGINES:
            raise ConfigError(
                f"unknown engine {self.engine!r}; allowed: {', '.join(sorted(ENGINES))}"
            )
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"unknown sampler {self.sampler!r}; allowed: {', '.join(SAMPLERS)}")
        if self.preset is not None and self.preset not in PRESET_NAMES:
            raise ConfigError(
                f"unknown preset {self.preset!r}; allowed: {', '.join(PRESET_NAMES)}"
            )
        if self.hardware.precision not in PRECISIONS:
            raise ConfigError(
                f"unknown precision {self.hardware.precision!r}; allowed: {', '.join(PRECISIONS)}"
            )
        if self.repeats is not None and not 1 <= self.repeats <= 20:
            raise ConfigError(f"--repeats must lie in [1, 20], got {self.repeats}")
        if self.proxy_eta < 2:
            raise ConfigError(
                f"--proxy-eta must be >= 2 (proxy-scored candidates per measured one), got "
                f"{self.proxy_eta}"
            )
        if self.proxy and self.halving:
            raise ConfigError(
                "--proxy and --halving are two low rungs of the fidelity ladder; choose one"
            )
        if not 1 <= self.screen_epochs <= MAX_EPOCHS:
            raise ConfigError(
                f"--screen-epochs must lie in [1, {MAX_EPOCHS}], got {self.screen_epochs}"
            )
        if not 0.0 < self.screen_fraction <= 1.0:
            raise ConfigError(f"--screen-fraction must lie in (0, 1], got {self.screen_fraction}")
        if self.halving and self.screen_epochs * self.screen_fraction >= self.finetune.epochs:
            raise ConfigError(
                f"a screening fine-tune ({self.screen_epochs} epochs on {self.screen_fraction:g} "
                f"of the images) must cost less than a measured one ({self.finetune.epochs} "
                "epochs); lower --screen-epochs or --screen-fraction"
            )
        gpus = float(self.gpus_per_trial)
        if gpus < 0.0 or (gpus > 1.0 and not gpus.is_integer()):
            raise ConfigError(
                f"--gpus-per-trial must be a share of one GPU in [0, 1] or a whole number of "
                f"GPUs, got {self.gpus_per_trial:g}"
            )
        if self.heartbeat_s < 1 or self.grace_s <= self.heartbeat_s:
            raise ConfigError(
                f"the heartbeat must be >= 1 s and its grace period longer, got "
                f"{self.heartbeat_s} s and {self.grace_s} s"
            )

    def space(self) -> dict[str, Any]:
        """What makes two runs the same search space (kept with the study): what is searched,
        for which device, and how a candidate's accuracy is measured (``weights``: the SHA-256
        of the supernet checkpoint; ``finetune``: epochs, batch size, the learning rate or ``per
        family``, the repeats or ``auto``), so that the front never ranks fine-tunes of
        different weights or settings against each other."""
        from pathlib import Path

        from tinytune.checkpoints import sha256_file

        weights = Path(self.checkpoint) if self.checkpoint else None
        return {
            "supernet": self.supernet,
            "dataset": self.dataset,
            "data_seed": self.data_seed,
            "preset": self.preset,
            "precision": self.hardware.precision,
            "batch_size": self.hardware.batch_size,
            "update": self.hardware.update,
            "device": self.device,
            "engine": self.engine,
            "objectives": list(OBJECTIVES),
            "weights": sha256_file(weights) if weights and weights.is_file() else None,
            "finetune": {
                "epochs": self.finetune.epochs,
                "batch_size": self.finetune.batch_size,
                "lr": "per family" if self.tune_lr else self.finetune.lr,
                "repeats": "auto" if self.repeats is None else self.repeats,
            },
        }
