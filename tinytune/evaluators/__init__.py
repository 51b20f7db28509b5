"""Evaluators: measured accuracy by fine-tuning, and hardware cost."""

from __future__ import annotations

from tinytune.evaluators.finetune import FinetuneConfig, FinetuneResult, accuracy, finetune
from tinytune.evaluators.hardware import (
    HardwareConfig,
    HardwareCost,
    HardwareEvaluator,
    hardware_cost,
)
from tinytune.evaluators.task import run_evaluation

__all__ = [
    "FinetuneConfig",
    "FinetuneResult",
    "HardwareConfig",
    "HardwareCost",
    "HardwareEvaluator",
    "accuracy",
    "finetune",
    "hardware_cost",
    "run_evaluation",
]
