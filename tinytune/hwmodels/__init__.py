"""Hardware models: the training-memory planner, the arena layout, the latency model, the
device registry."""

from __future__ import annotations

from tinytune.hwmodels.analytic import mcunetv3_extra_bytes
from tinytune.hwmodels.latency import LatencyCoefficients, LatencyReport, predict_latency
from tinytune.hwmodels.latency_fit import fit_coefficients
from tinytune.hwmodels.layout import ArenaLayout, Buffer, plan_layout
from tinytune.hwmodels.memory import (
    OPTIMIZERS,
    PRECISIONS,
    UPDATES,
    MemoryReport,
    Precision,
    plan_memory,
)
from tinytune.hwmodels.profile import ENGINES, DeviceProfile
from tinytune.hwmodels.registry import (
    Calibration,
    default_engine,
    device_engines,
    device_names,
    get_device,
    profile_label,
)

__all__ = [
    "ENGINES",
    "OPTIMIZERS",
    "PRECISIONS",
    "UPDATES",
    "ArenaLayout",
    "Buffer",
    "Calibration",
    "DeviceProfile",
    "LatencyCoefficients",
    "LatencyReport",
    "MemoryReport",
    "Precision",
    "default_engine",
    "device_engines",
    "device_names",
    "fit_coefficients",
    "get_device",
    "mcunetv3_extra_bytes",
    "plan_layout",
    "plan_memory",
    "predict_latency",
    "profile_label",
]
