"""Hardware cost of a candidate: trace the network it trains, plan its training memory and
predict its latency on a device."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from tinytune.data.logmel import LogMelSpec
from tinytune.errors import ConfigError
from tinytune.hwmodels import (
    PRECISIONS,
    DeviceProfile,
    LatencyReport,
    MemoryReport,
    plan_memory,
    predict_latency,
)
from tinytune.hwmodels.frontend import FrontendCost, frontend_cost
from tinytune.hwmodels.stack import RATE_BYTES
from tinytune.hwmodels.stack import stack_bytes as core_stack_bytes
from tinytune.ir import Graph, PatchPlan, block_end, patch_blocks, plan_patches, trace
from tinytune.models import GraphNet, build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.recent import Recent
from tinytune.spaces import PATCHES, Candidate, Schedule, SupernetSpec

__all__ = [
    "PATCH_MODES",
    "SEARCHED_PATCHES",
    "HardwareConfig",
    "HardwareCost",
    "HardwareEvaluator",
    "frozen_ops",
    "hardware_cost",
    "parse_patches",
    "schedule_plan",
]


@dataclass(frozen=True)
class HardwareConfig:
    """How the device trains: numeric format, batch size, optimiser, when parameter
    gradients are applied (``fused``, as the bundles' int8 engine does: see
    :func:`tinytune.hwmodels.plan_memory`), and how candidates' frozen prefixes are scheduled
    (``patches``: :data:`PATCH_MODES`, or ``N:B`` for N × N patches over the stem and the
    first B blocks; see :meth:`HardwareEvaluator.schedule`)."""

    precision: str = "int8"
    batch_size: int = 1
    optimizer: str = "sgd"
    update: str = "fused"
    patches: str = "auto"


PATCH_MODES = ("auto", "none")
"""``auto``: a candidate over the SRAM budget on whole images runs its frozen prefix in the
fastest patch schedule that fits the budget, and a search may propose patch counts of its own
(:data:`SEARCHED_PATCHES`); ``none``: whole images always."""

SEARCHED_PATCHES = (1, 2, 3, 4)
"""The patches per side a search proposes for a joint scheme's frozen prefix under ``auto``
(1: whole images where they fit). Two or three per side hold most of the saving: at 48 px on
EfficientNet-Lite0, 2 × 2 patches halve the classifier-only update's arena for a tenth more time
per step, and beyond 4 the arena no longer falls while the recomputed halos add time."""


def parse_patches(text: str) -> Schedule | None:
    """The schedule an ``N:B`` value fixes, or None for a mode of :data:`PATCH_MODES`.

    Raises:
        ConfigError: neither.
    """
    if text in PATCH_MODES:
        return None
    n, _, b = text.partition(":")
    if not (n.isdigit() and b.isdigit()):
        raise ConfigError(
            f"patches must be auto, none or N:B (N x N patches over the stem and the first B "
            f"blocks, e.g. 4:4), got {text!r}"
        )
    return Schedule(int(n), int(b))


def schedule_plan(graph: Graph, schedule: Schedule) -> PatchPlan | None:
    """The patch plan of ``schedule`` on ``graph`` (None on whole images).

    Raises:
        ConfigError: a schedule this network cannot run (in one line).
    """
    if not schedule.patched:
        return None
    return plan_patches(graph, schedule.patches, block_end(graph, schedule.blocks))


def hardware_cost(
    net: GraphNet, config: HardwareConfig, schedule: Schedule | None = None
) -> tuple[Graph, MemoryReport]:
    """Trace ``net`` at the device batch size and plan its training memory, its frozen
    prefix run as ``schedule`` says (default: whole images)."""
    example = torch.zeros(config.batch_size, *net.input_shape)
    graph = trace(net, example)
    report = plan_memory(
        graph,
        precision=config.precision,
        update=config.update,
        optimizer=config.optimizer,
        patches=schedule_plan(graph, schedule or Schedule()),
    )
    return graph, report


@dataclass(frozen=True)
class HardwareCost:
    """What a candidate costs on the device: its training-memory plan and, when a device
    profile is given, its predicted latency and its bundle's stack there; for a keyword model,
    what its front-end adds (:mod:`tinytune.hwmodels.frontend`: its static SRAM, its tables,
    its time for each sample of a step)."""

    memory: MemoryReport
    latency: LatencyReport | None
    frontend: FrontendCost | None = None
    batch_size: int = 1
    stack_bytes: int = 0  # the bundle's deepest function on the device (hwmodels.stack)

    @property
    def arena_bytes(self) -> int:
        """The training step's arena, as the planner places it."""
        return self.memory.arena_bytes

    @property
    def static_bytes(self) -> int:
        """SRAM the int8 bundle keeps beside its arena: the engine's workspace (float32 logits,
        gradient exponents), the rate's state and a front-end's frame buffers (0 in fp32,
        which no bundle runs, but for a front-end's)."""
        frontend = 0 if self.frontend is None else self.frontend.scratch_bytes
        if self.memory.precision != "int8":
            return frontend
        return self.memory.workspace_bytes + RATE_BYTES + frontend

    @property
    def sram_bytes(self) -> int:
        """The SRAM the candidate needs on the device: the arena, the static data beside it and
        the stack (the front's memory objective and what the budget bounds)."""
        return self.arena_bytes + self.static_bytes + self.stack_bytes

    @property
    def flash_bytes(self) -> int:
        """Parameters and, for int8, the estimated code of the training engine (and a
        front-end's tables)."""
        tables = 0 if self.frontend is None else self.frontend.flash_bytes
        return self.memory.flash_bytes + self.memory.code_bytes + tables

    @property
    def frontend_s(self) -> float:
        """The front-end's time for a step's samples (0 without one, or without a model of
        its time on the device)."""
        if self.frontend is None or self.frontend.seconds is None:
            return 0.0
        return self.batch_size * self.frontend.seconds

    @property
    def latency_s(self) -> float | None:
        """A step of learning from new samples: their inputs made (a front-end's), then the
        training step."""
        return None if self.latency is None else self.latency.train_step_s + self.frontend_s


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
        sram_budget: int | None = None,
        frontend: LogMelSpec | None = None,
    ) -> None:
        self.spec, self.n_classes, self.config, self.device = spec, n_classes, config, device
        self.sram_budget = sram_budget
        self.frontend = frontend  # a keyword folder's, at its own frames (else None)
        self._frontends: dict[int, FrontendCost] = {}
        self.fixed = parse_patches(config.patches)
        self._supernet: nn.Module | None = None
        # A search prices a candidate again when it is drawn, checked, proposed and stored,
        # and its schedule twins with it: what is known of each is kept, the oldest dropped.
        self._graphs = Recent[str, Graph](64)  # by the candidate trained
        self._least = Recent[tuple[str, int], Schedule | None](256)  # and the patches asked
        self._auto = Recent[str, Schedule | None](256)  # by the candidate trained
        self._costs = Recent[str, HardwareCost](256)  # by the candidate as scheduled

    def __call__(self, candidate: Candidate) -> HardwareCost:
        return self.cost_with_graph(candidate)[0]

    def _graph(self, candidate: Candidate) -> Graph:
        """The traced training graph of ``candidate`` (the same whatever its schedule)."""
        return self._graphs.get(candidate.training.key, lambda: self._trace(candidate))

    def _trace(self, candidate: Candidate) -> Graph:
        if self._supernet is None:
            self._supernet = build_ofa_supernet(self.spec, self.n_classes)
        net = build_candidate(candidate, self._supernet, self.n_classes, calibration=[])
        return trace(net, torch.zeros(self.config.batch_size, *net.input_shape))

    def _cost(self, graph: Graph, plan: PatchPlan | None, resolution: int) -> HardwareCost:
        return HardwareCost(
            self._memory(graph, plan),
            self._latency(graph, plan),
            self.frontend_cost(resolution),
            self.config.batch_size,
            self.stack_bytes,
        )

    @property
    def stack_bytes(self) -> int:
        """The stack of the int8 bundle's deepest function on the device (0 without a device,
        in fp32, or on the development machine)."""
        if self.device is None or self.config.precision != "int8":
            return 0
        return core_stack_bytes(self.device.core)

    def frontend_cost(self, resolution: int) -> FrontendCost | None:
        """What the front-end that makes inputs of ``resolution`` frames costs on the device
        (None: the samples need none)."""
        if self.frontend is None:
            return None
        if resolution not in self._frontends:
            spec = self.frontend.at(resolution)
            self._frontends[resolution] = frontend_cost(spec, self.device)
        return self._frontends[resolution]

    def _arena_budget(self, candidate: Candidate, memory: MemoryReport) -> int | None:
        """The SRAM budget less what the candidate's bundle holds beside the arena (its static
        data, :attr:`HardwareCost.static_bytes`, and its stack)."""
        if self.sram_budget is None:
            return None
        frontend = self.frontend_cost(candidate.subnet.resolution)
        beside = HardwareCost(memory, None, frontend, stack_bytes=self.stack_bytes)
        return self.sram_budget - beside.static_bytes - beside.stack_bytes

    def _memory(self, graph: Graph, plan: PatchPlan | None) -> MemoryReport:
        c = self.config
        return plan_memory(
            graph, precision=c.precision, update=c.update, optimizer=c.optimizer, patches=plan
        )

    def _step_s(self, graph: Graph, plan: PatchPlan | None) -> float:
        """The predicted training step (0 without a device profile)."""
        latency = self._latency(graph, plan)
        return 0.0 if latency is None else latency.train_step_s

    def _latency(self, graph: Graph, plan: PatchPlan | None) -> LatencyReport | None:
        if self.device is None:
            return None
        # the profile predicts its own engine, at the precision it was calibrated in
        width = PRECISIONS[self.device.precision].activation
        return predict_latency(graph, self.device.coefficients, width, plan)

    def latency(self, candidate: Candidate) -> LatencyReport | None:
        """The predicted latencies of ``candidate`` as scheduled (a training step, the forward
        pass alone), as :meth:`__call__` predicts them but without planning its memory (None
        without a device profile).

        Raises:
            ConfigError: the candidate's schedule cannot run on its network.
        """
        graph = self._graph(candidate)
        return self._latency(graph, schedule_plan(graph, candidate.schedule))

    def _least_arena(self, whole: Candidate, patches: int) -> Schedule | None:
        """``patches`` × ``patches`` over the stem and the first B blocks for the B of least
        arena, then least latency; None where that count cannot run on this network."""
        return self._least.get((whole.key, patches), lambda: self._least_arena_of(whole, patches))

    def _least_arena_of(self, whole: Candidate, patches: int) -> Schedule | None:
        graph = self._graph(whole)
        arenas: list[tuple[int, int, PatchPlan]] = []  # (arena, blocks, plan) in block order
        for blocks, end in _blocks_to_patch(graph):
            try:
                plan = plan_patches(graph, patches, end)
            except ConfigError:
                continue
            arenas.append((self._memory(graph, plan).arena_bytes, blocks, plan))
        if not arenas:
            return None
        least = min(a for a, _, _ in arenas)
        # the latency only parts those of least arena (of equal ones, the fewest blocks)
        tied = [(blocks, plan) for a, blocks, plan in arenas if a == least]
        if len(tied) > 1:
            tied = [min(tied, key=lambda t: self._step_s(graph, t[1]))]
        return Schedule(patches, tied[0][0])

    def cost_with_graph(self, candidate: Candidate) -> tuple[HardwareCost, Graph]:
        """The cost and the traced training graph it was computed from.

        Raises:
            ConfigError: the candidate's schedule cannot run on its network.
        """
        graph = self._graph(candidate)
        cost = self._costs.get(
            candidate.key,
            lambda: self._cost(
                graph, schedule_plan(graph, candidate.schedule), candidate.subnet.resolution
            ),
        )
        return cost, graph

    @property
    def patch_choices(self) -> tuple[int, ...]:
        """The patches per side a search may propose (:data:`SEARCHED_PATCHES`), none where
        the configuration fixes the schedule, runs whole images or trains in fp32."""
        open_ = self.fixed is None and self.config.patches == "auto"
        return SEARCHED_PATCHES if open_ and self.config.precision == "int8" else ()

    def schedule(self, candidate: Candidate) -> Candidate:
        """``candidate`` with the schedule of its frozen prefix the configuration asks for:
        whole images (``none``); the fixed ``N:B``; or (``auto``) whole images where they fit
        the SRAM budget or the step is not int8 (the bundle's engine runs patches), else the
        patch schedule of least predicted latency (of least memory without a latency model)
        among those that fit, else the one of least memory. Tried: every patch count of
        :data:`~tinytune.spaces.PATCHES` over the stem and the first B blocks, for every B
        whose stage trains nothing (milliseconds each: the planner is exact and cheap), but no
        count above the first that fits over the same blocks (more patches take no less time:
        each recomputes more overlap and makes more calls). The arena need not fall as the
        count grows (a count may hold as much as the one before it and the next less), so
        every count is tried until one fits.

        A candidate that asks for N × N patches (a schedule of N > 1, as a search proposes
        them: :attr:`patch_choices`) gets N × N over the stem and the first B blocks for the B
        of least arena (then least latency), where ``auto`` allows patches and that count can
        run; else it is scheduled as any other.

        Raises:
            ConfigError: a fixed schedule this candidate's network cannot run, or with an
                fp32 step.
        """
        whole = candidate.training
        asked = candidate.schedule.patches
        if asked > 1 and asked in self.patch_choices:
            chosen = self._least_arena(whole, asked)
            if chosen is not None:
                return replace(whole, schedule=chosen)
        if self.fixed is not None:
            if self.config.precision != "int8":
                raise ConfigError(
                    f"patch-based execution is planned in int8 only (the bundle's engine runs "
                    f"it), got patches {self.config.patches} with precision "
                    f"{self.config.precision}"
                )
            scheduled = replace(whole, schedule=self.fixed)
            schedule_plan(self._graph(whole), self.fixed)  # the one-line refusal, if any
            return scheduled
        if self.config.patches == "none" or self.sram_budget is None:
            return whole
        if self.config.precision != "int8":  # patches are the int8 engine's (the bundle's)
            return whole
        chosen = self._auto.get(whole.key, lambda: self._least_latency(whole))
        return whole if chosen is None else replace(whole, schedule=chosen)

    def _least_latency(self, whole: Candidate) -> Schedule | None:
        """The ``auto`` schedule of :meth:`schedule` for a candidate of int8 steps under an SRAM
        budget: None for whole images."""
        graph = self._graph(whole)
        memory = self._memory(graph, None)
        budget = self._arena_budget(whole, memory)
        assert budget is not None
        arena = memory.arena_bytes
        if arena <= budget:
            return None
        best: tuple[tuple[int, float, int], Schedule] | None = None
        for blocks, end in _blocks_to_patch(graph):
            for n in PATCHES[1:]:
                try:
                    plan = plan_patches(graph, n, end)
                except ConfigError:
                    break
                held = self._memory(graph, plan).arena_bytes
                fits = held <= budget
                # the latency parts only schedules that fit: predicted for those alone
                rank = (0 if fits else 1, self._step_s(graph, plan) if fits else 0.0, held)
                if best is None or rank < best[0]:
                    best = (rank, Schedule(n, blocks))
                if fits:
                    break  # more patches over the same blocks take no less time
        return None if best is None or best[0][2] >= arena else best[1]


def _blocks_to_patch(graph: Graph) -> list[tuple[int, int]]:
    """``(blocks, end op)`` of every patched stage a prefix of ``graph`` may take: the stem and
    the first B blocks (a user's network: its first B + 1 stages), for every B whose ops train
    nothing."""
    frozen, out = frozen_ops(graph), []
    for blocks in range(patch_blocks(graph) + 1):
        try:
            end = block_end(graph, blocks)
        except ConfigError:  # no block after the stem: nothing to patch
            break
        if end > frozen:
            break
        out.append((blocks, end))
    return out


def frozen_ops(graph: Graph) -> int:
    """How many ops from the input train nothing and need no gradient."""
    for op in graph.ops:
        if op.params.any_trained or graph.tensors[op.output].requires_grad:
            return op.index
    return len(graph.ops)
