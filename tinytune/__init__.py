"""tinytune: search how to fine-tune a network on a tiny device, and export what was found.

The front door (see :mod:`tinytune.api`)::

    import tinytune
    result = tinytune.optimize("digits", trials=8)      # the measured Pareto front
    tinytune.export_bundle(result.front[0], "bundle/")   # a C bundle of one point
    tinytune.load("tinytune").front                      # a stored study
    tinytune.devices()                                   # the targets and their profiles
"""

from __future__ import annotations

from typing import Any

from tinytune.api import Exported, devices, export_bundle, load, optimize
from tinytune.errors import TinyTuneError
from tinytune.spaces import Candidate
from tinytune.stored import StudyView

__version__ = "0.1.0"

__all__ = [
    "Candidate",
    "Exported",
    "FrontPoint",
    "SearchResult",
    "StudyView",
    "TinyTuneError",
    "__version__",
    "devices",
    "export_bundle",
    "load",
    "optimize",
]

_LAZY = {"FrontPoint": "tinytune.search", "SearchResult": "tinytune.search"}


def __getattr__(name: str) -> Any:  # the search's types, without importing torch up front
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tinytune' has no attribute {name!r}")
