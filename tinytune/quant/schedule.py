"""The device's learning-rate schedule over the epochs of its training.

A bundle's update multipliers are constants of its code; what it can change at run time, and
exactly, is the shift of every multiplier: ``tt_set_lr_halvings(k)`` trains at the exported rate
divided by 2^k (the QAS updates' shifts grow by k, the float32 classifier's and GroupNorm's
rate is multiplied by 2^−k). :func:`quantize_multiplier` of lr·2^−k is the multiplier of lr with
its shift k larger, so the reference's step at the halved rate is the bundle's bit for bit.
"""

from __future__ import annotations

import math

from tinytune.quant.errors import QuantizationError

__all__ = [
    "LR_SCHEDULES",
    "MAX_LR_HALVINGS",
    "MIN_DEVICE_LR",
    "WEIGHT_LR_SCALE",
    "check_schedule",
    "epoch_halvings",
    "epoch_lr",
]

LR_SCHEDULES = ("halving", "constant")
"""``halving``: epoch e (from 0) trains at lr·2^−e, a step decay that the bundle does exactly;
``constant``: lr throughout. On digits halving brought the device's bias-only update from 93.9 to
97.2 % validation accuracy (97.5 % in float32 with a cosine decay;
docs/bench/device-accuracy.md)."""

MAX_LR_HALVINGS = 30
"""The most halvings a bundle's rate takes (its ``TT_LR_MAX_HALVINGS``); later epochs keep it."""


MIN_DEVICE_LR = 1e-6
"""The smallest rate a device trains at: halved :data:`MAX_LR_HALVINGS` times it stays a normal
float32 (about 9·10^-16, far above 2^-126), where the bundle's float32 rate times 2^-k and the
reference's float32 of the halved rate are the same number (subnormals would round twice)."""


WEIGHT_LR_SCALE = 0.3
"""Trained convolution weights learn at this fraction of the rate of biases, scales and the
classifier, in the search's float32 fine-tunes and in the device's integer steps alike (the
bundle's weight multipliers are the QAS step at this fraction of its rate). On the symbols
folder's best points (five seeds, EfficientNet-Lite0 cut after block 10) the device's training
reached a median 53 % test against the front's 53 % in fp32; with the weights at the full rate,
51 % (docs/bench/accuracy-limit.md)."""


def check_schedule(schedule: str) -> str:
    """``schedule`` if it is one of :data:`LR_SCHEDULES`.

    Raises:
        QuantizationError: otherwise (the message lists them).
    """
    if schedule not in LR_SCHEDULES:
        raise QuantizationError(
            f"unknown learning-rate schedule {schedule!r}; allowed: {', '.join(LR_SCHEDULES)}"
        )
    return schedule


def epoch_halvings(epoch: int, schedule: str) -> int:
    """How many times the rate of epoch ``epoch`` (from 0) is halved under ``schedule``
    (checked by :func:`check_schedule`)."""
    check_schedule(schedule)
    return min(max(epoch, 0), MAX_LR_HALVINGS) if schedule == "halving" else 0


def epoch_lr(lr: float, epoch: int, schedule: str) -> float:
    """The rate of epoch ``epoch`` (from 0) under ``schedule``: lr·2^−halvings, exactly."""
    return math.ldexp(lr, -epoch_halvings(epoch, schedule))
