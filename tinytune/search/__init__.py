"""The search: the driver (Optuna + executors), budgets, contribution analysis and the proxy,
Pareto and hypervolume helpers."""

from __future__ import annotations

from tinytune.search.contribution import ContributionPlan, ContributionTable, run_contributions
from tinytune.search.driver import (
    BASELINE_PRESETS,
    SAMPLERS,
    FrontPoint,
    SearchConfig,
    SearchResult,
    check_budgets,
    check_feasible,
    run_search,
)
from tinytune.search.executor import Executor, InlineExecutor, RayExecutor, RayUnavailableError
from tinytune.search.pareto import hypervolume, hypervolume_2d, pareto_front
from tinytune.search.proxy import estimate, kendall_tau, rank_correlation

__all__ = [
    "BASELINE_PRESETS",
    "SAMPLERS",
    "ContributionPlan",
    "ContributionTable",
    "Executor",
    "FrontPoint",
    "InlineExecutor",
    "RayExecutor",
    "RayUnavailableError",
    "SearchConfig",
    "SearchResult",
    "check_budgets",
    "check_feasible",
    "estimate",
    "hypervolume",
    "hypervolume_2d",
    "kendall_tau",
    "pareto_front",
    "rank_correlation",
    "run_contributions",
    "run_search",
]
