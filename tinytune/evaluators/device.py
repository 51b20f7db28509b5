"""Device accuracy: fine-tune a candidate as its bundle does on the device, and measure it.

The network is built and quantized exactly as the exporter builds it (BatchNorm re-estimated
and folded, activation ranges observed on the same calibration images), then trained with the
integer training step of :mod:`tinytune.quant.simulate` — the numerical reference that the
bundle's C step matches bit for bit — one image at a time (batch 1, as on the device), over the
whole training split for ``epochs`` epochs in a seeded order, at the bundle's learning rate:
constant, or halved after every epoch as the bundle's ``tt_set_lr_halvings`` halves it (its update
multipliers are constants of the generated code, so only their shifts change; halving is exact).
Accuracy is the integer forward pass's top-1 on the validation split (to choose) and on the test
split (to report).
``qas=False`` trains without quantization-aware scaling, the ablation of MCUNetV3 Table 2.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from tinytune.data import Split, Splits
from tinytune.errors import ConfigError
from tinytune.quant import QuantizedNet
from tinytune.quant.schedule import MIN_DEVICE_LR, check_schedule, epoch_lr
from tinytune.quant.simulate import forward, train_step

__all__ = ["Int8Progress", "Int8Result", "TrainingProgress", "int8_accuracy", "int8_finetune"]


@dataclass(frozen=True)
class TrainingProgress:
    """How far a measurement of the device's accuracy has trained.

    Attributes:
        epochs_done: epochs finished (passes over the training split, over every run).
        epochs: epochs of the whole measurement.
        images_done: training images stepped (one step each, batch 1).
        images: steps of the whole measurement.
    """

    epochs_done: int
    epochs: int
    images_done: int
    images: int


Int8Progress = Callable[[TrainingProgress], None]
"""Called after each training image with the measurement's :class:`TrainingProgress`."""


@dataclass(frozen=True)
class Int8Result:
    """Top-1 accuracies (fractions) of the integer network after training, and the cost."""

    accuracy: float
    val_accuracy: float
    train_loss: float
    wall_time_s: float
    steps: int


def int8_accuracy(q: QuantizedNet, split: Split, batch_size: int = 128) -> float:
    """Top-1 accuracy of the integer forward pass of ``q`` on ``split``."""
    correct = 0
    for i in range(0, len(split), batch_size):
        x = q.quantize_input(torch.tensor(split.x[i : i + batch_size]))
        logits = forward(q, x).logits
        correct += int((np.argmax(logits, axis=1) == split.y[i : i + batch_size]).sum())
    return correct / max(1, len(split))


def int8_finetune(
    q: QuantizedNet,
    splits: Splits,
    *,
    epochs: int,
    lr: float,
    qas: bool = True,
    seed: int | None = 0,
    schedule: str = "constant",
    progress: Int8Progress | None = None,
) -> Int8Result:
    """Train ``q`` in place on every training image, one at a time, then measure it.

    Args:
        q: the quantized candidate (:func:`tinytune.quant.quantize`).
        epochs: passes over the training split.
        lr: the learning rate of one image's step (of the first epoch's, with ``halving``).
        qas: scale the integer updates as MCUNetV3's QAS does (False: the ablation).
        seed: seed of the order of the images in each epoch; ``None``: the split's own order
            every epoch, as the bundle's example program trains on its embedded samples.
        schedule: one of :data:`tinytune.quant.schedule.LR_SCHEDULES`; ``constant`` by
            default, as the bundles trained before they could halve their rate (the search's
            device accuracy passes :data:`tinytune.search.run.verify_int8.INT8_SCHEDULE`).
        progress: called after each image with the epochs and images done of this call's
            ``epochs`` passes (the library reports; the command line draws a bar).
    """
    if epochs < 1 or not MIN_DEVICE_LR <= lr < 10.0:
        raise ConfigError(
            f"int8 fine-tuning needs epochs >= 1 and a learning rate in [{MIN_DEVICE_LR:g}, 10), "
            f"got {epochs} and {lr}"
        )
    check_schedule(schedule)
    start = time.perf_counter()
    rng = None if seed is None else np.random.default_rng(seed)
    n = len(splits.train)
    losses: list[float] = []
    step = 0
    for epoch in range(epochs):
        rate = epoch_lr(lr, epoch, schedule)
        for i in range(n) if rng is None else rng.permutation(n):
            x = q.quantize_input(torch.tensor(splits.train.x[i : i + 1]))
            losses.append(train_step(q, x, int(splits.train.y[i]), rate, qas=qas).loss)
            step += 1
            if progress is not None:
                progress(TrainingProgress(step // n, epochs, step, epochs * n))
    return Int8Result(
        accuracy=int8_accuracy(q, splits.test),
        val_accuracy=int8_accuracy(q, splits.val),
        train_loss=float(np.mean(losses[-n:])),
        wall_time_s=time.perf_counter() - start,
        steps=step,
    )
