"""The options of a search, each declared once: its name, what it takes, its default, its bounds
and its help. ``tinytune search``'s flags, the keyword arguments of :func:`tinytune.optimize` and
the defaults and checks of :class:`~tinytune.search.SearchConfig` are all made from
:data:`SEARCH_OPTIONS`; adding an option is adding an :class:`Option` here (and reading its
value where the search uses it).

An option is named by its keyword argument (``sram_budget``); its flag is the same with hyphens
(``--sram-budget``), always, so that an error can name it without this table
(:class:`tinytune.errors.Flag`). A refused value raises :class:`~tinytune.errors.OptionError`
with the option's name, and each front end words it its own way.

The defaults that more than one front end or command states live here too:
:data:`DEFAULT_STORAGE`, :data:`DEFAULT_DEVICE`, :data:`DEFAULT_DATASET`,
:data:`DEFAULT_WORKERS` (the default network is :func:`tinytune.spaces.default_network`'s, the
default sampler :data:`tinytune.samplers.DEFAULT_SAMPLER`).

This module imports nothing heavy when it is imported (the command line builds ``tinytune
search --help`` from it without torch): the lists an option's value is checked against (devices,
engines, presets) are read when a value is checked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tinytune.errors import (
    PYTHON,
    BudgetOptionError,
    Flag,
    OptionError,
    Style,
    Words,
    flag,
)
from tinytune.samplers import DEFAULT_SAMPLER, SAMPLERS
from tinytune.spaces.supernets import DEFAULT_SUPERNET, IMAGE_NETWORK
from tinytune.units import check_integer, check_real, check_seed, parse_bytes, parse_seconds

__all__ = [
    "DEFAULT_DATASET",
    "DEFAULT_DEVICE",
    "DEFAULT_STORAGE",
    "DEFAULT_WORKERS",
    "SEARCH_OPTIONS",
    "Choice",
    "Count",
    "Duration",
    "File",
    "GpuShare",
    "Kind",
    "Option",
    "Patches",
    "Real",
    "Seed",
    "Size",
    "StudyName",
    "Switch",
    "Text",
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
"""The device a search targets when none is named, and the device of a study stored before its
search space named one."""

DEFAULT_DATASET = "digits"
"""The data set a search fine-tunes on when none is named, and that of a study stored before its
search space named one."""

DEFAULT_WORKERS = 2
"""Evaluations in parallel (Ray tasks) when ``workers`` is not given: one per core of a
two-core machine."""


# ---------------------------------------------------------------------------------------------
# Kinds of value: how a value is checked, and turned into the one the search keeps


@dataclass(frozen=True)
class Kind:
    """What an option takes: the type a Python caller passes (:attr:`api_type`), the one the
    command line parses (:attr:`cli_type`), and the checks.

    Attributes:
        optional: None is a value (the help says what it means).
        budget: a value out of bounds is a :class:`~tinytune.errors.BudgetError`.
    """

    optional: bool = False
    budget: bool = False

    python: ClassVar[Any] = object
    command: ClassVar[Any] = str

    @property
    def api_type(self) -> Any:
        """The annotation of the keyword argument."""
        return self.python | None if self.optional else self.python

    @property
    def cli_type(self) -> Any:
        """The type the command line parses the flag's text as."""
        return self.command | None if self.optional else self.command

    def parse(self, name: str, value: Any) -> Any:
        """``value`` as a caller gives it, checked, as the search keeps it.

        Raises:
            OptionError: naming option ``name``.
        """
        self.check(name, value)
        return value

    def check(self, name: str, value: Any) -> None:
        """Refuse a value that the search cannot keep.

        Raises:
            OptionError: naming option ``name``.
        """
        if value is None and self.optional:
            return
        self._check(name, value)

    def _check(self, name: str, value: Any) -> None:
        raise NotImplementedError

    def refuse(self, name: str, problem: str | Words) -> OptionError:
        """The error of a value of option ``name`` that breaks a bound."""
        return (BudgetOptionError if self.budget else OptionError)(name, problem)


