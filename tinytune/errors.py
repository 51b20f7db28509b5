"""The error hierarchy: one base class, one subclass per area, and the words an error names an
option in.

Every message names the bad value and what is allowed, so that the command line can print it as
one line. Foreign exceptions are translated at the boundary with ``raise ... from e``.

A message that names an option of the front door (``sram_budget``) holds it as a :class:`Flag`
inside :class:`Words`, not as text: each front end words it its own way, the command line as
its flag (``--sram-budget``, ``--device rpi4``, ``--no-measure-int8``) and Python as the keyword
argument (``sram_budget``, ``device='rpi4'``, ``measure_int8=False``). ``str(error)`` is the
Python wording; the command line prints :meth:`TinyTuneError.worded` with :data:`CLI`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CLI",
    "PYTHON",
    "BudgetError",
    "BudgetOptionError",
    "ConfigError",
    "DataError",
    "DatabaseRefusedError",
    "DatabaseUnavailableError",
    "Flag",
    "ModelError",
    "OptionError",
    "StorageError",
    "Style",
    "TinyTuneError",
    "Words",
    "flag",
    "refusal",
]

Style = Literal["cli", "python"]
"""How a front end names an option: its command-line flag, or its Python keyword argument."""
CLI: Style = "cli"
PYTHON: Style = "python"


class _Unset:
    """The value of a :class:`Flag` that names an option without giving it a value."""

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "_UNSET"


_UNSET: Any = _Unset()


@dataclass(frozen=True)
class Flag:
    """An option named in a message or a help text, worded by the front end that shows it.

    Attributes:
        name: the option's keyword argument (``sram_budget``); its flag is the same with
            hyphens (``--sram-budget``).
        value: a value to give it, in a hint (``device='rpi4'`` / ``--device rpi4``); ``True``
            and ``False`` turn a switch on or off (``inline=True`` / ``--inline``,
            ``measure_int8=False`` / ``--no-measure-int8``). Unset: the option by its name.
    """

    name: str
    value: Any = _UNSET

    def worded(self, style: Style) -> str:
        """The option as ``style``'s front end names it."""
        if style == PYTHON:
            return self.name if self.value is _UNSET else f"{self.name}={self.value!r}"
        option = "--" + self.name.replace("_", "-")
        if self.value is _UNSET or self.value is True:
            return option
        if self.value is False:
            return "--no-" + option[2:]
        return f"{option} {shlex.quote(str(self.value))}"

    def __add__(self, other: str | Flag | Words) -> Words:
        return Words((self,)) + other

    def __radd__(self, other: str) -> Words:
        return Words((other, self))


@dataclass(frozen=True)
class Words:
    """A message or help text whose parts are text and :class:`Flag` options; ``+`` joins
    them. ``str()`` gives the Python wording."""

    parts: tuple[str | Flag, ...] = ()

    def worded(self, style: Style) -> str:
        """The text with each option named as ``style``'s front end names it."""
        return "".join(p if isinstance(p, str) else p.worded(style) for p in self.parts)

    def __str__(self) -> str:
        return self.worded(PYTHON)

    def __add__(self, other: str | Flag | Words) -> Words:
        if isinstance(other, Words):
            return Words(self.parts + other.parts)
        if isinstance(other, str | Flag):
            return Words((*self.parts, other))
        return NotImplemented

    def __radd__(self, other: str) -> Words:
        if isinstance(other, str):
            return Words((other, *self.parts))
        return NotImplemented


def flag(name: str, value: Any = _UNSET) -> Flag:
    """The option ``name`` (a keyword argument of the front door) in a message, given
    ``value`` when one is (see :class:`Flag`)."""
    return Flag(name, value)


def _words(text: str | Flag | Words) -> Words:
    return text if isinstance(text, Words) else Words((text,))


class TinyTuneError(Exception):
    """Base class of every error that tinytune raises on purpose. Its message is text, or
    :class:`Words` that name options."""

    def worded(self, style: Style) -> str:
        """The message with the options it names worded as ``style``'s front end names
        them (the same text as ``str(self)`` for a message of plain text)."""
        return self.words.worded(style)

    @property
    def words(self) -> Words:
        """The message as :class:`Words`, to embed in another error's message so that each
        front end still words the options it names."""
        if len(self.args) == 1 and isinstance(self.args[0], Words | Flag):
            return _words(self.args[0])
        return Words((str(self),))


class ConfigError(TinyTuneError, ValueError):
    """A candidate, preset, supernet name or option breaks the rules of the search space."""


class DataError(TinyTuneError):
    """A data set cannot be found, read or split."""


class ModelError(TinyTuneError):
    """A network cannot be built, loaded or matched to a candidate."""


class StorageError(TinyTuneError):
    """The database cannot be reached, or holds something that contradicts the request."""


class DatabaseUnavailableError(StorageError):
    """A database server stayed away (restarting, failing over, refusing connections) for longer
    than tinytune waits for it; what it stored before is kept."""


class DatabaseRefusedError(StorageError):
    """A database answered but could not store (a full disk, a read-only file, a quota); what it
    stored before is kept."""


class BudgetError(TinyTuneError):
    """A budget is malformed, or no candidate of the search space can meet it."""


class OptionError(ConfigError):
    """The value of one option is refused.

    ``OptionError("trials", "must be >= 1, got 0")`` says ``trials must be >= 1, got 0`` to a
    Python caller and ``--trials must be >= 1, got 0`` on the command line. The problem may
    name other options too (:func:`flag`); :meth:`saying` takes a whole message, for one that
    does not begin with the option.

    Attributes:
        field: the option's keyword argument (``sram_budget``).
        message: the whole message, the option in it as a :class:`Flag`.
    """

    def __init__(self, field: str, problem: str | Flag | Words) -> None:
        self._init(field, Flag(field) + " " + problem)

    def _init(self, field: str, message: Words) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    @classmethod
    def saying(cls, field: str, message: str | Flag | Words) -> OptionError:
        """The error of option ``field`` with ``message`` as it is (naming the option where
        it says so)."""
        error = cls.__new__(cls)
        error._init(field, _words(message))
        return error

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_option_error, (type(self), self.field, self.message))


class BudgetOptionError(OptionError, BudgetError):
    """The value of one budget option is refused (malformed, or not positive)."""


def _restore_option_error(cls: type[OptionError], field: str, message: Words) -> OptionError:
    return cls.saying(field, message)


def refusal(
    what: str | Flag, problem: str, kind: type[TinyTuneError] = ConfigError
) -> TinyTuneError:
    """The error that refuses a value of ``what``, a thing named in words (``"the fine-tuning
    seed"``) or an option (a :class:`Flag`): ``kind`` with ``what`` and ``problem`` for the
    first, an :class:`OptionError` (a :class:`BudgetOptionError` for a ``kind`` of
    :class:`BudgetError`) for the second."""
    if isinstance(what, Flag):
        cls = BudgetOptionError if issubclass(kind, BudgetError) else OptionError
        return cls(what.name, problem)
    return kind(f"{what} {problem}")
