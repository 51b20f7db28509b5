"""tinytune's own tables (candidates, evaluations, Pareto snapshots, device calibrations) beside
Optuna's."""

from __future__ import annotations

from tinytune.db.store import (
    FIDELITIES,
    STATUSES,
    CalibrationRecord,
    CandidateRecord,
    EvaluationRecord,
    ParetoSnapshot,
    Store,
    open_store,
)

__all__ = [
    "FIDELITIES",
    "STATUSES",
    "CalibrationRecord",
    "CandidateRecord",
    "EvaluationRecord",
    "ParetoSnapshot",
    "Store",
    "open_store",
]
