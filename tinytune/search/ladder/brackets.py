"""The fidelity ladder's brackets: η trials on one sub-network, scored at a low fidelity, of
which one is promoted to a measured fine-tune.

The low rung is either the additive proxy (``--proxy``) or a short fine-tune (``--halving``:
successive halving on epochs and training images). Optuna's pruners judge a trial by
intermediate values of one objective, which a multi-objective study cannot report
(``Trial.report`` refuses it), so the rungs are kept here rather than in a pruner.

With the proxy: before the search, the contribution analysis of the study's reference sub-network
(:mod:`tinytune.search.ladder.contribution`; stored and reused by key) gives MCUNetV3's additive
gains. Each fresh proposal then opens a bracket: η−1 sibling trials on its sub-network are enqueued
(the sampler draws their schemes), all are scored by the proxy
(:mod:`tinytune.search.ladder.proxy`; the sub-network's classifier-only accuracy is measured once,
stored and reused: :mod:`tinytune.search.ladder.proxy_rung`), stored as ``proxy`` evaluations, and
the member chosen by :func:`tinytune.search.ladder.promotion.choose_promotion` is measured; Optuna
is told PRUNED for the others, as a rung of successive halving prunes.

With short fine-tunes: each member is fine-tuned for ``screen_epochs`` epochs on a stratified
``screen_fraction`` of the training images (stored as a ``short`` evaluation and reused), and
the member whose short validation accuracy adds most to the measured front is promoted by the
same rule. No contribution analysis and no classifier-only bases are needed.

The ladder stores its own evaluations and reads the store; what Optuna is told, the tasks to
start and the trial to measure it returns as decisions (:mod:`tinytune.search.ladder.decisions`)
that the driver carries out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tinytune.db import EvaluationRecord, Store
from tinytune.evaluators import EvaluationResult
from tinytune.search.config.search_config import SearchConfig
from tinytune.search.execution.worker_tasks import Tasks
from tinytune.search.front.pareto import reference
from tinytune.search.front.recording import FrontPoint
from tinytune.search.ladder.decisions import (
    Bracket,
    Enqueue,
    Member,
    Note,
    Outcome,
    Prune,
    Submit,
    Verdict,
)
from tinytune.search.ladder.promotion import calibration_offset, choose_promotion
from tinytune.search.ladder.proxy_rung import ProxyRung
from tinytune.search.study.attrs import Attr
from tinytune.spaces import SubnetConfig, SupernetSpec, subnet_params

# Bracket and Member are re-exported: they were defined here
__all__ = ["Bracket", "Ladder", "LadderContext", "Limits", "Member"]


class Limits(Protocol):
    """What the ladder reads of the run's limits
    (:class:`tinytune.search.config.budgets.RunLimits`)."""

    def time_left(self) -> bool: ...

    def may_propose(self) -> bool: ...


@dataclass(frozen=True)
class LadderContext:
    """What the ladder uses of its run.

    Attributes:
        config: the search's settings (the ladder's, the study's name, the budgets).
        spec: the supernet.
        store: where the ladder's evaluations and the contribution tables are stored.
        limits: whether the run may still propose trials, and has time left.
        next_key: a key for a task that is not a trial (the run's, shared with its other
            tasks).
    """

    config: SearchConfig
    spec: SupernetSpec
    store: Store
    limits: Limits
    next_key: Callable[[], int]


class Ladder:
    """The brackets of one run (see the module docstring)."""

    def __init__(self, context: LadderContext) -> None:
        self.config, self.spec, self.store = context.config, context.spec, context.store
        self.limits, self.next_key = context.limits, context.next_key
        self.brackets: dict[int, Bracket] = {}
        self.base_tasks: dict[int, SubnetConfig] = {}  # executor key -> its sub-network
        self.proxy = ProxyRung(context.config, context.spec, context.store)
        self.screening = context.config.halving
        self.screen_tasks: dict[int, Member] = {}  # executor key -> the member it screens

    def busy(self) -> int:
        """Tasks of the ladder in flight (classifier-only bases, short fine-tunes)."""
        return len(self.base_tasks) + len(self.screen_tasks)

    def committed_epochs(self, full: float, short: float) -> float:
        """Epochs of the ladder's tasks in flight and of what its open brackets still need (a
        measured fine-tune each, and the screenings of members and siblings to come)."""
        total = full * len(self.base_tasks) + short * len(self.screen_tasks)
        for bracket in self.brackets.values():
            total += full
            if self.screening:
                todo = sum(1 for m in bracket.members if m.screen_state == "todo")
                total += short * (todo + max(0, bracket.siblings_left))
        return total

    def prepare(self, tasks: Tasks) -> bool:
        """Measure (or reuse) the proxy's contribution table on the run's executor before the
        search (:meth:`ProxyRung.prepare`); False when it cannot be had (the ladder is then off
        for the run). Screening by short fine-tunes needs none."""
        return self.screening or self.proxy.prepare(tasks, self.limits.time_left)

    # -- joining -------------------------------------------------------------------------------

    def open(self, bracket_id: int, subnet: SubnetConfig, siblings: int) -> Bracket:
        bracket = Bracket(bracket_id, subnet, max(0, siblings))
        base = None if self.screening else self.proxy.known_base(subnet)
        if self.screening:
            bracket.base_state = "known"  # short fine-tunes need no classifier-only base
        elif base is not None:
            bracket.base, bracket.base_state = base, "known"
        self.brackets[bracket_id] = bracket
        return bracket

    def open_fresh(self, member: Member) -> tuple[Bracket, tuple[Enqueue, ...]]:
        """The bracket that a fresh proposal opens on its sub-network, and its siblings to
        enqueue (the member joins it as the others do: :meth:`refusal`, :meth:`join`)."""
        number = member.trial.number
        bracket = self.open(number, member.candidate.subnet, self.config.proxy_eta - 1)
        params = subnet_params(member.candidate.subnet, self.spec)
        siblings = (Enqueue(params, {Attr.BRACKET: number}) for _ in range(bracket.siblings_left))
        return bracket, tuple(siblings)

    def bracket_of(self, bracket_id: int, subnet: SubnetConfig, waiting: Sequence[Any]) -> Bracket:
        """The open bracket of a sibling proposed now, with one sibling fewer to come; for the
        siblings of a bracket that an earlier run left unfinished, the bracket opened again,
        the siblings still ``waiting`` (among them the one proposed) to come."""
        bracket = self.brackets.get(bracket_id)
        if bracket is None:
            left = sum(1 for t in waiting if t.user_attrs.get(Attr.BRACKET) == bracket_id)
            return self.open(bracket_id, subnet, left - 1)
        bracket.siblings_left -= 1
        return bracket

    def refusal(self, bracket: Bracket, member: Member) -> str | None:
        """Why ``member`` may not join ``bracket`` (its candidate is in it already, so Optuna
        is told PRUNED); None when it may."""
        if member.candidate.key in bracket.keys:
            return "the same candidate is already in its bracket"
        return None

    def join(self, bracket: Bracket, member: Member) -> Note:
        """Add a member to its bracket (a short fine-tune stored for its candidate is its
        score); the note of its bracket for its trial."""
        bracket.keys.add(member.candidate.key)
        bracket.members.append(member)
        if self.screening:
            stored = self.store.find_evaluation(
                self.config.study_name, member.candidate.key, "short"
            )
            if stored is not None and stored.status == "ok" and stored.val_accuracy is not None:
                member.screen, member.screen_state = stored.val_accuracy, "done"
        return Note(member.trial, {Attr.BRACKET: bracket.id})

    # -- the low rung --------------------------------------------------------------------------

    def ready(self, bracket: Bracket) -> bool:
        filled = bracket.siblings_left <= 0 or not self.limits.may_propose()
        if self.screening:
            return filled and all(m.screen_state in ("done", "failed") for m in bracket.members)
        return filled and bracket.base_state in ("known", "failed")

    def step(self, front: Sequence[FrontPoint]) -> Verdict | Submit | None:
        """Decide a bracket that is ready (against the run's measured ``front``), or start a
        low-fidelity task of one (a short fine-tune of a member, or the classifier-only
        base); None when there is neither."""
        for bracket in list(self.brackets.values()):
            if self.ready(bracket):
                return self.decide(bracket, front)
        if self.screening:
            for bracket in self.brackets.values():
                for member in bracket.members:
                    if member.screen_state == "todo":
                        return self.screen(member)
            return None
        for bracket in self.brackets.values():
            if bracket.base_state == "unknown":
                return self.base(bracket)
        return None

    def base(self, bracket: Bracket) -> Submit:
        """Measure the classifier-only accuracy of a bracket's sub-network (stored, reused)."""
        candidate = self.proxy.base_candidate(bracket.subnet)
        self.store.add_candidate(candidate.key, candidate.supernet, candidate.to_json())
        key = self.next_key()
        self.base_tasks[key] = bracket.subnet
        for b in self.brackets.values():
            if b.subnet == bracket.subnet:
                b.base_state = "running"
        return Submit(key, candidate, "base")

    def screen(self, member: Member) -> Submit:
        """Fine-tune a member briefly on part of the training images (its low fidelity)."""
        key = self.next_key()
        self.screen_tasks[key] = member
        member.screen_state = "running"
        config = self.config
        return Submit(
            key, member.candidate, "screen", config.screen_epochs, config.screen_fraction
        )

    def on_result(self, key: int, result: EvaluationResult) -> Outcome | None:
        """Take a result of the ladder's own tasks; None when ``key`` is not one."""
        if key in self.base_tasks:
            return self.on_base(key, result)
        if key in self.screen_tasks:
            return self.on_screen(key, result)
        return None

    def on_base(self, key: int, result: EvaluationResult) -> Outcome:
        subnet = self.base_tasks.pop(key)
        base = self.proxy.store_base(subnet, result)
        for b in self.brackets.values():
            if b.subnet == subnet:
                b.base, b.base_state = base, "known" if base is not None else "failed"
        return Outcome((), "base")

    def on_screen(self, key: int, result: EvaluationResult) -> Outcome:
        """Store a short fine-tune's result as a ``short`` evaluation and score its member."""
        member = self.screen_tasks.pop(key)
        record = EvaluationRecord.of(
            self.config.study_name,
            member.candidate.key,
            "short",
            result,
            trial_number=member.trial.number,
            memory_bytes=member.cost.sram_bytes,
            latency_ms=1000.0 * float(member.cost.latency_s or 0.0),
            details={**result.details, "scheme": member.scheme},
            failure="the short fine-tune failed",
        )
        self.store.add_evaluation(record)
        error, ok = record.error, record.status == "ok"
        notes: tuple[Note, ...] = ()
        if ok:
            member.screen, member.screen_state = float(result.val_accuracy or 0.0), "done"
            notes = (Note(member.trial, {Attr.SCREEN_ACCURACY: member.screen}),)
        else:
            member.screen_state = "failed"
        return Outcome(
            notes,
            "screened",
            {"trial": member.trial.number, "accuracy": member.screen},
            screen_error=error,
        )

    def score_measured(self, member: Member) -> tuple[Note, ...]:
        """A baseline or re-queued trial is measured directly; score it by the proxy too, for
        τ (not screened: a short fine-tune would cost what the proxy does not)."""
        if self.screening:
            return ()
        base = self.proxy.known_base(member.candidate.subnet)
        if base is None or self.proxy.table is None:
            return ()
        est = self.proxy.estimate(member, base)
        return (Note(member.trial, {Attr.PROXY_ACCURACY: est.accuracy}),)

    # -- deciding ------------------------------------------------------------------------------

    def scores(self, bracket: Bracket) -> tuple[list[Member], list[float], list[Note]]:
        """The members that have a low-fidelity score, their scores, and the notes of the
        proxy's estimates."""
        members = bracket.members
        if self.screening:
            scored = [m for m in members if m.screen is not None]
            return scored, [m.screen for m in scored], []  # type: ignore[misc]
        if bracket.base is None:  # its base failed
            return list(members), self.proxy.rank(members), []
        scores = [self.proxy.estimate(m, bracket.base).accuracy for m in members]
        notes = [
            Note(m.trial, {Attr.PROXY_ACCURACY: a}) for m, a in zip(members, scores, strict=True)
        ]
        return list(members), scores, notes

    def decide(self, bracket: Bracket, front: Sequence[FrontPoint]) -> Verdict:
        """Score a complete bracket at the low fidelity and promote one member to measured:
        the one whose point adds most to the measured ``front``."""
        del self.brackets[bracket.id]
        if not bracket.members:
            return Verdict()
        fidelity = "short" if self.screening else "proxy"
        members, scores, notes = self.scores(bracket)
        notes += [Note(m.trial, {Attr.FIDELITY: fidelity}) for m in bracket.members]
        if not members:
            reason = "every short fine-tune of its bracket failed"
            return Verdict(tuple(notes), 0, self.pruned(bracket.members, reason))
        if not self.limits.time_left():
            reason = "the time budget was spent before a promotion"
            return Verdict(tuple(notes), len(members), self.pruned(bracket.members, reason))
        points = [(p.val_accuracy, float(p.memory_bytes), p.latency_s or 0.0) for p in front]
        contenders = [
            (score, float(m.cost.sram_bytes), float(m.cost.latency_s or 0.0))
            for score, m in zip(scores, members, strict=True)
        ]
        config = self.config
        ref = reference([*points, *contenders], config.sram_budget_bytes, config.latency_budget_s)
        chosen = members[choose_promotion(contenders, points, ref, self.offset())]
        notes.append(Note(chosen.trial, {Attr.PROMOTED: True}))
        pruned = self.pruned(
            [m for m in bracket.members if m is not chosen],
            f"{fidelity}: not promoted; trial {chosen.trial.number} of its bracket was",
        )
        return Verdict(tuple(notes), len(members), pruned, chosen)

    @staticmethod
    def pruned(members: list[Member], reason: str) -> tuple[Prune, ...]:
        return tuple(Prune(m.trial, reason) for m in members)

    def close(self, front: Sequence[FrontPoint]) -> Verdict | None:
        """Nothing runs and nothing more can be proposed: decide the next bracket whose
        members are scored as they stand; None when none can be."""
        for bracket in list(self.brackets.values()):
            if bracket.base_state in ("known", "failed"):
                return self.decide(bracket, front)
        return None

    def abandon(self) -> tuple[Prune, ...]:
        """The run ends: the members still waiting are to be told PRUNED."""
        reason = "the run ended before a promotion"
        pruned = tuple(p for b in self.brackets.values() for p in self.pruned(b.members, reason))
        self.brackets.clear()
        return pruned

    def offset(self) -> float:
        """Median gap between measured and low-fidelity accuracy in this study."""
        store, name = self.store, self.config.study_name
        fidelity = "short" if self.screening else "proxy"
        proxy = {
            e.candidate_key: e.val_accuracy if self.screening else e.accuracy
            for e in store.evaluations(name, fidelity=fidelity, status="ok")
        }
        pairs = [
            (proxy[e.candidate_key], e.val_accuracy)
            for e in store.evaluations(name, fidelity="measured", status="ok")
            if proxy.get(e.candidate_key) is not None and e.val_accuracy is not None
        ]
        return calibration_offset(pairs)  # type: ignore[arg-type]
