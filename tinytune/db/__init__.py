"""tinytune's own tables (candidates, evaluations, Pareto snapshots, device calibrations,
contribution tables) beside Optuna's."""

from __future__ import annotations

from tinytune.db.claims import TWIN_OF
from tinytune.db.engine import database_exists, mask_url, require_existing, require_tinytune
from tinytune.db.store import (
    CONTRIBUTION_PARTS,
    FIDELITIES,
    STATUSES,
    CalibrationRecord,
    CandidateRecord,
    Claim,
    ContributionRecord,
    EvaluationRecord,
    ParetoSnapshot,
    Store,
    open_store,
)

__all__ = [
    "CONTRIBUTION_PARTS",
    "FIDELITIES",
    "STATUSES",
    "TWIN_OF",
    "CalibrationRecord",
    "CandidateRecord",
    "Claim",
    "ContributionRecord",
    "EvaluationRecord",
    "ParetoSnapshot",
    "Store",
    "database_exists",
    "mask_url",
    "open_store",
    "require_existing",
    "require_tinytune",
]
