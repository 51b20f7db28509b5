"""Which strategy makes a run's next trial.

A run's trials are the study's queue first (the reference, the baseline presets, retried trials,
a bracket's siblings), then fresh proposals. A share ``mutate`` of the fresh proposals are
mutant turns, spread evenly from the first (:func:`mutant_turn`); the others are the sampler's.
A share ``climb`` of the mutant turns climb, spread evenly from the second
(:func:`climbing_turn`): a turn tries its strategies in order (:data:`CLIMBING_TURN`,
:data:`MUTANT_TURN`) until one proposes, and the sampler draws where none does. After each
fine-tune measured, the strategies of :data:`AFTER_MEASURED` enqueue trials of their own.
With a preset, or ``mutate`` 0, a run makes no mutants.
"""

from __future__ import annotations

import functools
import math
import random

from tinytune.search.config.search_config import BASELINE_PRESETS
from tinytune.search.front.recording import FrontPoint
from tinytune.search.proposals.base import Context, Proposal, Strategy, Turn
from tinytune.search.proposals.draws import propose_mutant
from tinytune.search.proposals.registry import STRATEGIES
from tinytune.spaces import Candidate

__all__ = [
    "AFTER_MEASURED",
    "CLIMBING_TURN",
    "MUTANT_TURN",
    "Policy",
    "climbing_turn",
    "mutant_turn",
]

CLIMBING_TURN = ("climb", "front")
MUTANT_TURN = ("front",)
AFTER_MEASURED = ("twins",)


def mutant_turn(fresh: int, share: float) -> bool:
    """Whether fresh proposal number ``fresh`` (from 0) is a mutant when a ``share`` of them are,
    spread evenly from the first on: 0.5 is every other one, 0.75 three of every four."""
    tolerance = 1e-9  # 4 × 0.75 is 3, not a hair above it
    return math.ceil((fresh + 1) * share - tolerance) > math.ceil(fresh * share - tolerance)


def climbing_turn(turn: int, share: float) -> bool:
    """Whether mutant turn number ``turn`` (from 0) climbs when a ``share`` of them do, spread
    evenly from the second on: 0.5 is turns 1, 3, 5, ...; below 1 the first turn draws by the
    front's hypervolume, for there is no climb to build on yet."""
    return not mutant_turn(turn, 1.0 - share)


class Policy:
    """The proposal policy of one run (see the module docstring)."""

    def __init__(self, context: Context) -> None:
        self.context = context
        config = context.config
        self.active = bool(config.mutate) and config.preset is None
        """Whether this run makes fresh proposals of its own (mutants)."""
        self.strategies: dict[str, Strategy] = {n: s(context) for n, s in STRATEGIES.items()}
        self.fresh = 0  # fresh proposals of this run
        self.mutants = 0  # mutant turns of this run

    def fresh_turn(self, proposals: int) -> Proposal | None:
        """The trial a fresh proposal enqueues (None: the sampler draws it). ``proposals``: the
        run's proposals so far, which seed the turn's draw."""
        config = self.context.config
        turn_number, self.fresh = self.fresh, self.fresh + 1
        if not self.active or not mutant_turn(turn_number, config.mutate):
            return None
        climbs = climbing_turn(self.mutants, config.climb)
        self.mutants += 1
        front = self.context.front()
        if not front:
            return None
        turn = self._turn(random.Random(f"{config.seed}:{proposals}"), front)
        for name in CLIMBING_TURN if climbs else MUTANT_TURN:
            found = self.strategies[name].propose(turn)
            if found is not None:
                return found
        return None

    def _turn(self, rng: random.Random, front: tuple[FrontPoint, ...]) -> Turn:
        context = self.context
        # a front point a preset made keeps its rule in half of its mutants
        rules = {p.candidate_key: p.scheme for p in front if p.scheme in BASELINE_PRESETS}
        mutate = functools.partial(
            propose_mutant,
            spec=context.spec,
            rng=rng,
            fits=context.fits,
            taken=context.taken(),
            cuts=context.cuts or None,
            rules=rules,
            patches=context.hardware.patch_choices,
        )
        return Turn(rng, mutate)

    def measured(self, candidate: Candidate, trial_number: int) -> list[Proposal]:
        """The trials that answer a fine-tune just measured (not the reference's)."""
        out: list[Proposal] = []
        for name in AFTER_MEASURED:
            out += self.strategies[name].follow(candidate, trial_number)
        return out
