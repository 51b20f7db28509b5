"""The names of the attributes tinytune gives an Optuna study and its trials, in one place.

A study carries the search space it was created with (``tinytune.space``) and the weights its
last run searched with (``tinytune.checkpoint``, for export). A trial carries what
optuna-dashboard shows about its candidate (key, predicted cost, budgets, fidelity, the reason
it was pruned); the driver writes these and never reads them back.
"""

from __future__ import annotations

__all__ = ["Attr"]


class Attr:
    """Names of the study's and the trials' user attributes (and of the system attributes
    tinytune reads or writes, marked as such)."""

    SPACE = "tinytune.space"
    CHECKPOINT = "tinytune.checkpoint"
    CANDIDATE_KEY = "candidate_key"
    CANDIDATE = "candidate"
    MEMORY = "memory_bytes"
    FLASH = "flash_bytes"
    LATENCY = "latency_s"
    LATENCY_PROFILE = "latency_profile"
    MCUNETV3_EXTRA = "mcunetv3_extra_bytes"
    SRAM_BUDGET = "sram_budget_bytes"
    FIDELITY = "fidelity"
    TEST_ACCURACY = "test_accuracy"
    WALL_TIME = "wall_time_s"
    ERROR = "error"
    HYPERVOLUME = "hypervolume"
    PRUNED_REASON = "pruned_reason"
    REUSED_FROM = "reused_from_trial"
    BRACKET = "ladder_bracket"
    PROMOTED = "promoted"
    PROXY_ACCURACY = "proxy_accuracy"
    SCREEN_ACCURACY = "short_val_accuracy"  # the short fine-tune's (--halving)
    REFERENCE = "reference"
    LR_CALIBRATION = "lr_calibration"  # the study's rate per scheme family (search/lr.py)
    TRIALS_SIZED = "trials_sized"  # the default budget of measured fine-tunes, as sized
    HYPERVOLUME_GRAPH = "tinytune-hypervolume"
    MUTANT_OF = "mutant_of"  # the key of the front point a mutant was made from
    CLIMB = "climb"  # a mutant of the most accurate fine-tune that does more work than it
    TWIN_OF = "twin_of"  # the trial whose fine-tune a schedule twin shares
    FAILED_TRIAL = "failed_trial"  # system attribute of a retried trial (Optuna's callback)
    CONSTRAINTS = (
        "constraints"  # system attribute: budget violations, in budgets.CONSTRAINTS order
    )
