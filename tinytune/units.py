"""Parsing of sizes and durations (budgets given as text: "256KB", "500ms"), and the checks that
the numbers a caller gives are numbers: an integer where one is counted, a real number where
one is measured, a seed that numpy's generators take."""

from __future__ import annotations

import math
import numbers
import re

from tinytune.errors import BudgetError, Flag, refusal

__all__ = [
    "MAX_SEED",
    "check_integer",
    "check_real",
    "check_seed",
    "format_bytes",
    "parse_bytes",
    "parse_seconds",
]

MAX_SEED = 2**32 - 1
"""The largest seed: numpy's generators take 0 to 2**32 - 1."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
# Embedded convention: an MCU's "256KB" of SRAM is 256 × 1024 bytes.
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1024,
    "kib": 1024,
    "k": 1024,
    "mb": 1024**2,
    "mib": 1024**2,
    "m": 1024**2,
}
_TIME_UNITS = {"": 1, "ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}


def parse_bytes(text: str, what: str | Flag = "size") -> int:
    """``256KB`` → 262144 (KB = KiB = 1024 bytes, MB = MiB); a plain number is bytes. An error
    names ``what``: words, or an option (:func:`tinytune.errors.refusal`)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise refusal(
            what,
            f"{text!r} is not a size; use a number with a unit B, KB, MB (KB = 1024 B), "
            "e.g. 256KB",
            BudgetError,
        )
    value = float(match.group(1)) * _SIZE_UNITS[unit]
    if value <= 0:
        raise refusal(what, f"{text!r} must be > 0", BudgetError)
    return int(value)


def format_bytes(n: int, *, rounded: bool = False) -> str:
    """``n`` bytes in the largest binary unit that holds at least one (KB = 1024 B, as
    :func:`parse_bytes` reads it): to one decimal, for sizes set side by side (``512 B``,
    ``22.0 KB``, ``241.1 KB``); ``rounded`` to three significant digits, for capacities and
    budgets (``256 KB``, ``1 MB``, ``23.5 GB``)."""
    if n < 1024:
        return f"{n} B"
    value, unit = float(n), "B"
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if round(value, 1) < 1024 or unit == "GB":
            break
    return f"{value:.3g} {unit}" if rounded else f"{value:.1f} {unit}"


def parse_seconds(text: str, what: str | Flag = "duration", *, bare: bool = True) -> float:
    """``300``, ``300s``, ``5m``, ``1h``, ``250ms`` → seconds; ``bare=False`` refuses a number
    without a unit (a step's latency budget of ``500`` is more likely meant in ms than in s)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _TIME_UNITS:
        raise refusal(
            what,
            f"{text!r} is not a duration; use a number with a unit ms, s, m (minutes) or h, "
            "e.g. 5m or 500ms",
            BudgetError,
        )
    if not unit and not bare:
        number = text.strip()
        raise refusal(what, f"{text!r} has no unit; write {number}ms or {number}s", BudgetError)
    value = float(match.group(1)) * _TIME_UNITS[unit]
    if value <= 0:
        raise refusal(what, f"{text!r} must be > 0", BudgetError)
    return value


def check_seed(seed: int, what: str | Flag = "--seed") -> None:
    """Refuse a seed that numpy's generators (and so the data splits and samplers) cannot take.

    Raises:
        ConfigError: ``seed`` is not an integer from 0 to :data:`MAX_SEED` (an
            :class:`~tinytune.errors.OptionError` where ``what`` is an option).
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        if isinstance(seed, numbers.Integral) and not isinstance(seed, bool | int):
            raise refusal(
                what, f"must be a Python int, got {type(seed).__name__} {seed}; pass int(...)"
            )
        raise refusal(what, f"must be an integer from 0 to {MAX_SEED}, got {seed!r}")


def check_integer(value: object, what: str | Flag) -> None:
    """Refuse a value that is not a Python integer (``True`` is not one; nor is a numpy integer,
    which the study's JSON attributes could not hold), whatever its range.

    Raises:
        ConfigError: naming ``what`` and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            raise refusal(
                what, f"must be a Python int, got {type(value).__name__} {value}; pass int(...)"
            )
        raise refusal(what, f"must be an integer, got {value!r:.80}")


def check_real(value: object, what: str | Flag) -> None:
    """Refuse a value that is not a Python ``int`` or ``float`` (``True`` and NaN are not; a
    numpy float64 is a float), whatever its range.

    Raises:
        ConfigError: naming ``what`` and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise refusal(what, f"must be a number, got {value!r:.80}")
