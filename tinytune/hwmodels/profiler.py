"""Measure the latency of training steps on the host itself.

A measurement runs warm-up steps, then times repeated steps (forward, loss, backward, SGD
update of the trained parameters) with ``time.perf_counter`` and reports the median, the
figure robust to a shared machine's hiccups. This is I/O-free but not pure: it runs the module.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["StepTiming", "measure_step"]


@dataclass(frozen=True)
class StepTiming:
    """Median seconds of a training step and of a forward pass, and every sample."""

    train_step_s: float
    inference_s: float
    samples: tuple[float, ...]


def measure_step(
    module: nn.Module, example: torch.Tensor, *, warmup: int = 3, repeats: int = 15
) -> StepTiming:
    """Time training steps of ``module`` on ``example`` (labels 0) with plain SGD.

    The module's parameters are updated with learning rate 0, so it is left unchanged.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.0) if params else None
    labels = torch.zeros(example.shape[0], dtype=torch.long)

    def step() -> None:
        loss = F.cross_entropy(module(example), labels)
        if opt is not None:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    with torch.no_grad():
        for _ in range(warmup):
            module(example)
        fwd = []
        for _ in range(repeats):
            start = time.perf_counter()
            module(example)
            fwd.append(time.perf_counter() - start)
    return StepTiming(statistics.median(samples), statistics.median(fwd), tuple(samples))
