"""Climbing: a hill climb on accuracy that spends the budgets' headroom.

The parent is the study's most accurate fine-tune within the budgets. Of up to
:data:`CLIMB_DRAWS` mutants of it that do more work (a longer predicted forward pass on whole
images: a larger input, a later cut, a deeper stage, a wider block; :meth:`Climb.work`), the one
that does the most is proposed. A climb that took the longest training step instead lengthened
the bias-updated tail before it reached a larger input or a later cut, and found less accurate
points (``docs/bench/archive/search.md``).

Of equally accurate fine-tunes, the one of most work is climbed from first, so that a climb
level with its parent carries the next one on: a hill climb's move along a plateau (such a
point is not on the front: its parent, as accurate at less cost, dominates it). Where no new
mutant of that fine-tune does more work within the budgets (it sits at a budget's edge), the
climb starts from the next most accurate fine-tune that can climb; where none can, the turn
takes any mutant of the most accurate one. Where that fine-tune is right on every validation
image no climb can be more accurate, and the turn passes to the next strategy.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from tinytune.search.front.recording import feasible
from tinytune.search.proposals.base import Context, Proposal, Strategy, Turn
from tinytune.search.proposals.draws import Drawn, best_drawn
from tinytune.search.study.attrs import Attr
from tinytune.spaces import Candidate, Schedule

__all__ = ["CLIMB_DRAWS", "Climb", "climbing_mutant"]

CLIMB_DRAWS = 8
"""A climbing mutant is the one of most work among up to this many drawn."""


def climbing_mutant(
    top: Candidate,
    work: Callable[[Candidate], float | None],
    propose: Callable[..., Drawn | None],
    draws: int = CLIMB_DRAWS,
) -> Drawn | None:
    """Of up to ``draws`` new mutants of ``top`` that do more ``work`` than it (the predicted
    seconds of a forward pass on whole images), the one that does the most (the first drawn
    of equal ones): its parameters, ``top`` and itself; None where none does more.
    ``propose``: :func:`~tinytune.search.proposals.draws.propose_mutant` with all but its
    parents, baselines and ``wanted`` given."""
    floor = work(top)
    if floor is None:
        return None
    return best_drawn(
        functools.partial(propose, [top], []),
        lambda found: work(found[2]) or 0.0,
        draws,
        lambda child: (work(child) or 0.0) > floor,
    )


class Climb(Strategy):
    """The climbing turn's strategy (see the module docstring)."""

    name = "climb"

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self.works: dict[str, float | None] = {}  # by the whole candidate's key

    def propose(self, turn: Turn) -> Proposal | None:
        first = None
        for top in self.climb_from():  # the most accurate that can climb
            first = first or top
            found = climbing_mutant(top, self.work, turn.mutate)
            if found is not None:
                return _proposal(found, climbed=True)
        found = turn.mutate([first], []) if first is not None else None
        return None if found is None else _proposal(found, climbed=False)

    def work(self, candidate: Candidate) -> float | None:
        """The predicted seconds of ``candidate``'s forward pass on whole images (None without a
        latency model): how much network its features come from, not how much of it is
        updated. Priced once a run."""
        whole = dataclasses.replace(candidate, schedule=Schedule())
        if whole.key not in self.works:
            latency = self.context.hardware.latency(whole)
            self.works[whole.key] = None if latency is None else latency.inference_s
        return self.works[whole.key]

    def climb_from(self) -> Iterator[Candidate]:
        """The study's fine-tunes within the budgets a climb may start from, read as they are
        asked for: the most accurate on validation first, of equally accurate ones the one of
        most :meth:`work` first. One candidate per fine-tune: of its schedule twins, the least
        SRAM. None when the most accurate is right on every validation image."""
        config, store = self.context.config, self.context.store
        stored = store.evaluations(config.study_name, fidelity="measured", status="ok")
        ok = [e for e in stored if feasible(config, self.context.flash_budget, e)]
        ok.sort(key=lambda e: (-(e.val_accuracy or 0.0), e.memory_bytes or 0))
        if not ok or (ok[0].val_accuracy or 0.0) >= 1.0:
            return
        seen: set[str] = set()
        for _, level in itertools.groupby(ok, key=lambda e: e.val_accuracy):
            tied: list[Candidate] = []
            for e in level:
                record = store.get_candidate(e.candidate_key)
                candidate = None if record is None else Candidate.from_json(record.payload)
                if candidate is not None and candidate.training.key not in seen:
                    seen.add(candidate.training.key)
                    tied.append(candidate)
            yield from sorted(tied, key=lambda c: -(self.work(c) or 0.0))


def _proposal(found: Drawn, climbed: bool) -> Proposal:
    params, parent, _ = found
    attrs: dict[str, Any] = {Attr.MUTANT_OF: parent.key}
    if climbed:
        attrs[Attr.CLIMB] = True
    return Proposal(params, attrs)
