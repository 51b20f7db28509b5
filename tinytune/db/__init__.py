"""tinytune's own tables (candidates, evaluations, Pareto snapshots) beside Optuna's."""

from __future__ import annotations

from tinytune.db.store import (
    FIDELITIES,
    STATUSES,
    CandidateRecord,
    EvaluationRecord,
    ParetoSnapshot,
    Store,
    open_store,
)

__all__ = [
    "FIDELITIES",
    "STATUSES",
    "CandidateRecord",
    "EvaluationRecord",
    "ParetoSnapshot",
    "Store",
    "open_store",
]
