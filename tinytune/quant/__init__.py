"""Post-training int8 quantization and the int8 training simulator (the device's reference)."""

from __future__ import annotations

from tinytune.quant.errors import QuantizationError
from tinytune.quant.kernels import Grad
from tinytune.quant.model import (
    ActQuant,
    QAdd,
    QCat,
    QConv,
    QGap,
    QGroupNorm,
    QLinear,
    QMaxPool,
    QMul,
    QPool,
    QuantizedNet,
    QUpsample,
    UpdateMultipliers,
)
from tinytune.quant.quantizer import activation_tables, qas_multipliers, quantize
from tinytune.quant.ranges import CALIBRATION_METHODS, observe_ranges
from tinytune.quant.simulate import ForwardRecord, StepRecord, forward, forward_patched, train_step

__all__ = [
    "CALIBRATION_METHODS",
    "ActQuant",
    "ForwardRecord",
    "Grad",
    "QAdd",
    "QCat",
    "QConv",
    "QGap",
    "QGroupNorm",
    "QLinear",
    "QMaxPool",
    "QMul",
    "QPool",
    "QUpsample",
    "QuantizationError",
    "QuantizedNet",
    "StepRecord",
    "UpdateMultipliers",
    "activation_tables",
    "forward",
    "forward_patched",
    "observe_ranges",
    "qas_multipliers",
    "quantize",
    "train_step",
]
