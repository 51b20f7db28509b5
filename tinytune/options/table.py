"""The options of a search, each declared once (:class:`SearchOptions`, and the data set
:data:`DATASET`), and what is made of them: the keyword arguments' values resolved and checked,
:class:`~tinytune.search.SearchConfig`'s values and defaults, the help of the command line and
of :func:`tinytune.optimize`.
"""

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from tinytune.errors import (
    PYTHON,
    Style,
    flag,
)
from tinytune.options.kinds import (
    Choice,
    Count,
    Duration,
    File,
    GpuShare,
    NetworkOption,
    Patches,
    Real,
    Seed,
    Size,
    StudyName,
    Switch,
    Text,
)
from tinytune.options.option import Option
from tinytune.samplers import DEFAULT_SAMPLER, SAMPLERS, samplers_help
from tinytune.spaces.supernets import DEFAULT_SUPERNET, IMAGE_NETWORK

if TYPE_CHECKING:
    import torch

__all__ = [
    "AUTO_REPEATS",
    "DATASET",
    "DEFAULT_DATASET",
    "DEFAULT_DEVICE",
    "DEFAULT_STORAGE",
    "DEFAULT_WORKERS",
    "MAX_EPOCHS",
    "MAX_LR",
    "MAX_WEIGHT_DECAY",
    "PER_FAMILY",
    "SEARCH_OPTIONS",
    "SearchOptions",
    "config_default",
    "config_defaults",
    "config_values",
    "describe",
    "option",
    "resolve",
]

DEFAULT_STORAGE = "sqlite:///tinytune.db"
"""The database of every command that reads or writes studies when none is named."""

DEFAULT_DEVICE = "stm32f746"
"""The device a search targets when none is named."""

DEFAULT_DATASET = "digits"
"""The data set a search fine-tunes on when none is named."""

PER_FAMILY = "per family"
"""The stored learning rate of a study whose rate is chosen per scheme family on validation."""

AUTO_REPEATS = "auto"
"""The stored repeats of a study whose partitions follow the validation split's size."""

DEFAULT_WORKERS = 2
"""Evaluations in parallel (Ray tasks) when ``workers`` is not given: one per core of a
two-core machine."""


MAX_EPOCHS = 1000
"""The most epochs a fine-tune may run: twenty times the 50 that TinyTL and MCUNetV3 fine-tune
for. A time budget is checked between fine-tunes, so one of a mistyped length (``--epochs
80000000``) would run past it for days."""

MAX_LR = 10.0
"""The learning rate a fine-tune stays below (an open bound): the grids' rates go to 3.2."""

MAX_WEIGHT_DECAY = 0.1
"""The largest weight decay a fine-tune takes: ten times the 0.01 of the strongest fine-tuning
recipes; beyond it the decay, not the data, sets the weights."""


def _device_names() -> list[str]:
    from tinytune.hwmodels.registry import device_names

    return device_names()


def _engines() -> list[str]:
    from tinytune.hwmodels.profile import ENGINES

    return sorted(ENGINES)


def _presets() -> tuple[str, ...]:
    from tinytune.spaces import PRESET_NAMES

    return PRESET_NAMES


def _precisions() -> list[str]:
    from tinytune.hwmodels.memory import PRECISIONS

    return sorted(PRECISIONS)


def _augments() -> tuple[str, ...]:
    from tinytune.evaluators.finetune import AUGMENTS

    return AUGMENTS


def _fine_tuning_rate(lr: float | None) -> float:
    """The rate of the fine-tunes: ``lr``, or, where the rate of each scheme family is chosen on
    validation, the evaluator's default (the rate of a family whose grid failed)."""
    from tinytune.evaluators.finetune import FinetuneConfig

    return FinetuneConfig.lr if lr is None else lr


