"""Hardware cost of a candidate: trace the network it trains, plan its training memory and
predict its latency on a device."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tinytune.hwmodels import (
    PRECISIONS,
    DeviceProfile,
    LatencyReport,
    MemoryReport,
    plan_memory,
    predict_latency,
)
from tinytune.ir import Graph, trace
from tinytune.models import TrainNet, build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import Candidate, SupernetSpec

__all__ = ["HardwareConfig", "HardwareCost", "HardwareEvaluator", "hardware_cost"]


@dataclass(frozen=True)
class HardwareConfig:
    """How the device trains: numeric format, batch size, optimiser, and when parameter
    gradients are applied (``fused``, as the bundles' int8 engine does: see
    :func:`tinytune.hwmodels.plan_memory`)."""

    precision: str = "int8"
    batch_size: int = 1
    optimizer: str = "sgd"
    update: str = "fused"


def hardware_cost(net: TrainNet, config: HardwareConfig) -> tuple[Graph, MemoryReport]:
    """Trace ``net`` at the device batch size and plan its training memory."""
    example = torch.zeros(config.batch_size, 3, net.resolution, net.resolution)
    graph = trace(net, example)
    report = plan_memory(
        graph, precision=config.precision, update=config.update, optimizer=config.optimizer
    )
    return graph, report


@dataclass(frozen=True)
class HardwareCost:
    """What a candidate costs on the device: its training-memory plan and, when a device
    profile is given, its predicted latency."""

    memory: MemoryReport
    latency: LatencyReport | None

    @property
    def arena_bytes(self) -> int:
        return self.memory.arena_bytes

    @property
    def flash_bytes(self) -> int:
        """Parameters and, for int8, the estimated code of the training engine."""
        return self.memory.flash_bytes + self.memory.code_bytes

    @property
    def latency_s(self) -> float | None:
        return None if self.latency is None else self.latency.train_step_s


class HardwareEvaluator:
    """Memory and latency of candidates without any trained weights: the network's shapes and
    its update scheme are all the models read, so a randomly initialised supernet serves.
    Cheap enough (tens of milliseconds) to filter candidates before any fine-tuning."""

    def __init__(
        self,
        spec: SupernetSpec,
        n_classes: int,
        config: HardwareConfig,
        device: DeviceProfile | None = None,
    ) -> None:
        self.spec, self.n_classes, self.config, self.device = spec, n_classes, config, device
        self._supernet: nn.Module | None = None

    def __call__(self, candidate: Candidate) -> HardwareCost:
        return self.cost_with_graph(candidate)[0]

    def cost_with_graph(self, candidate: Candidate) -> tuple[HardwareCost, Graph]:
        """The cost and the traced training graph it was computed from."""
        if self._supernet is None:
            self._supernet = build_ofa_supernet(self.spec, self.n_classes)
        net = build_candidate(candidate, self._supernet, self.n_classes, calibration=[])
        graph, memory = hardware_cost(net, self.config)
        latency = None
        if self.device is not None:
            # the profile predicts its own engine, at the precision it was calibrated in
            width = PRECISIONS[self.device.precision].activation
            latency = predict_latency(graph, self.device.coefficients, width)
        return HardwareCost(memory, latency), graph
