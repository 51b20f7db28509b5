"""Hardware models: the training-memory planner (and, later, latency and device profiles)."""

from __future__ import annotations

from tinytune.hwmodels.memory import (
    OPTIMIZERS,
    PRECISIONS,
    Buffer,
    MemoryReport,
    Precision,
    plan_memory,
)

__all__ = ["OPTIMIZERS", "PRECISIONS", "Buffer", "MemoryReport", "Precision", "plan_memory"]