DATASET: Option = Option(
    "--dataset",
    Text(),
    DEFAULT_DATASET,
    "digits, procedural, imagefolder:PATH, series:PATH (a sensor's windows or a "
    "spectrogram's features: a folder of CSV files per class, or an .npz of X and y) or "
    "audio:PATH (a folder of WAV clips per keyword, as log-mel features); the last two "
    "searched with your own network of that input as the supernet.",
    positional=True,
)
"""The data set: the command's argument, and the first argument of :func:`tinytune.optimize`,
by position too (the one option not in :class:`SearchOptions`)."""


class SearchOptions(TypedDict, total=False):
    """Every option of ``tinytune search`` and :func:`tinytune.optimize` but the data set, in
    the order of ``--help``: each one's keyword argument, the type a Python caller gives it and,
    in its :class:`Option`, its flag, kind, default, help and where the search keeps it.

    This is the one declaration of the options: :func:`tinytune.optimize` takes them as its
    keyword arguments (``**options: Unpack[SearchOptions]``, which type checkers read), the
    command line's flags, :data:`SEARCH_OPTIONS`, the defaults and checks of
    :class:`~tinytune.search.SearchConfig` and the study's stored space are made from it.
    """

    study: Annotated[
        str,
        Option(
            "--study",
            StudyName(),
            "tinytune",
            "Study name (continued if it exists).",
            "study_name",
        ),
    ]
    storage: Annotated[
        str,
        Option(
            "--storage",
            Text(),
            DEFAULT_STORAGE,
            "SQLAlchemy URL of the database (SQLite or PostgreSQL).",
            None,
        ),
    ]
    supernet: Annotated[
        "str | torch.nn.Module | None",
        Option(
            "--supernet",
            NetworkOption(optional=True),
            None,
            f"{IMAGE_NETWORK} (ImageNet weights), ofa-proxyless-w<width>, ofa-mbv3-w<width>, a "
            "published OFA id, or your own network as FILE.pt2 (torch.export) or FILE.onnx (from "
            "Python also a torch.nn.Module, with example_input); "
            f"default: {IMAGE_NETWORK} for imagefolder:PATH, {DEFAULT_SUPERNET} for the built-in "
            "data sets.",
            None,  # resolved from the data set by tinytune.spaces.default_network
        ),
    ]
    data_seed: Annotated[
        int,
        Option(
            "--data-seed",
            Seed(),
            0,
            "Seed of the data set's split into training, validation and test images (a study "
            "keeps the split it was made with).",
        ),
    ]
    preset: Annotated[
        str | None,
        Option(
            "--preset",
            Choice(optional=True, choices=_presets),
            None,
            "Fix the scheme to a preset (full, last, bias-only, bn+last, tinytl, mcunetv3) and "
            "search sub-networks only.",
        ),
    ]
    trials: Annotated[
        int | None,
        Option(
            "--trials",
            Count(low=1, budget=True, optional=True),
            None,
            "Budget: measured fine-tunes of the study, over all its runs (default: as many of 12 "
            "as fit in 10 minutes on the run's workers, timed by the learning-rate grid; 12 where "
            "no grid is run).",
        ),
    ]
    resume: Annotated[
        bool,
        Option(
            "--resume",
            Switch(),
            False,
            "Continue an existing study (after a crash) up to its " + flag("trials") + ".",
        ),
    ]
    time_budget: Annotated[
        float | str | None,
        Option(
            "--time-budget",
            Duration(optional=True, budget=True),
            None,
            "Budget: stop proposing after this long (e.g. 300s, 5m).",
            "time_budget_s",
        ),
    ]
    epoch_budget: Annotated[
        float | None,
        Option(
            "--epoch-budget",
            Real(low=0.0, low_open=True, optional=True, budget=True),
            None,
            "Budget: fine-tuning epochs of this run, every fine-tune counted (passes over the "
            "training split; a measured fine-tune is " + flag("epochs") + ").",
        ),
    ]
    device: Annotated[
        str,
        Option(
            "--device",
            Choice(choices=_device_names),
            DEFAULT_DEVICE,
            "Target device (see 'tinytune devices'): its latency profile and limits.",
        ),
    ]
    engine: Annotated[
        str | None,
        Option(
            "--engine",
            Choice(optional=True, choices=_engines),
            None,
            "What the latency objective predicts: bundle (the exported C kernels), published (a "
            "typical int8 inference engine) or pytorch; default: bundle where the device has a "
            "profile of it.",
        ),
    ]
    sram_budget: Annotated[
        int | str | None,
        Option(
            "--sram-budget",
            Size(optional=True, budget=True),
            "256KB",
            "Peak training SRAM allowed on the device (e.g. 256KB; 'none').",
            "sram_budget_bytes",
        ),
    ]
    flash_budget: Annotated[
        int | str | None,
        Option(
            "--flash-budget",
            Size(optional=True, budget=True),
            None,
            "Flash allowed (e.g. 1MB; default: the device's flash).",
            "flash_budget_bytes",
        ),
    ]
    latency_budget: Annotated[
        float | str | None,
        Option(
            "--latency-budget",
            Duration(optional=True, budget=True, bare=False),
            None,
            "Predicted training-step latency allowed on the device (e.g. 500ms).",
            "latency_budget_s",
        ),
    ]
    precision: Annotated[
        str,
        Option(
            "--precision",
            Choice(choices=_precisions),
            "int8",
            "On-device training format: int8 or fp32.",
            "hardware.precision",
        ),
    ]
    patches: Annotated[
        str,
        Option(
            "--patches",
            Patches(),
            "auto",
            "Run each candidate's frozen prefix patch by patch (MCUNetV2; the same values, less "
            "SRAM, more time): auto (where whole images exceed the SRAM budget, the fastest "
            "schedule that fits), none, or N:B (N x N patches over the stem and the first B "
            "blocks).",
            "hardware.patches",
        ),
    ]
    workers: Annotated[
        int | None,
        Option(
            "--workers",
            Count(low=1, optional=True),
            None,
            f"Parallel evaluations (Ray tasks); default {DEFAULT_WORKERS}.",
            None,
        ),
    ]
    ray_address: Annotated[
        str | None,
        Option(
            "--ray-address",
            Text(optional=True),
            None,
            "Address of an existing Ray cluster (default: local).",
            None,
        ),
    ]
    inline: Annotated[
        bool,
        Option(
            "--inline", Switch(), False, "Evaluate in this process instead of Ray workers.", None
        ),
    ]
    max_retries: Annotated[
        int,
        Option(
            "--max-retries",
            Count(low=0),
            2,
            "Retries of an evaluation whose Ray worker died.",
            None,
        ),
    ]
    gpus_per_trial: Annotated[
        float,
        Option(
            "--gpus-per-trial",
            GpuShare(),
            0.0,
            "Share of a GPU each fine-tune's Ray task asks for (e.g. 0.25: four share a device; "
            "above 1 a whole number); 0: CPUs. The int8 training of "
            + flag("verify_int8", True)
            + " stays on CPUs.",
        ),
    ]
    weights: Annotated[
        str | Path | None,
        Option(
            "--weights",
            File(optional=True),
            None,
            "Weights file: a published OFA checkpoint, or the weights of a "
            + flag("supernet")
            + " PATH.json config (efficientnet-lite0's come with the package).",
            None,
        ),
    ]
    epochs: Annotated[
        int,
        Option(
            "--epochs",
            Count(low=1, high=MAX_EPOCHS),
            8,
            "Fine-tuning epochs per candidate.",
            "finetune.epochs",
            stored=True,
        ),
    ]
    lr: Annotated[
        float | None,
        Option(
            "--lr",
            Real(low=0.0, high=MAX_LR, low_open=True, high_open=True, optional=True),
            None,
            "Fine-tuning learning rate (SGD) of every candidate; default: chosen per scheme "
            "family on the validation split before the first measurement.",
            "finetune.lr",
            to_field=_fine_tuning_rate,
            also=lambda lr: {"tune_lr": lr is None},
            stored=True,
            stored_none=PER_FAMILY,
            stored_from=lambda config: None if config.tune_lr else config.finetune.lr,
        ),
    ]
    batch_size: Annotated[
        int,
        Option(
            "--batch-size",
            Count(low=1),
            32,
            "Fine-tuning batch size.",
            "finetune.batch_size",
            stored=True,
        ),
    ]
    weight_decay: Annotated[
        float,
        Option(
            "--weight-decay",
            Real(low=0.0, high=MAX_WEIGHT_DECAY),
            0.0,
            "Fine-tuning weight decay (L2, SGD's) of the trained convolution and classifier "
            "weights; biases and scales have none. The device's int8 training (the bundle, "
            + flag("verify_int8")
            + ") has none.",
            "finetune.weight_decay",
            stored=True,
        ),
    ]
    augment: Annotated[
        str,
        Option(
            "--augment",
            Choice(choices=_augments),
            "none",
            "Fine-tune on random resized crops (crop) and mirror images (crop-flip) of the "
            "training images too; image data only (the bundle trains on samples as given).",
            "finetune.augment",
            stored=True,
            stored_absent="none",  # every fine-tune before the option
        ),
    ]
    pretrain_steps: Annotated[
        int | None,
        Option(
            "--pretrain-steps",
            Count(low=1, optional=True),
            None,
            "Pre-train by the quick recipe with this many sandwich-rule steps (into the cache) "
            "instead of using the shipped checkpoint; without a shipped checkpoint the quick "
            "recipe's 300.",
            None,
        ),
    ]
    repeats: Annotated[
        int | None,
        Option(
            "--repeats",
            Count(low=1, high=20, optional=True),
            None,
            "Measure each candidate on this many train/validation partitions (default: 1, or up "
            "to 5 where the validation split has under 100 images).",
            stored=True,
            stored_none=AUTO_REPEATS,
        ),
    ]
    verify_int8: Annotated[
        bool,
        Option(
            "--verify-int8",
            Switch(),
            False,
            "At the end, train each front point as the device does (int8, batch 1, QAS, the "
            "bundle's integer step) and show the accuracy it reaches (minutes a point).",
        ),
    ]
    seed: Annotated[
        int,
        Option(
            "--seed",
            Seed(),
            0,
            "Seed of the sampler and of fine-tuning.",
            also=lambda seed: {"finetune.seed": seed},
        ),
    ]
    reproducible: Annotated[
        bool,
        Option(
            "--reproducible",
            Switch(),
            False,
            "Take each fine-tune's result in the order the fine-tunes started, so that a seed "
            "makes the same front however fast each worker is (one machine, no time budget; "
            "slower: an early result waits for those started before it).",
        ),
    ]
    sampler: Annotated[
        str,
        Option(
            "--sampler",
            Choice(choices=lambda: SAMPLERS),
            DEFAULT_SAMPLER,
            "Optuna sampler: " + samplers_help() + ".",
        ),
    ]
    proxy: Annotated[
        bool,
        Option(
            "--proxy",
            Switch(),
            False,
            "Fidelity ladder: score many candidates by the additive proxy (a contribution "
            "analysis, stored and reused) and fine-tune only the promising ones.",
        ),
    ]
    proxy_eta: Annotated[
        int,
        Option(
            "--proxy-eta",
            Count(low=2),
            4,
            "With "
            + flag("proxy", True)
            + " or "
            + flag("halving", True)
            + ": candidates scored at the low fidelity per measured one.",
        ),
    ]
    halving: Annotated[
        bool,
        Option(
            "--halving",
            Switch(),
            False,
            "Fidelity ladder by successive halving: screen candidates by short fine-tunes ("
            + flag("screen_epochs")
            + " on "
            + flag("screen_fraction")
            + " of the training images) and fine-tune in full only the most promising of each "
            "bracket.",
        ),
    ]
    screen_epochs: Annotated[
        int,
        Option(
            "--screen-epochs",
            Count(low=1, high=MAX_EPOCHS),
            2,
            "With " + flag("halving", True) + ": epochs of a screening fine-tune.",
        ),
    ]
    screen_fraction: Annotated[
        float,
        Option(
            "--screen-fraction",
            Real(low=0.0, high=1.0, low_open=True),
            0.5,
            "With " + flag("halving", True) + ": share of the training images a screening sees.",
        ),
    ]
    mutate: Annotated[
        float,
        Option(
            "--mutate",
            Real(low=0.0, high=1.0),
            1.0,
            "Share of the fresh proposals (0 to 1) that are mutants of a front point (one or two "
            "steps away in scheme, sub-network or patches; " + flag("climb", 0.5) + ") or a "
            "baseline shrunk into the SRAM budget; the rest are the sampler's. 0: the sampler "
            "alone (docs/searching.md).",
        ),
    ]
    climb: Annotated[
        float,
        Option(
            "--climb",
            Real(low=0.0, high=1.0),
            0.5,
            "Share of the mutants (0 to 1) that climb: a mutant of the most accurate fine-tune "
            "that does more work (a larger input, a later cut, a deeper stage); the other parents "
            "are drawn by their share of the front's hypervolume. 0: no climbing "
            "(docs/searching.md).",
        ),
    ]
    proposals: Annotated[
        int | None,
        Option(
            "--proposals",
            Count(low=1, optional=True, budget=True),
            None,
            "Budget: trials proposed in this run (any fidelity).",
            "max_proposals",
        ),
    ]


