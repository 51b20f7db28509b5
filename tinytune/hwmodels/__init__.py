"""Hardware models: the training-memory planner, the arena layout, the latency model."""

from __future__ import annotations

from tinytune.hwmodels.analytic import mcunetv3_extra_bytes
from tinytune.hwmodels.latency import (
    LatencyCoefficients,
    LatencyReport,
    fit_coefficients,
    predict_latency,
)
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
    "LatencyCoefficients",
    "LatencyReport",
    "MemoryReport",
    "Precision",
    "fit_coefficients",
    "mcunetv3_extra_bytes",
    "plan_layout",
    "plan_memory",
    "predict_latency",
]