def _bound(high: int | float | Callable[[], int | float] | None) -> int | float | None:
    return high() if callable(high) else high


@dataclass(frozen=True)
class Count(Kind):
    """A Python ``int`` in ``[low, high]`` (either may be None: unbounded; ``high`` may be a
    function, for a bound that another module states)."""

    low: int | None = None
    high: int | Callable[[], int] | None = None

    python: ClassVar[Any] = int
    command: ClassVar[Any] = int

    def _check(self, name: str, value: Any) -> None:
        check_integer(value, Flag(name))
        low, high = self.low, _bound(self.high)
        if (low is not None and value < low) or (high is not None and value > high):
            raise self.refuse(name, f"must {_within(low, high, '[', ']')}, got {value}")


@dataclass(frozen=True)
class Real(Kind):
    """A number (``int`` or ``float``, not NaN) between ``low`` and ``high``, each bound
    included unless open."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    python: ClassVar[Any] = float
    command: ClassVar[Any] = float

    def _check(self, name: str, value: Any) -> None:
        check_real(value, Flag(name))
        low, high = self.low, self.high
        below = low is not None and (value <= low if self.low_open else value < low)
        above = high is not None and (value >= high if self.high_open else value > high)
        if below or above:
            brackets = ("(" if self.low_open else "[", ")" if self.high_open else "]")
            raise self.refuse(name, f"must {_within(low, high, *brackets)}, got {value}")


def _within(low: float | None, high: float | None, opening: str, closing: str) -> str:
    """``be >= 1``, ``be > 0`` or ``lie in [1, 20]``: the bounds of a number, in words."""
    if high is None:
        return f"be {'>' if opening == '(' else '>='} {low:g}"
    if low is None:
        return f"be {'<' if closing == ')' else '<='} {high:g}"
    return f"lie in {opening}{low:g}, {high:g}{closing}"


@dataclass(frozen=True)
class GpuShare(Kind):
    """A share of one GPU in [0, 1], or a whole number of GPUs."""

    python: ClassVar[Any] = float
    command: ClassVar[Any] = float

    def _check(self, name: str, value: Any) -> None:
        check_real(value, Flag(name))
        gpus = float(value)
        if gpus < 0.0 or (gpus > 1.0 and not gpus.is_integer()):
            raise self.refuse(
                name,
                f"must be a share of one GPU in [0, 1] or a whole number of GPUs, got {gpus:g}",
            )


@dataclass(frozen=True)
class Switch(Kind):
    """``True`` or ``False``; on the command line ``--name/--no-name``."""

    python: ClassVar[Any] = bool
    command: ClassVar[Any] = bool

    def _check(self, name: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise self.refuse(name, f"must be True or False, got {value!r:.40}")


@dataclass(frozen=True)
class Choice(Kind):
    """One of the names ``choices()`` lists (read when a value is checked)."""

    choices: Callable[[], Iterable[str]] = tuple  # every Choice names its own

    python: ClassVar[Any] = str
    command: ClassVar[Any] = str

    def _check(self, name: str, value: Any) -> None:
        allowed = list(self.choices())
        if not isinstance(value, str) or value not in allowed:
            raise self.refuse(name, f"must be one of {', '.join(allowed)}, got {value!r:.80}")


@dataclass(frozen=True)
class Text(Kind):
    """A string (a URL, an address, a name that another module checks)."""

    python: ClassVar[Any] = str
    command: ClassVar[Any] = str

    def _check(self, name: str, value: Any) -> None:
        if not isinstance(value, str):
            raise self.refuse(name, f"must be a str, got {value!r:.80}")


@dataclass(frozen=True)
class Patches(Kind):
    """How a frozen prefix is scheduled: ``auto``, ``none``, or ``N:B`` (N × N patches over
    the stem and the first B blocks, N in 2 .. 8); whether a network can run ``N:B`` is
    checked on its graph (:meth:`tinytune.evaluators.HardwareEvaluator.schedule`)."""

    python: ClassVar[Any] = str
    command: ClassVar[Any] = str

    def _check(self, name: str, value: Any) -> None:
        if value in ("auto", "none"):
            return
        n, _, b = value.partition(":") if isinstance(value, str) else ("", "", "")
        if not (n.isdigit() and b.isdigit() and 2 <= int(n) <= 8):
            raise self.refuse(
                name,
                "must be auto, none or N:B (N x N patches, N in 2 .. 8, over the stem and the "
                f"first B blocks, e.g. 4:4), got {value!r:.40}",
            )


STUDY_NAME_LENGTH = 512
"""The longest study name (Optuna's column holds 512 characters)."""


@dataclass(frozen=True)
class StudyName(Kind):
    """A study's name: 1 to :data:`STUDY_NAME_LENGTH` characters, not only spaces."""

    python: ClassVar[Any] = str
    command: ClassVar[Any] = str

    def _check(self, name: str, value: Any) -> None:
        if not isinstance(value, str) or not 0 < len(value.strip()) <= STUDY_NAME_LENGTH:
            raise self.refuse(
                name,
                f"must be a name of 1 to {STUDY_NAME_LENGTH} characters, not only spaces; got "
                f"{value!r:.80}",
            )


@dataclass(frozen=True)
class Seed(Kind):
    """A seed numpy's generators take: an ``int`` from 0 to :data:`tinytune.units.MAX_SEED`."""

    python: ClassVar[Any] = int
    command: ClassVar[Any] = int

    def _check(self, name: str, value: Any) -> None:
        check_seed(value, Flag(name))


@dataclass(frozen=True)
class File(Kind):
    """A path: a non-blank ``str`` or a :class:`~pathlib.Path`, kept as a ``Path``."""

    python: ClassVar[Any] = str | Path
    command: ClassVar[Any] = Path

    def parse(self, name: str, value: Any) -> Any:
        self.check(name, value)
        return None if value is None else Path(value)

    def _check(self, name: str, value: Any) -> None:
        if not isinstance(value, str | Path) or not str(value).strip():
            raise self.refuse(name, f"must be a path, got {value!r:.80}")


@dataclass(frozen=True)
class Size(Kind):
    """Bytes: a number, or text with a unit (``256KB``; KB = 1024 B); ``"none"`` where the option
    is optional. The search keeps a positive ``int``."""

    python: ClassVar[Any] = int | str
    command: ClassVar[Any] = str

    def parse(self, name: str, value: Any) -> Any:
        if self.optional and (
            value is None or (isinstance(value, str) and value.lower() == "none")
        ):
            return None
        if isinstance(value, str):
            return parse_bytes(value, Flag(name))
        check_real(value, Flag(name))
        self.check(name, int(value))
        return int(value)

    def _check(self, name: str, value: Any) -> None:
        check_real(value, Flag(name))
        if value <= 0:
            raise self.refuse(name, f"must be > 0, got {value}")


@dataclass(frozen=True)
class Duration(Kind):
    """Seconds: a number, or text with a unit (``300s``, ``5m``, ``500ms``); ``bare=False``
    refuses text without one. The search keeps a positive ``float``."""

    bare: bool = True

    python: ClassVar[Any] = float | str
    command: ClassVar[Any] = str

    def parse(self, name: str, value: Any) -> Any:
        if value is None and self.optional:
            return None
        if isinstance(value, str):
            return parse_seconds(value, Flag(name), bare=self.bare)
        check_real(value, Flag(name))
        self.check(name, float(value))
        return float(value)

    def _check(self, name: str, value: Any) -> None:
        check_real(value, Flag(name))
        if value <= 0:
            raise self.refuse(name, f"must be > 0, got {value}")


# ---------------------------------------------------------------------------------------------
# The options


@dataclass(frozen=True)
class Option:
    """One option of a search.

    Attributes:
        name: the keyword argument of :func:`tinytune.optimize`; the flag is
            ``--`` + ``name`` with hyphens.
        kind: what it takes, and its checks.
        default: what it is when not given, as a caller would give it (``"256KB"``).
        help: what it does, for ``--help`` and the Python docstring (options in it as
            :class:`~tinytune.errors.Flag`).
        field: where :class:`~tinytune.search.SearchConfig` keeps the value: an attribute, or
            a dotted path into its fine-tuning or hardware settings (``finetune.epochs``);
            ``""``: the attribute of the option's own name; None: a setting of the run (where
            it stores, how it runs), not of the search.
        to_field: what the search keeps for a parsed value, where that is not the value itself.
        also: further fields the parsed value sets (``seed`` seeds the fine-tunes too).
        positional: the Python call may give it first without its keyword (the data set).
    """

    name: str
    kind: Kind
    default: Any
    help: str | Words
    field: str | None = ""
    to_field: Callable[[Any], Any] | None = None
    also: Callable[[Any], dict[str, Any]] | None = None
    positional: bool = False

    @property
    def flag(self) -> str:
        """The command line's flag: ``--sram-budget``."""
        return "--" + self.name.replace("_", "-")

    @property
    def config_field(self) -> str | None:
        """The path of the value in :class:`~tinytune.search.SearchConfig`, or None."""
        return self.name if self.field == "" else self.field

    def help_text(self, style: Style) -> str:
        """The help, its options named as ``style``'s front end names them."""
        return self.help if isinstance(self.help, str) else self.help.worded(style)

    def parse(self, value: Any) -> Any:
        """``value`` as a caller gives it, checked, as the search keeps it.

        Raises:
            OptionError: naming this option (a BudgetOptionError for a malformed budget).
        """
        return self.kind.parse(self.name, value)

    def check(self, value: Any) -> None:
        """Refuse a value the search keeps that breaks this option's rules.

        Raises:
            OptionError: naming this option.
        """
        self.kind.check(self.name, value)

    def config_values(self, parsed: Any) -> dict[str, Any]:
        """The fields of :class:`~tinytune.search.SearchConfig` (by path) that the parsed value
        sets; none for a setting of the run."""
        path = self.config_field
        if path is None:
            return {}
        values = {path: self.to_field(parsed) if self.to_field else parsed}
        if self.also is not None:
            values.update(self.also(parsed))
        return values


def _max_epochs() -> int:
    from tinytune.evaluators.finetune import MAX_EPOCHS

    return MAX_EPOCHS


def _device_names() -> list[str]:
    from tinytune.hwmodels.registry import device_names

    return device_names()


def _engines() -> list[str]:
    from tinytune.hwmodels.devices import ENGINES

    return sorted(ENGINES)


def _presets() -> tuple[str, ...]:
    from tinytune.spaces import PRESET_NAMES

    return PRESET_NAMES


def _precisions() -> list[str]:
    from tinytune.hwmodels.memory import PRECISIONS

    return sorted(PRECISIONS)


def _fine_tuning_rate(lr: float | None) -> float:
    """The rate of the fine-tunes: ``lr``, or, where the rate of each scheme family is chosen on
    validation, the evaluator's default (the rate of a family whose grid failed)."""
    from tinytune.evaluators.finetune import FinetuneConfig

    return FinetuneConfig.lr if lr is None else lr


SEARCH_OPTIONS: tuple[Option, ...] = (
    Option("study", StudyName(), "tinytune", "Study name (continued if it exists).", "study_name"),
    Option(
        "storage",
        Text(),
        DEFAULT_STORAGE,
        "SQLAlchemy URL of the database (SQLite or PostgreSQL).",
        None,
    ),
    Option(
        "supernet",
        Text(optional=True),
        None,
        f"{IMAGE_NETWORK} (ImageNet weights), ofa-proxyless-w<width>, ofa-mbv3-w<width> or a "
        f"published OFA id; default: {IMAGE_NETWORK} for imagefolder:PATH, {DEFAULT_SUPERNET} "
        "for the built-in data sets.",
        None,  # resolved from the data set by tinytune.spaces.default_network
    ),
    Option(
        "dataset",
        Text(),
        DEFAULT_DATASET,
        "digits, procedural or imagefolder:PATH.",
        positional=True,
    ),
    Option(
        "data_seed",
        Seed(),
        0,
        "Seed of the data set's split into training, validation and test images (a study "
        "keeps the split it was made with).",
    ),
    Option(
        "preset",
        Choice(optional=True, choices=_presets),
        None,
        "Fix the scheme to a preset (full, last, bias-only, bn+last, tinytl, mcunetv3) and "
        "search sub-networks only.",
    ),
    Option(
        "trials",
        Count(low=1, budget=True),
        12,
        "Budget: measured fine-tunes of the study, over all its runs.",
    ),
    Option(
        "resume",
        Switch(),
        False,
        "Continue an existing study (after a crash) up to its " + flag("trials") + ".",
    ),
    Option(
        "time_budget",
        Duration(optional=True, budget=True),
        None,
        "Budget: stop proposing after this long (e.g. 300s, 5m).",
        "time_budget_s",
    ),
    Option(
        "epoch_budget",
        Real(low=0.0, low_open=True, optional=True, budget=True),
        None,
        "Budget: fine-tuning epochs of this run, every fine-tune counted (passes over the "
        "training split; a measured fine-tune is " + flag("epochs") + ").",
    ),
    Option(
        "device",
        Choice(choices=_device_names),
        DEFAULT_DEVICE,
        "Target device (see 'tinytune devices'): its latency profile and limits.",
    ),
    Option(
        "engine",
        Choice(optional=True, choices=_engines),
        None,
        "What the latency objective predicts: bundle (the exported C kernels), published (a "
        "typical int8 inference engine) or pytorch; default: bundle where the device has a "
        "profile of it.",
    ),
    Option(
        "sram_budget",
        Size(optional=True, budget=True),
        "256KB",
        "Peak training SRAM allowed on the device (e.g. 256KB; 'none').",
        "sram_budget_bytes",
    ),
    Option(
        "flash_budget",
        Size(optional=True, budget=True),
        None,
        "Flash allowed (e.g. 1MB; default: the device's flash).",
        "flash_budget_bytes",
    ),
    Option(
        "latency_budget",
        Duration(optional=True, budget=True, bare=False),
        None,
        "Predicted training-step latency allowed on the device (e.g. 500ms).",
        "latency_budget_s",
    ),
    Option(
        "precision",
        Choice(choices=_precisions),
        "int8",
        "On-device training format: int8 or fp32.",
        "hardware.precision",
    ),
    Option(
        "patches",
        Patches(),
        "auto",
        "Run each candidate's frozen prefix patch by patch (MCUNetV2; the same values, less "
        "SRAM, more time): auto (where whole images exceed the SRAM budget, the fastest "
        "schedule that fits), none, or N:B (N x N patches over the stem and the first B "
        "blocks).",
        "hardware.patches",
    ),
    Option(
        "workers",
        Count(low=1, optional=True),
        None,
        f"Parallel evaluations (Ray tasks); default {DEFAULT_WORKERS}.",
        None,
    ),
    Option(
        "ray_address",
        Text(optional=True),
        None,
        "Address of an existing Ray cluster (default: local).",
        None,
    ),
    Option("inline", Switch(), False, "Evaluate in this process instead of Ray workers.", None),
    Option(
        "max_retries", Count(low=0), 2, "Retries of an evaluation whose Ray worker died.", None
    ),
    Option(
        "gpus_per_trial",
        GpuShare(),
        0.0,
        "Share of a GPU each fine-tune's Ray task asks for (e.g. 0.25: four share a device; "
        "above 1 a whole number); 0: CPUs. The int8 training of "
        + flag("verify_int8", True)
        + " stays on CPUs.",
    ),
    Option(
        "weights",
        File(optional=True),
        None,
        "Weights file: a published OFA checkpoint, or the weights of a "
        + flag("supernet")
        + " PATH.json config (efficientnet-lite0's come with the package).",
        None,
    ),
    Option(
        "epochs",
        Count(low=1, high=_max_epochs),
        8,
        "Fine-tuning epochs per candidate.",
        "finetune.epochs",
    ),
    Option(
        "lr",
        Real(low=0.0, high=10.0, low_open=True, high_open=True, optional=True),
        None,
        "Fine-tuning learning rate (SGD) of every candidate; default: chosen per scheme family "
        "on the validation split before the first measurement.",
        "finetune.lr",
        to_field=_fine_tuning_rate,
        also=lambda lr: {"tune_lr": lr is None},
    ),
    Option("batch_size", Count(low=1), 32, "Fine-tuning batch size.", "finetune.batch_size"),
    Option(
        "pretrain_steps",
        Count(low=1, optional=True),
        None,
        "Pre-train by the quick recipe with this many sandwich-rule steps (into the cache) "
        "instead of using the shipped checkpoint; without a shipped checkpoint the quick "
        "recipe's 300.",
        None,
    ),
    Option(
        "repeats",
        Count(low=1, high=20, optional=True),
        None,
        "Measure each candidate on this many train/validation partitions (default: 1, or up to "
        "5 where the validation split has under 100 images).",
    ),
    Option(
        "verify_int8",
        Switch(),
        False,
        "At the end, train each front point as the device does (int8, batch 1, QAS, the "
        "bundle's integer step) and show the accuracy it reaches (minutes a point).",
    ),
    Option(
        "seed",
        Seed(),
        0,
        "Seed of the sampler and of fine-tuning.",
        also=lambda seed: {"finetune.seed": seed},
    ),
    Option(
        "sampler",
        Choice(choices=lambda: SAMPLERS),
        DEFAULT_SAMPLER,
        "Optuna sampler: tpe, tpe-early (models from the 5th trial on), gp (Gaussian process, "
        "from the 5th trial on), random or nsga2.",
    ),
    Option(
        "proxy",
        Switch(),
        False,
        "Fidelity ladder: score many candidates by the additive proxy (a contribution analysis, "
        "stored and reused) and fine-tune only the promising ones.",
    ),
    Option(
        "proxy_eta",
        Count(low=2),
        4,
        "With "
        + flag("proxy", True)
        + " or "
        + flag("halving", True)
        + ": candidates scored at the low fidelity per measured one.",
    ),
    Option(
        "halving",
        Switch(),
        False,
        "Fidelity ladder by successive halving: screen candidates by short fine-tunes ("
        + flag("screen_epochs")
        + " on "
        + flag("screen_fraction")
        + " of the training images) and fine-tune in full only the most promising of each "
        "bracket.",
    ),
    Option(
        "screen_epochs",
        Count(low=1, high=_max_epochs),
        2,
        "With " + flag("halving", True) + ": epochs of a screening fine-tune.",
    ),
    Option(
        "screen_fraction",
        Real(low=0.0, high=1.0, low_open=True),
        0.5,
        "With " + flag("halving", True) + ": share of the training images a screening sees.",
    ),
    Option(
        "mutate",
        Switch(),
        False,
        "Every other fresh proposal a mutant of a front point (its update scheme and sub-network "
        "one or two steps away) or a baseline over the SRAM budget shrunk into it; the others "
        "the sampler's.",
    ),
    Option(
        "proposals",
        Count(low=1, optional=True, budget=True),
        None,
        "Budget: trials proposed in this run (any fidelity).",
        "max_proposals",
    ),
)
"""Every option of ``tinytune search`` and :func:`tinytune.optimize`, in the order of
``--help``."""

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
