"""The names of the samplers a search can use and the one it uses when none is given.

The search's vocabulary, in a leaf module outside ``tinytune.search``: the front door and the
command line read the default at start-up, and importing any module of ``tinytune.search``
imports the whole search (torch, Optuna)."""

from __future__ import annotations

__all__ = ["DEFAULT_SAMPLER", "SAMPLERS"]

SAMPLERS = ("tpe", "tpe-early", "gp", "random", "nsga2")
"""The ``--sampler`` values: Optuna's samplers and tinytune's strategies over them."""

DEFAULT_SAMPLER = "tpe-early"
"""The sampler of ``tinytune search``: of tinytune's strategies, the best median hypervolume at
equal compute in ``bench/search_efficiency.py`` (``docs/bench/search.md``)."""
