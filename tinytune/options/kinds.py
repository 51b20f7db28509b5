"""Kinds of value an option takes: how a value is checked (one
:class:`~tinytune.errors.OptionError` naming the option), and turned into the one the search
keeps. The search's options
(:mod:`tinytune.options.table`) are made of them, and so are the other commands' and the API's
checks of the same kinds of value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tinytune.errors import (
    BudgetOptionError,
    Flag,
    OptionError,
    Words,
)
from tinytune.units import check_integer, check_real, check_seed, parse_bytes, parse_seconds

__all__ = [
    "Choice",
    "Count",
    "CountOrFraction",
    "Duration",
    "File",
    "GpuShare",
    "Kind",
    "NetworkOption",
    "Patches",
    "Real",
    "Seed",
    "Share",
    "Size",
    "StudyName",
    "Switch",
    "Text",
]


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
    included unless open (``high`` may be a function, read when a value is checked)."""

    low: float | None = None
    high: float | Callable[[], float] | None = None
    low_open: bool = False
    high_open: bool = False

    python: ClassVar[Any] = float
    command: ClassVar[Any] = float

    def _check(self, name: str, value: Any) -> None:
        check_real(value, Flag(name))
        low, high = self.low, _bound(self.high)
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


def _is_module(value: Any) -> bool:
    """A ``torch.nn.Module``, told without importing torch (the options stay light)."""
    return any(
        c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module"
        for c in type(value).__mro__
    )


@dataclass(frozen=True)
class NetworkOption(Kind):
    """A network's name or file, or (from Python) a ``torch.nn.Module`` to export."""

    python: ClassVar[Any] = str
    command: ClassVar[Any] = str

    @property
    def api_type(self) -> Any:
        # a string, so that naming torch here costs no import of it
        return "str | torch.nn.Module | None" if self.optional else "str | torch.nn.Module"

    def _check(self, name: str, value: Any) -> None:
        if not isinstance(value, str) and not _is_module(value):
            raise self.refuse(
                name, f"must be a str (a name or a file) or a torch.nn.Module, got {value!r:.80}"
            )


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


@dataclass(frozen=True)
class Share(Kind):
    """A share: a percentage (``15%``) or a fraction (``0.15``, or a number), above 0 and at most
    ``high`` (10: 1000 %), kept as a fraction."""

    high: float = 10.0

    python: ClassVar[Any] = float | str
    command: ClassVar[Any] = str

    def parse(self, name: str, value: Any) -> Any:
        if value is None and self.optional:
            return None
        share = _share_of(value)
        if not (math.isfinite(share) and 0 < share <= self.high):
            text = str(value)
            shown = text if len(text) <= 24 else text[:23] + "…"
            raise self.refuse(
                name,
                "must be a percentage (15%) or a fraction (0.15) above 0 and at most "
                f"{self.high:.0%}, got {shown}",
            )
        return share

    def _check(self, name: str, value: Any) -> None:
        self.parse(name, value)


def _share_of(value: Any) -> float:
    if isinstance(value, bool):
        return math.nan
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return math.nan
    stripped = value.strip()
    try:
        return float(stripped[:-1]) / 100 if stripped.endswith("%") else float(stripped)
    except ValueError:
        return math.nan


@dataclass(frozen=True)
class CountOrFraction(Kind):
    """A count (a whole number >= 1, in digits where it is text) or a fraction (0 to 1), kept
    as a number: how many of something, or which share of it."""

    python: ClassVar[Any] = float | str
    command: ClassVar[Any] = str

    def parse(self, name: str, value: Any) -> Any:
        if value is None and self.optional:
            return None
        text = str(value)
        if isinstance(value, bool):
            number, count = math.nan, False
        elif isinstance(value, int):
            number, count = float(value), True
        elif isinstance(value, float):
            number, count = value, value.is_integer()
        else:
            try:
                number = float(text)
            except ValueError:
                number = math.nan
            count = text.strip().isascii() and text.strip().isdigit()  # not 1.5, 1e308, '٣'
        if math.isfinite(number) and number >= 0 and (number < 1 or count):
            return number
        shown = text if len(text) <= 24 else text[:23] + "…"
        whole = "; a count is a whole number, in digits" if 1 <= number < math.inf else ""
        raise self.refuse(
            name, f"must be a count (>= 1) or a fraction (0 to 1), got {shown}{whole}"
        )

    def _check(self, name: str, value: Any) -> None:
        self.parse(name, value)
