"""What a search is asked to do: its config (:class:`SearchConfig` and its vocabulary), the
budgets it is held to, and the plan of a contribution analysis that the config carries."""

from __future__ import annotations

from tinytune.search.config.budgets import (
    DEFAULT_SEARCH_S,
    DEFAULT_TRIALS,
    Budgets,
    Sizing,
    check_budgets,
    check_feasible,
    size_trials,
)
from tinytune.search.config.contribution_plan import ContributionPlan
from tinytune.search.config.search_config import (
    BASELINE_PRESETS,
    DIRECTIONS,
    OBJECTIVES,
    SAMPLERS,
    SearchConfig,
    check_new_study_name,
    reference_candidate,
)

__all__ = [
    "BASELINE_PRESETS",
    "DEFAULT_SEARCH_S",
    "DEFAULT_TRIALS",
    "DIRECTIONS",
    "OBJECTIVES",
    "SAMPLERS",
    "Budgets",
    "ContributionPlan",
    "SearchConfig",
    "Sizing",
    "check_budgets",
    "check_feasible",
    "check_new_study_name",
    "reference_candidate",
    "size_trials",
]
