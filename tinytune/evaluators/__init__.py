"""Evaluators: measured accuracy by fine-tuning, and hardware cost."""

from __future__ import annotations

from tinytune.evaluators.finetune import FinetuneConfig, FinetuneResult, accuracy, finetune
from tinytune.evaluators.hardware import (
    HardwareConfig,
    HardwareCost,
    HardwareEvaluator,
    hardware_cost,
)
from tinytune.evaluators.messages import EvaluationResult, FinetuneTask, Int8Settings
from tinytune.evaluators.task import run_evaluation

__all__ = [
    "EvaluationResult",
    "FinetuneConfig",
    "FinetuneResult",
    "FinetuneTask",
    "HardwareConfig",
    "HardwareCost",
    "HardwareEvaluator",
    "Int8Settings",
    "accuracy",
    "finetune",
    "hardware_cost",
    "run_evaluation",
]
