"""The search: preflight, the driver split by concern (config, Optuna adapter, budgets,
recording, the ladder's brackets), executors, contribution analysis and the proxy, Pareto and
hypervolume helpers."""

from __future__ import annotations

from tinytune.search.config import (
    BASELINE_PRESETS,
    OBJECTIVES,
    SAMPLERS,
    ContributionPlan,
    SearchConfig,
    check_budgets,
    check_feasible,
)
from tinytune.search.driver import SearchResult, run_search
from tinytune.search.events import Counts, SearchEvent
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
from tinytune.search.preflight import Preflight, preflight
from tinytune.search.study import Attr

__all__ = [
    "BASELINE_PRESETS",
    "OBJECTIVES",
    "SAMPLERS",
    "Attr",
    "ContributionPlan",
    "ContributionTable",
    "Counts",
    "Executor",
    "FrontPoint",
    "InlineExecutor",
    "Preflight",
    "RayExecutor",
    "RayUnavailableError",
    "SearchConfig",
    "SearchEvent",
    "SearchResult",
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
