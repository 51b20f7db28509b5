"""The search: the driver (Optuna + executors), budgets, Pareto and hypervolume helpers."""

from __future__ import annotations

from tinytune.search.driver import (
    BASELINE_PRESETS,
    FrontPoint,
    SearchConfig,
    SearchResult,
    check_budgets,
    check_feasible,
    run_search,
)
from tinytune.search.executor import Executor, InlineExecutor, RayExecutor, RayUnavailableError
from tinytune.search.pareto import hypervolume, hypervolume_2d, pareto_front

__all__ = [
    "BASELINE_PRESETS",
    "Executor",
    "FrontPoint",
    "InlineExecutor",
    "RayExecutor",
    "RayUnavailableError",
    "SearchConfig",
    "SearchResult",
    "check_budgets",
    "check_feasible",
    "hypervolume",
    "hypervolume_2d",
    "pareto_front",
    "run_search",
]
