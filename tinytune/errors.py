"""The error hierarchy: one base class, one subclass per area.

Every message names the bad value and what is allowed, so that the command line can print it as
one line. Foreign exceptions are translated at the boundary with ``raise ... from e``.
"""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "ConfigError",
    "DataError",
    "DatabaseUnavailableError",
    "ModelError",
    "StorageError",
    "TinyTuneError",
]


class TinyTuneError(Exception):
    """Base class of every error that tinytune raises on purpose."""


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


class BudgetError(TinyTuneError):
    """A budget is malformed, or no candidate of the search space can meet it."""
