"""Where a run's next candidate comes from, apart from the loop that measures it.

The driver (:mod:`tinytune.search.run.driver`) asks the study for a trial, measures it and
records it; a :class:`Policy` decides what the study's queue holds before each fresh ask
(:mod:`~tinytune.search.proposals.policy`), from strategies that each live in one module, as an
Optuna sampler does: :mod:`~tinytune.search.proposals.climbing`,
:mod:`~tinytune.search.proposals.front`, :mod:`~tinytune.search.proposals.twins`, named in
:data:`~tinytune.search.proposals.registry.STRATEGIES`. Their mutation operators are
:mod:`~tinytune.search.proposals.operators`. A new study's opening, the reference and the
baseline presets, is :mod:`~tinytune.search.proposals.presets`'s, queued when the study is made.
The fidelity ladder's promotions propose no candidate: they choose which trials already proposed
are measured in full (:mod:`tinytune.search.ladder`).
"""

from __future__ import annotations

from tinytune.search.proposals.base import Context, Proposal, Strategy, Turn
from tinytune.search.proposals.encoding import joint_params
from tinytune.search.proposals.policy import Policy, climbing_turn, mutant_turn
from tinytune.search.proposals.presets import opening
from tinytune.search.proposals.registry import STRATEGIES

__all__ = [
    "STRATEGIES",
    "Context",
    "Policy",
    "Proposal",
    "Strategy",
    "Turn",
    "climbing_turn",
    "joint_params",
    "mutant_turn",
    "opening",
]
