"""Mutants of the front drawn by the hypervolume: local search where the front already is.

At a budget of about ten fine-tunes a model-based sampler has seen too few trials to model the
joint space, and the presets a study measures first teach it nothing about the joint scheme's
parameters (a preset trial has none); the candidates that extend a front, though, lie next to
the ones on it. So a parent is drawn from the front by its fine-tune's exclusive share of the
front's hypervolume (SMS-EMOA's measure; a fine-tune's schedule twins count as one point), plus
a tenth of the mean share so that no point is never drawn (:meth:`FrontDraw.parents`). Under a
tight SRAM budget the front may hold little besides the classifier-only update while the
baseline presets over the budget hold the better schemes, so those baselines are parents too,
repaired into the budgets (:mod:`~tinytune.search.proposals.operators`).

Of up to :data:`SCREEN_DRAWS` mutants drawn so, the one that would add the most hypervolume
were it as accurate on validation as its parent is proposed (:meth:`FrontDraw.gain`): its cost
is the hardware model's, exact, under each schedule its fine-tune would be priced at; its
accuracy a guess that favours the mutants of less cost, which climbing balances.
"""

from __future__ import annotations

from collections.abc import Callable

from tinytune.search.config.search_config import BASELINE_PRESETS
from tinytune.search.front.pareto import contributions, hypervolume_gain, reference
from tinytune.search.proposals.base import Proposal, Strategy, Turn, priced_costs
from tinytune.search.proposals.draws import Drawn, best_drawn
from tinytune.search.study.attrs import Attr
from tinytune.spaces import Candidate, default_subnet, make_preset

__all__ = ["SCREEN_DRAWS", "FrontDraw", "screened_mutant"]

SCREEN_DRAWS = 8
"""A mutant drawn by the hypervolume is the one of most gain among up to this many drawn."""


def screened_mutant(
    gain: Callable[[Candidate, Candidate], float],
    propose: Callable[..., Drawn | None],
    draws: int = SCREEN_DRAWS,
) -> Drawn | None:
    """Of up to ``draws`` new mutants that ``propose`` draws, the one of highest
    ``gain(mutant, parent)``: the first drawn where none gains more than another."""
    return best_drawn(propose, lambda found: gain(found[2], found[1]), draws)


class FrontDraw(Strategy):
    """The mutant turn's strategy (see the module docstring)."""

    name = "front"

    def propose(self, turn: Turn) -> Proposal | None:
        parents, weights = self.parents()
        if not parents:
            return None
        baselines = []
        if self.context.config.baselines:  # those over a budget are repaired into it
            spec = self.context.spec
            subnet = default_subnet(spec)
            baselines = [make_preset(name, spec, subnet) for name in BASELINE_PRESETS]
        found = screened_mutant(
            self.gain, lambda **kw: turn.mutate(parents, baselines, weights=weights, **kw)
        )
        return None if found is None else Proposal(found[0], {Attr.MUTANT_OF: found[1].key})

    def gain(self, child: Candidate, parent: Candidate) -> float:
        """The share of the hypervolume box that ``child`` would add to the front under each
        schedule it would be priced at, were it as accurate on validation as ``parent`` (a
        baseline repaired into the budgets, never fine-tuned, as the front's median point)."""
        front = self.context.front()
        points = [(p.val_accuracy, float(p.memory_bytes), p.latency_s or 0.0) for p in front]
        if not points:
            return 0.0
        accuracy = {p.candidate_key: p.val_accuracy for p in front}.get(parent.key)
        if accuracy is None:
            accuracy = sorted(p[0] for p in points)[len(points) // 2]
        config = self.context.config
        ref = reference(points, config.sram_budget_bytes, config.latency_budget_s)
        costs = priced_costs(self.context, child)
        new = [(accuracy, float(c.sram_bytes), c.latency_s or 0.0) for c in costs]
        return hypervolume_gain(new, points, ref)

    def parents(self) -> tuple[list[Candidate], list[float]]:
        """The front's fine-tuned candidates a mutant may come from, one per fine-tune (the
        schedule twin of least SRAM standing for the others), and each one's chance."""
        front, candidates = [], []
        for p in self.context.front():
            record = self.context.store.get_candidate(p.candidate_key)
            if record is not None:
                front.append(p)
                candidates.append(Candidate.from_json(record.payload))
        if not candidates:
            return [], []
        groups = [c.training.key for c in candidates]
        points = [(p.val_accuracy, float(p.memory_bytes), p.latency_s or 0.0) for p in front]
        config = self.context.config
        ref = reference(points, config.sram_budget_bytes, config.latency_budget_s)
        share = contributions(groups, points, ref)
        chosen: dict[str, Candidate] = {}
        by_memory = sorted(range(len(front)), key=lambda i: front[i].memory_bytes)
        for i in by_memory:
            chosen.setdefault(groups[i], candidates[i])
        floor = 0.1 * sum(share.values()) / len(share) or 1.0
        return list(chosen.values()), [share[g] + floor for g in chosen]
