"""What an option is: its name (the keyword argument; the flag is the same with hyphens), the
kind of value it takes, its default and help, and where the search keeps its value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinytune.errors import (
    Style,
    Words,
)
from tinytune.options.kinds import Kind

__all__ = ["Option"]


@dataclass(frozen=True)
class Option:
    """One option of a search.

    Attributes:
        flag: the command line's flag (``--sram-budget``); the keyword argument of
            :func:`tinytune.optimize` is its :attr:`name`, the same with underscores.
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
        stored: how candidates are measured, so the study's stored space keeps the value
            (:class:`~tinytune.search.study.FinetuneSettings`): runs that differ in it are not
            one study, and a front never ranks fine-tunes of different settings together.
        stored_none: what the stored space writes for None (``per family``, ``auto``).
        stored_from: the value a :class:`~tinytune.search.SearchConfig` is measured with, where
            that is not the value at :attr:`config_field` (``lr``: None when each scheme
            family's rate is chosen).
        stored_absent: the value a study stored before the option existed was measured with
            (its stored space, lacking the option, reads as this); None: such a study differs
            from every value asked for.
    """

    flag: str
    kind: Kind
    default: Any
    help: str | Words
    field: str | None = ""
    to_field: Callable[[Any], Any] | None = None
    also: Callable[[Any], dict[str, Any]] | None = None
    positional: bool = False
    stored: bool = False
    stored_none: str | None = None
    stored_from: Callable[[Any], Any] | None = None
    stored_absent: Any = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"--[a-z][a-z0-9]*(-[a-z0-9]+)*", self.flag):
            raise ValueError(f"an option's flag is --lower-case-words, got {self.flag!r}")

    @property
    def name(self) -> str:
        """The keyword argument and the name in messages: ``sram_budget``."""
        return self.flag[2:].replace("-", "_")

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

    def stored_value(self, config: Any) -> Any:
        """The value a study of ``config`` (a :class:`~tinytune.search.SearchConfig`) keeps
        in its stored space, None included (see :attr:`stored_none`)."""
        if self.stored_from is not None:
            return self.stored_from(config)
        value = config
        for attr in (self.config_field or self.name).split("."):
            value = getattr(value, attr)
        return value

    @property
    def parsed_default(self) -> Any:
        """The default, as the search keeps it (``sram_budget``: 262144)."""
        return self.parse(self.default)

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
