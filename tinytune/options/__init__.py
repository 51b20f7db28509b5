"""The options of a search, each declared once, as a keyword argument of
:class:`SearchOptions`: its type, and in its :class:`Option` its flag, kind, default, bounds,
help and the field of :class:`~tinytune.search.SearchConfig` that keeps it.
:func:`tinytune.optimize` takes them as keyword arguments (type checkers read the declaration),
and ``tinytune search``'s flags, :data:`SEARCH_OPTIONS` and the defaults and checks of
:class:`~tinytune.search.SearchConfig` are made from it. Adding an option is its line in
:class:`SearchOptions` and the line that reads its value where the search uses it (for a
fine-tuning option, a field of :class:`~tinytune.evaluators.FinetuneConfig` beside its use).

The value kinds are in :mod:`tinytune.options.kinds`, the table and what is made of it in
:mod:`tinytune.options.table`; this package exports both.

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

from tinytune.options.kinds import (
    Choice,
    Count,
    CountOrFraction,
    Duration,
    File,
    GpuShare,
    Kind,
    Patches,
    Real,
    Seed,
    Share,
    Size,
    StudyName,
    Switch,
    Text,
)
from tinytune.options.option import Option
from tinytune.options.table import (
    AUTO_REPEATS,
    DEFAULT_DATASET,
    DEFAULT_DEVICE,
    DEFAULT_STORAGE,
    DEFAULT_WORKERS,
    MAX_EPOCHS,
    MAX_LR,
    MAX_WEIGHT_DECAY,
    PER_FAMILY,
    SEARCH_OPTIONS,
    SearchOptions,
    config_default,
    config_defaults,
    config_values,
    describe,
    option,
    resolve,
)

__all__ = [
    "AUTO_REPEATS",
    "DEFAULT_DATASET",
    "DEFAULT_DEVICE",
    "DEFAULT_STORAGE",
    "DEFAULT_WORKERS",
    "MAX_EPOCHS",
    "MAX_LR",
    "MAX_WEIGHT_DECAY",
    "PER_FAMILY",
    "SEARCH_OPTIONS",
    "Choice",
    "Count",
    "CountOrFraction",
    "Duration",
    "File",
    "GpuShare",
    "Kind",
    "Option",
    "Patches",
    "Real",
    "SearchOptions",
    "Seed",
    "Share",
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
