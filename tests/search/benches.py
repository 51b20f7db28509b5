"""The benchmark scripts under ``bench/`` as modules, for the tests that run them small."""

from __future__ import annotations

import importlib
from types import ModuleType


def load_bench(name: str) -> ModuleType:
    """The module ``bench.NAME`` (``bench/NAME.py``), as ``python3 -m bench.NAME`` runs it (the
    repository's root is on ``sys.path``, as for ``tests``)."""
    return importlib.import_module(f"bench.{name}")
