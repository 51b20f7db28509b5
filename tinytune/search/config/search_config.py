"""What a search is asked to do: :class:`SearchConfig`, validated once, and its vocabulary
(objectives, samplers, the reference and the baselines a new study measures first). What a study
stores of it is :class:`tinytune.search.study.study_space.StudySpace`.

The defaults and the checks of the fields that options set (``trials``, ``sram_budget_bytes``,
``finetune.epochs``...) are those of :data:`tinytune.options.SEARCH_OPTIONS`; only the fields no
option sets, and the rules between options, are stated here."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tinytune.errors import ConfigError, OptionError, flag
from tinytune.evaluators import FinetuneConfig, HardwareConfig
from tinytune.options import (
    DEFAULT_DATASET,
    SEARCH_OPTIONS,
    config_default,
    config_defaults,
    config_values,
)
from tinytune.samplers import SAMPLERS
from tinytune.search.config.contribution_plan import ContributionPlan
from tinytune.spaces import Candidate, default_network, default_subnet, get_supernet, make_preset

__all__ = [
    "BASELINE_PRESETS",
    "DIRECTIONS",
    "OBJECTIVES",
    "SAMPLERS",
    "SearchConfig",
    "check_new_study_name",
    "reference_candidate",
]

OBJECTIVES = ("accuracy", "sram_bytes", "latency_s")
DIRECTIONS = ("maximize", "minimize", "minimize")
BASELINE_PRESETS = ("last", "bias-only", "mcunetv3", "tinytl")
REFERENCE_PRESET = "full"


def check_new_study_name(name: str) -> None:
    """Refuse to create a study whose name begins or ends with a space (``study=" x"`` is
    almost always a quoting slip, and would make a second study beside ``x``). Callers check
    only names that are not in the database yet.

    A control, format or separator character (a line break, an escape, a bidirectional
    override, U+2028) is refused too: the name is printed in every line that names the
    study, and would break or rewrite them.

    Raises:
        OptionError: the name has a space at either end, or such a character.
    """
    if name != name.strip():
        raise OptionError(
            "study", f"{name!r:.80} begins or ends with a space; give the name without them"
        )
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name):
        raise OptionError(
            "study",
            f"{name!r:.80} holds a control or format character; give a name of printable "
            "characters",
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

    The fields that options set take their defaults from :data:`~tinytune.options.SEARCH_OPTIONS`
    and are checked by its rules (the error names the option); :meth:`from_options` makes a
    configuration of the options' values.

    Attributes:
        checkpoint: Path of the supernet weights the workers load.
        trials: The study's budget of measured fine-tunes (successful or failed), over all its
            runs and all the drivers that share it; None: as many of 12 as fit in 10 minutes
            on the run's workers, sized from the learning-rate grid's fine-tunes
            (:func:`~tinytune.search.config.budgets.size_trials`), 12 without a grid.
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
            split before the first measurement (:mod:`tinytune.search.run.lr_grid`); False
            fine-tunes every candidate at ``finetune.lr``.
        repeats: Train/val partitions each candidate is measured on, its accuracies their
            means; None: 1, or more where the validation split has under 100 images
            (:func:`tinytune.data.val_repeats`).
        engine: What the latency objective predicts (:data:`~tinytune.hwmodels.ENGINES`);
            None: the device's default, the bundle's own kernels where they have a profile
            (built in or calibrated).
        verify_int8: At the end, train each point of the front as the device does (int8,
            batch 1, QAS) and store its accuracy (:mod:`tinytune.search.run.verify_int8`).
        proxy: The fidelity ladder with the additive proxy as its low rung: brackets of
            ``proxy_eta`` candidates scored by a contribution analysis, one promoted to a
            measured fine-tune (:mod:`tinytune.search.ladder.brackets`).
        halving: The fidelity ladder with short fine-tunes as its low rung (successive halving
            on epochs and training images): each member of a bracket is fine-tuned for
            ``screen_epochs`` epochs on a stratified ``screen_fraction`` of the training images,
            and the one that adds most to the measured front is fine-tuned in full.
        mutate: The share of fresh proposals (0 to 1, spread evenly: 0.5 is every other one)
            that are mutants of the front (:mod:`tinytune.search.proposals.policy`); the others
            are the sampler's. Off with a preset.
        climb: The share of the mutants (0 to 1, spread evenly from the second) that climb
            (:mod:`tinytune.search.proposals.climbing`).
        gpus_per_trial: The share of a GPU each fp32 fine-tune's Ray task asks for (measured,
            short, learning-rate grid, contribution analysis): 0 (the default) fine-tunes on
            CPUs; a fraction lets several fine-tunes share one device; more than 1 must be a
            whole number. The int8 measurement of ``verify_int8`` asks for none: it is the
            bundle's integer arithmetic, run on a CPU. Not part of the search space: where a
            fine-tune ran is stored with its evaluation (``details.device``).
        reproducible: Results handed to the driver in the order their tasks were submitted,
            one at a time (:class:`~tinytune.search.execution.executor.InOrder`), so that each
            proposal sees the same results whatever the workers' timing.
        heartbeat_s: How often a driver beats for its running trials; a trial whose driver has
            not beaten for ``grace_s`` is failed by any other driver and retried (Optuna's
            heartbeat with ``RetryHeartbeatStaleTrialCallback``).
    """

    checkpoint: str
    study_name: str = config_default("study_name")
    supernet: str = default_network(DEFAULT_DATASET)
    dataset: str = config_default("dataset")
    n_classes: int = 10
    data_seed: int = config_default("data_seed")
    preset: str | None = config_default("preset")
    trials: int | None = config_default("trials")
    time_budget_s: float | None = config_default("time_budget_s")
    epoch_budget: float | None = config_default("epoch_budget")
    max_proposals: int | None = config_default("max_proposals")
    device: str = config_default("device")
    engine: str | None = config_default("engine")
    sram_budget_bytes: int | None = config_default("sram_budget_bytes")
    flash_budget_bytes: int | None = config_default("flash_budget_bytes")
    latency_budget_s: float | None = config_default("latency_budget_s")
    seed: int = config_default("seed")
    reproducible: bool = config_default("reproducible")
    sampler: str = config_default("sampler")
    baselines: bool = True
    reference: bool = True
    tune_lr: bool = config_default("tune_lr")
    repeats: int | None = config_default("repeats")
    verify_int8: bool = config_default("verify_int8")
    max_idle_proposals: int = 200
    resume: bool = config_default("resume")
    proxy: bool = config_default("proxy")
    proxy_eta: int = config_default("proxy_eta")
    halving: bool = config_default("halving")
    screen_epochs: int = config_default("screen_epochs")
    screen_fraction: float = config_default("screen_fraction")
    mutate: float = config_default("mutate")
    climb: float = config_default("climb")
    gpus_per_trial: float = config_default("gpus_per_trial")
    heartbeat_s: int = 10
    grace_s: int = 30
    contribution_plan: ContributionPlan = field(default_factory=ContributionPlan)
    finetune: FinetuneConfig = field(default_factory=lambda: _nested("finetune", FinetuneConfig))
    hardware: HardwareConfig = field(default_factory=lambda: _nested("hardware", HardwareConfig))

    def __post_init__(self) -> None:
        for option in SEARCH_OPTIONS:  # each field an option sets, by the option's rules
            path = option.config_field
            if path is not None:
                value: Any = self
                for attr in path.split("."):
                    value = getattr(value, attr)
                option.check(value)
        if self.proxy and self.halving:
            raise OptionError.saying(
                "halving",
                flag("proxy", True)
                + " and "
                + flag("halving", True)
                + " are two low rungs of the fidelity ladder; choose one",
            )
        if self.halving and self.screen_epochs * self.screen_fraction >= self.finetune.epochs:
            raise OptionError.saying(
                "screen_epochs",
                f"a screening fine-tune ({self.screen_epochs} epochs on {self.screen_fraction:g} "
                f"of the images) must cost less than a measured one ({self.finetune.epochs} "
                "epochs); lower " + flag("screen_epochs") + " or " + flag("screen_fraction"),
            )
        if self.heartbeat_s < 1 or self.grace_s <= self.heartbeat_s:
            raise ConfigError(
                f"the heartbeat must be >= 1 s and its grace period longer, got "
                f"{self.heartbeat_s} s and {self.grace_s} s"
            )

    @classmethod
    def from_options(cls, values: Mapping[str, Any], **fields: Any) -> SearchConfig:
        """The configuration the options' ``values`` (as :func:`tinytune.options.resolve` gives
        them) ask for, with ``fields`` set beside them (``checkpoint``, what the front door
        resolves: the supernet, the data set's own name and classes).

        Raises:
            OptionError: a value that breaks an option's rules, naming the option.
            ConfigError: a rule between options.
        """
        flat: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {"finetune": {}, "hardware": {}}
        for path, value in config_values(values).items():
            head, _, attr = path.partition(".")
            if attr:
                nested[head][attr] = value
            else:
                flat[path] = value
        return cls(
            **{**flat, **fields},
            finetune=FinetuneConfig(**nested["finetune"]),
            hardware=HardwareConfig(**nested["hardware"]),
        )


def _nested(head: str, make: Any) -> Any:
    """The fine-tuning (``finetune``) or hardware settings of a search given no option."""
    prefix = head + "."
    return make(
        **{
            path.removeprefix(prefix): value
            for path, value in config_defaults().items()
            if path.startswith(prefix)
        }
    )
