"""The run: the driver and its ledger, the events and the result it reports, the checks before
it starts, the learning-rate grid, mutation of front points, the live hypervolume for the
dashboard, and the int8 verification of the front when it ends."""

from __future__ import annotations

from tinytune.search.run.driver import run_search
from tinytune.search.run.events import Counts, SearchEvent, SearchResult
from tinytune.search.run.lr_grid import StudyRates
from tinytune.search.run.preflight import Preflight, preflight
from tinytune.search.run.timing import Late
from tinytune.search.run.verify_int8 import (
    INT8_EPOCHS,
    INT8_SCHEDULE,
    Int8Accuracy,
    int8_accuracies,
    int8_settings,
)

__all__ = [
    "INT8_EPOCHS",
    "INT8_SCHEDULE",
    "Counts",
    "Int8Accuracy",
    "Late",
    "Preflight",
    "SearchEvent",
    "SearchResult",
    "StudyRates",
    "int8_accuracies",
    "int8_settings",
    "preflight",
    "run_search",
]
