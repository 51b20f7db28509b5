"""What the fidelity ladder decides, for the driver to carry out, and the trials it decides on.

The ladder (:class:`tinytune.search.ladder.brackets.Ladder`) keeps its brackets and their
low-fidelity scores, and stores its own evaluations; it neither tells Optuna anything nor starts a
task nor touches the run's counters. Each of its steps returns one of these values instead, and the
driver carries it out (with its ledger, :class:`tinytune.search.run.ledger.Ledger`): it gives
trials their attributes (:class:`Note`), enqueues a bracket's siblings (:class:`Enqueue`), starts a
low-fidelity task (:class:`Submit`), and, for a bracket that is decided (:class:`Verdict`),
tells the members not promoted PRUNED (:class:`Prune`) and measures the one promoted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tinytune.evaluators import FinetuneTask, HardwareCost
from tinytune.spaces import Candidate, SubnetConfig

__all__ = ["Bracket", "Enqueue", "Member", "Note", "Outcome", "Prune", "Submit", "Verdict"]


@dataclass
class Member:
    """A trial the driver proposed, with its candidate and predicted cost; in a bracket, it
    waits for its low-fidelity score."""

    trial: Any
    candidate: Candidate
    cost: HardwareCost
    scheme: str
    reference: bool = False
    screen: float | None = None  # the short fine-tune's validation accuracy
    screen_state: str = "todo"  # todo | running | done | failed


@dataclass
class Bracket:
    """Trials on one sub-network, scored at the low fidelity, of which one is measured."""

    id: int
    subnet: SubnetConfig
    siblings_left: int
    members: list[Member] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    base: float | None = None
    base_state: str = "unknown"  # known | running | failed | unknown


@dataclass(frozen=True)
class Note:
    """User attributes to give a trial (what optuna-dashboard shows of it)."""

    trial: Any
    attrs: Mapping[str, Any]


@dataclass(frozen=True)
class Enqueue:
    """A trial to enqueue: a sibling of a fresh bracket, on its sub-network, whose scheme the
    sampler draws."""

    params: Mapping[str, Any]
    attrs: Mapping[str, Any]


@dataclass(frozen=True)
class Prune:
    """A member of a bracket that is not promoted: Optuna is told PRUNED, with why."""

    trial: Any
    reason: str


@dataclass(frozen=True)
class Submit:
    """A low-fidelity task to start under ``key``: the classifier-only fine-tune of a
    sub-network (``base``, the proxy's base) or the short fine-tune of a member (``screen``).

    Attributes:
        epochs, train_fraction: what a short fine-tune changes in the study's fine-tuning
            task; None keeps it.
    """

    key: int
    candidate: Candidate
    kind: Literal["base", "screen"]
    epochs: int | None = None
    train_fraction: float | None = None

    def task(self, measured: FinetuneTask) -> FinetuneTask:
        """The worker's task, from the one that fine-tunes the candidate as the study
        measures it."""
        if self.epochs is not None:
            epochs = dataclasses.replace(measured.finetune, epochs=self.epochs)
            measured = measured.replace(finetune=epochs)
        if self.train_fraction is not None:
            measured = measured.replace(train_fraction=self.train_fraction)
        return measured


@dataclass(frozen=True)
class Outcome:
    """What a result of one of the ladder's tasks leads to: notes for the trials it scored,
    and the progress event to emit (its kind, then its fields).

    Attributes:
        screen_error: of a short fine-tune (event ``screened``), its error where it failed
            (None: it scored its member).
    """

    notes: tuple[Note, ...]
    event: str
    data: Mapping[str, Any] = field(default_factory=dict)
    screen_error: str | None = None


@dataclass(frozen=True)
class Verdict:
    """A bracket decided, in the order the driver carries it out: the notes (each member's
    low-fidelity score and fidelity, and which was promoted), the members scored (counted),
    those told PRUNED, and the member promoted to a measured fine-tune (None when none is).
    A bracket without members is decided with nothing to do."""

    notes: tuple[Note, ...] = ()
    scored: int = 0
    pruned: tuple[Prune, ...] = ()
    promoted: Member | None = None
