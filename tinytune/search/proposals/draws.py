"""Drawing mutants of the front: the machinery the mutant strategies share
(:mod:`~tinytune.search.proposals.climbing`, :mod:`~tinytune.search.proposals.front`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from tinytune.search.proposals.operators import mutant
from tinytune.spaces import Candidate, SupernetSpec

__all__ = ["Drawn", "best_drawn", "propose_mutant"]

Drawn = tuple[dict[str, Any], Candidate, Candidate]
"""A mutant as :func:`propose_mutant` draws it: its trial's parameters, its parent and itself."""


def propose_mutant(
    parents: list[Candidate],
    baselines: list[Candidate],
    spec: SupernetSpec,
    rng: random.Random,
    fits: Callable[[Candidate], bool],
    taken: Callable[[Candidate], bool],
    cuts: tuple[int, ...] | None = None,
    rules: Mapping[str, str] | None = None,
    patches: tuple[int, ...] = (),
    weights: list[float] | None = None,
    wanted: Callable[[Candidate], bool] | None = None,
) -> Drawn | None:
    """The next mutant a run enqueues: its parameters, its parent and itself, a mutant of one of
    ``parents`` (the front's candidates) or a repair of one of the ``baselines`` that does not
    fit, which ``fits`` the budgets and is not ``taken`` (measured or in flight); None when
    none is found. ``fits`` predicts a cost, so it is asked once per candidate. ``rules``: the
    preset whose rule made a parent, by its key (:func:`mutant`). ``weights``: each parent's
    chance to be drawn (default: equal); a baseline repaired into the budget is drawn as
    often as the mean parent. ``wanted``: a further condition on the mutant, asked before
    its cost is predicted."""
    priced: dict[str, bool] = {}

    def fits_once(candidate: Candidate) -> bool:
        if candidate.key not in priced:
            priced[candidate.key] = fits(candidate)
        return priced[candidate.key]

    def accept(child: Candidate) -> bool:
        # the condition first: it may spare the prediction of a cost
        return not taken(child) and (wanted is None or wanted(child)) and fits_once(child)

    over = [p for p in baselines if p not in parents and not fits_once(p)]
    if weights is not None:
        mean = sum(weights) / len(weights) if weights else 1.0
        weights = list(weights) + [mean] * len(over)
    found = mutant(
        parents + over,
        spec,
        rng,
        accept,
        fits=fits_once,
        cuts=cuts,
        rules=rules,
        patches=patches,
        weights=weights,
    )
    return None if found is None else (found[1], found[2], found[0])


def best_drawn(
    propose: Callable[..., Drawn | None],
    score: Callable[[Drawn], float],
    draws: int,
    takes: Callable[[Candidate], bool] = lambda child: True,
) -> Drawn | None:
    """Of up to ``draws`` mutants that ``propose(wanted=...)`` draws, each one not drawn
    before in this call that ``takes`` accepts, the one of highest ``score`` (the first drawn
    of equal ones); None where none is drawn."""
    seen: set[str] = set()

    def wanted(child: Candidate) -> bool:
        if child.key in seen:  # drawn before: another one
            return False
        seen.add(child.key)
        return takes(child)

    best: tuple[float, Drawn] | None = None
    for _ in range(draws):
        found = propose(wanted=wanted)
        if found is None:
            break
        value = score(found)
        if best is None or value > best[0]:
            best = (value, found)
    return None if best is None else best[1]
