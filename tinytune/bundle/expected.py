"""What the bundle's example prints, computed at export by tinytune's integer simulator.

The example (``platform/example_main.c``) trains its samples in an order that its xorshift32
generator shuffles afresh each epoch (Fisher–Yates), at the rate of each epoch under its
schedule, and counts the evaluation samples it classifies right before and after each epoch.
:func:`simulate_example` runs the same steps in :func:`tinytune.quant.train_step`, which the C
step matches bit for bit (the bundle tests replay every step's bytes), so its counts are the
ones the example prints: the example checks its own against them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from tinytune.bundle.errors import BundleError
from tinytune.bundle.samples import Samples
from tinytune.quant import QuantizedNet
from tinytune.quant.schedule import check_schedule, epoch_lr

__all__ = [
    "EXAMPLE_SEED",
    "MAX_SIMULATED_STEPS",
    "ExampleRun",
    "example_order",
    "simulate_example",
]

EXAMPLE_SEED = 0x2545F491
"""``TT_RNG_SEED`` of the example: the state its xorshift32 generator starts from."""
MAX_SIMULATED_STEPS = 1024
"""The most training steps (samples × epochs) the export simulates; beyond, the example states
no expected counts (the simulator takes tens of milliseconds a step at 32 px, 70 ms for the
MCUNetV3-style preset on ofa-proxyless-w0.35; more at larger resolutions)."""
_MASK = 0xFFFFFFFF

log = logging.getLogger(__name__)


def example_order(n: int, epochs: int) -> list[list[int]]:
    """The order in which the example trains its ``n`` samples in each of ``epochs`` epochs:
    one permutation an epoch, each shuffling the one before (``shuffle`` in the example)."""
    state, order, orders = EXAMPLE_SEED, list(range(n)), []
    for _ in range(epochs):
        for i in range(n - 1, 0, -1):
            state ^= (state << 13) & _MASK
            state ^= state >> 17
            state ^= (state << 5) & _MASK
            j = state % (i + 1)
            order[i], order[j] = order[j], order[i]
        orders.append(list(order))
    return orders


@dataclass(frozen=True)
class ExampleRun:
    """The evaluation samples the example classifies right.

    Attributes:
        correct: before training (epoch 0), then after each epoch.
        total: the evaluation samples.
    """

    correct: tuple[int, ...]
    total: int

    @property
    def epochs(self) -> int:
        return len(self.correct) - 1


def _correct(net: QuantizedNet, evaluation: Samples) -> int:
    import torch

    from tinytune.quant import forward

    logits = forward(net, torch.from_numpy(evaluation.images.astype(np.int64))).logits
    return int((logits.argmax(axis=1) == evaluation.labels).sum())


def simulate_example(
    net: QuantizedNet,
    lr: float,
    train: Samples,
    evaluation: Samples,
    epochs: int,
    schedule: str,
) -> ExampleRun | None:
    """The example's counts: ``net`` (not changed) trained as the example trains it, at rate
    ``lr`` under ``schedule``; None beyond :data:`MAX_SIMULATED_STEPS` steps.

    Raises:
        BundleError: no epoch, or a sample that the simulator cannot train.
    """
    import torch

    from tinytune.quant import QuantizationError, train_step

    check_schedule(schedule)
    if epochs < 1:
        raise BundleError(f"the example trains at least one epoch, got {epochs}")
    if len(train) * epochs > MAX_SIMULATED_STEPS:
        return None
    log.info("simulating the example's %d training steps", len(train) * epochs)
    sim = net.clone()
    xs = torch.from_numpy(train.images.astype(np.int64))
    correct = [_correct(sim, evaluation)]
    for epoch, order in enumerate(example_order(len(train), epochs)):
        rate = epoch_lr(lr, epoch, schedule)
        for k in order:
            try:
                train_step(sim, xs[k : k + 1], int(train.labels[k]), rate)
            except QuantizationError as e:
                raise BundleError(f"the example's sample {k} cannot be trained: {e}") from e
        correct.append(_correct(sim, evaluation))
    return ExampleRun(tuple(correct), len(evaluation))