def _declared() -> tuple[Option, ...]:
    """The options of :class:`SearchOptions`, in order, after the data set.

    Raises:
        ValueError: a keyword that is not its option's name.
    """
    declared = [DATASET]
    for name, annotation in SearchOptions.__annotations__.items():
        (o,) = (m for m in annotation.__metadata__ if isinstance(m, Option))
        if o.name != name:
            raise ValueError(f"SearchOptions.{name} declares option {o.flag}")
        declared.append(o)
    return tuple(declared)


SEARCH_OPTIONS: tuple[Option, ...] = _declared()
"""Every option of ``tinytune search`` and :func:`tinytune.optimize`: the data set, then those of
:class:`SearchOptions`."""
_BY_NAME = {o.name: o for o in SEARCH_OPTIONS}


def option(name: str) -> Option:
    """The option of keyword argument ``name``.

    Raises:
        KeyError: no such option.
    """
    return _BY_NAME[name]


def resolve(given: Mapping[str, Any]) -> dict[str, Any]:
    """Every option's value as the search keeps it (budgets in bytes and seconds, a path as a
    ``Path``), checked in the order of :data:`SEARCH_OPTIONS`; an option not given is its
    default.

    Raises:
        OptionError: the first option whose value is refused, naming it.
    """
    return {o.name: o.parse(given.get(o.name, o.default)) for o in SEARCH_OPTIONS}


