"""Hardware models: the training-memory planner (and, later, latency and device profiles)."""

from __future__ import annotations

from tinytune.hwmodels.analytic import mcunetv3_extra_bytes
from tinytune.hwmodels.layout import ArenaLayout, plan_layout
from tinytune.hwmodels.memory import (
    OPTIMIZERS,
    PRECISIONS,
    Buffer,
    MemoryReport,
    Precision,
    plan_memory,
)

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "ArenaLayout",
    "Buffer",
    "MemoryReport",
    "Precision",
    "mcunetv3_extra_bytes",
    "plan_layout",
    "plan_memory",
]
