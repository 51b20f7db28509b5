"""The search, in rooms that import only the rooms below them:

* ``run``: the driver and its ledger, events, preflight, the learning-rate grid, mutation, the
  dashboard's hypervolume and the int8 verification of the front.
* ``ladder``: the fidelity ladder's brackets, its promotion rule and decisions, the proxy rung,
  the proxy, and the contribution analysis with its table.
* ``study``: the Optuna adapter, trial attributes, Optuna's storage, heartbeats, and the search
  space a study stores with its checks.
* ``execution``: the executors, the files carried to Ray nodes, and the worker tasks.
* ``front`` and ``config`` below them all: Pareto and hypervolume helpers with the recording of
  the front; what a search is asked (:class:`SearchConfig`), its budgets and contribution plan.

Code outside the search imports this package or a room's package, never a room's modules.
"""

from __future__ import annotations

from tinytune.search.config import (
    BASELINE_PRESETS,
    DEFAULT_SEARCH_S,
    DEFAULT_TRIALS,
    OBJECTIVES,
    SAMPLERS,
    ContributionPlan,
    SearchConfig,
    Sizing,
    check_budgets,
    check_feasible,
)
from tinytune.search.execution import (
    Executor,
    InlineExecutor,
    RayExecutor,
    RayUnavailableError,
)
from tinytune.search.front import FrontPoint, hypervolume, hypervolume_2d, pareto_front
from tinytune.search.ladder import (
    ContributionTable,
    estimate,
    kendall_tau,
    rank_correlation,
    run_contributions,
)
from tinytune.search.run import (
    Counts,
    Late,
    Preflight,
    SearchEvent,
    SearchResult,
    preflight,
    run_search,
)
from tinytune.search.study import Attr

__all__ = [
    "BASELINE_PRESETS",
    "DEFAULT_SEARCH_S",
    "DEFAULT_TRIALS",
    "OBJECTIVES",
    "SAMPLERS",
    "Attr",
    "ContributionPlan",
    "ContributionTable",
    "Counts",
    "Executor",
    "FrontPoint",
    "InlineExecutor",
    "Late",
    "Preflight",
    "RayExecutor",
    "RayUnavailableError",
    "SearchConfig",
    "SearchEvent",
    "SearchResult",
    "Sizing",
    "check_budgets",
    "check_feasible",
    "estimate",
    "hypervolume",
    "hypervolume_2d",
    "kendall_tau",
    "pareto_front",
    "preflight",
    "rank_correlation",
    "run_contributions",
    "run_search",
]
