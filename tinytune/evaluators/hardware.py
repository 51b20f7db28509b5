"""Hardware cost of a candidate: trace the network it trains and plan its training memory."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tinytune.hwmodels import MemoryReport, plan_memory
from tinytune.ir import Graph, trace
from tinytune.models import TrainNet, build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import Candidate, SupernetSpec

__all__ = ["HardwareConfig", "HardwareEvaluator", "hardware_cost"]


@dataclass(frozen=True)
class HardwareConfig:
    """How the device trains: numeric format, batch size, optimiser, operator reordering."""

    precision: str = "int8"
    batch_size: int = 1
    optimizer: str = "sgd"
    reorder: bool = True


def hardware_cost(net: TrainNet, config: HardwareConfig) -> tuple[Graph, MemoryReport]:
    """Trace ``net`` at the device batch size and plan its training memory."""
    example = torch.zeros(config.batch_size, 3, net.resolution, net.resolution)
    graph = trace(net, example)
    report = plan_memory(
        graph, precision=config.precision, reorder=config.reorder, optimizer=config.optimizer
    )
    return graph, report


class HardwareEvaluator:
    """Memory of candidates without any trained weights: the network's shapes and its update
    scheme are all the planner reads, so a randomly initialised supernet serves. Cheap enough
    (tens of milliseconds) to filter candidates before any fine-tuning."""

    def __init__(self, spec: SupernetSpec, n_classes: int, config: HardwareConfig) -> None:
        self.spec, self.n_classes, self.config = spec, n_classes, config
        self._supernet: nn.Module | None = None

    def __call__(self, candidate: Candidate) -> MemoryReport:
        if self._supernet is None:
            self._supernet = build_ofa_supernet(self.spec, self.n_classes)
        net = build_candidate(candidate, self._supernet, self.n_classes, calibration=[])
        return hardware_cost(net, self.config)[1]