def config_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of :class:`~tinytune.search.SearchConfig` (by path, ``finetune.epochs``) that
    the options' ``values`` (as :func:`resolve` gives them) set."""
    fields: dict[str, Any] = {}
    for o in SEARCH_OPTIONS:
        fields.update(o.config_values(values[o.name]))
    return fields


@functools.cache
def _default_config_values() -> dict[str, Any]:
    return config_values(resolve({}))


def config_defaults() -> dict[str, Any]:
    """What :class:`~tinytune.search.SearchConfig` holds when no option is given, by path: the
    defaults of :data:`SEARCH_OPTIONS` as the search keeps them."""
    return dict(_default_config_values())


def config_default(path: str) -> Any:
    """What :class:`~tinytune.search.SearchConfig` holds at ``path`` when no option is given:
    the defaults of :data:`SEARCH_OPTIONS`, as the search keeps them (``sram_budget_bytes``:
    262144).

    Raises:
        KeyError: no option sets ``path``.
    """
    return _default_config_values()[path]


def describe(style: Style = PYTHON, width: int = 92) -> str:
    """The options as a docstring's ``Args:`` section: each one and its help, wrapped at
    ``width`` (the defaults are the signature's)."""
    import textwrap

    lines = ["Args:"]
    for o in SEARCH_OPTIONS:
        name = o.name if style == PYTHON else o.flag
        lines += textwrap.wrap(
            f"{name}: {o.help_text(style)}",
            width,
            initial_indent="    ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
    return "\n".join(lines)
