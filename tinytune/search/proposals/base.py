"""What a proposal strategy is given and what it returns (see :mod:`tinytune.search.proposals`)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from tinytune.errors import ConfigError
from tinytune.evaluators import HardwareCost, HardwareEvaluator
from tinytune.search.config.budgets import over_budget
from tinytune.search.config.search_config import SearchConfig
from tinytune.search.front.recording import FrontPoint
from tinytune.spaces import Candidate, Schedule, SupernetSpec

if TYPE_CHECKING:
    from tinytune.db import Store
    from tinytune.search.proposals.draws import Drawn

__all__ = ["Context", "Proposal", "Strategy", "Turn", "priced_costs", "schedules"]


class Proposal(NamedTuple):
    """A trial to enqueue: the sampler's parameters that select its candidate and the trial's
    attributes (:class:`tinytune.search.study.attrs.Attr`: whose mutant or twin it is)."""

    params: dict[str, Any]
    attrs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Context:
    """What the strategies of one run read: the run's options, network, store and hardware
    model, the cuts a fixed network may take, and the run's view of the study."""

    config: SearchConfig
    spec: SupernetSpec
    store: Store
    hardware: HardwareEvaluator
    flash_budget: int | None
    cuts: tuple[int, ...]
    front: Callable[[], tuple[FrontPoint, ...]]
    """The measured front as the run last snapshotted it."""
    fits: Callable[[Candidate], bool]
    """Whether a candidate, scheduled as the search schedules it, is within the budgets."""
    taken: Callable[[], Callable[[Candidate], bool]]
    """A test, read once from the study as it is now, of whether a candidate is measured or in
    flight under any schedule of its frozen prefix."""


@dataclasses.dataclass(frozen=True)
class Turn:
    """One fresh proposal's draw, shared by the strategies that the turn tries in order."""

    rng: random.Random
    mutate: Callable[..., Drawn | None]
    """:func:`tinytune.search.proposals.draws.propose_mutant` with all but its parents,
    baselines, weights and ``wanted`` given."""


class Strategy:
    """Where trials come from. ``propose`` makes a fresh turn's trial (None: the next strategy
    of the turn, else the sampler, draws); ``follow`` answers a fine-tune just measured with
    trials of its own. Each strategy is a module of :mod:`tinytune.search.proposals`, named in
    its registry."""

    name: ClassVar[str]

    def __init__(self, context: Context) -> None:
        self.context = context

    def propose(self, turn: Turn) -> Proposal | None:
        return None

    def follow(self, candidate: Candidate, trial_number: int) -> list[Proposal]:
        return []


def schedules(
    hardware: HardwareEvaluator, candidate: Candidate
) -> list[tuple[Candidate, Candidate]]:
    """``candidate`` asking for each patch count the search proposes, and as the hardware model
    schedules that (one pair per schedule it makes; none for a count its network cannot run):
    the candidates a fine-tune of it is priced as."""
    out: dict[str, tuple[Candidate, Candidate]] = {}
    for n in hardware.patch_choices or (None,):
        asked = candidate
        if n is not None:
            asked = dataclasses.replace(
                candidate, schedule=Schedule(n, 0) if n > 1 else Schedule()
            )
        try:
            scheduled = hardware.schedule(asked)
        except ConfigError:  # a count this network cannot run
            continue
        out.setdefault(scheduled.key, (asked, scheduled))
    return list(out.values())


def priced_costs(context: Context, candidate: Candidate) -> list[HardwareCost]:
    """The predicted costs of ``candidate`` under each of its :func:`schedules` within the
    budgets."""
    out: list[HardwareCost] = []
    for _, scheduled in schedules(context.hardware, candidate):
        cost = context.hardware(scheduled)
        if over_budget(context.config, context.flash_budget, cost)[1] is None:
            out.append(cost)
    return out
