"""The fidelity ladder's decisions (:mod:`tinytune.search.ladder.decisions`) carried out on the
run's trials: notes given, low-fidelity tasks started, brackets joined and settled."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tinytune.search.config.budgets import RunLimits
from tinytune.search.ladder.brackets import Ladder
from tinytune.search.ladder.decisions import Bracket, Member, Note, Prune, Submit, Verdict
from tinytune.search.run.ledger import Ledger

__all__ = ["LadderSteps"]

log = logging.getLogger(__name__)


class LadderSteps:
    """The ladder of one run and the ledger its decisions act on."""

    def __init__(self, ladder: Ladder, ledger: Ledger, limits: RunLimits) -> None:
        self.ladder, self.ledger, self.limits = ladder, ledger, limits

    def note(self, notes: Iterable[Note]) -> None:
        """Give trials the attributes the ladder decided."""
        for n in notes:
            self.ledger.study.note(n.trial, **n.attrs)

    def start(self, submit: Submit) -> None:
        """Start a low-fidelity task of the ladder."""
        ledger = self.ledger
        ledger.executor.submit(submit.key, submit.task(ledger.task(submit.candidate)))
        if submit.kind == "base":
            ledger.counts.base_tasks += 1
        else:
            ledger.counts.screen_tasks += 1

    def settle(self, verdict: Verdict) -> None:
        """Carry out a decided bracket: its notes, its members not promoted told PRUNED, and
        the measured fine-tune of the one promoted."""
        ledger = self.ledger
        self.note(verdict.notes)
        ledger.counts.proxy_scored += verdict.scored
        self.prune(verdict.pruned)
        chosen = verdict.promoted
        if chosen is not None:
            ledger.counts.promoted += 1
            ledger.emit("promoted", trial=chosen.trial.number)
            if not ledger.measure(chosen):
                log.info("trial %d was promoted but not measured", chosen.trial.number)

    def prune(self, pruned: Iterable[Prune]) -> None:
        """Tell members of a bracket that were not promoted PRUNED."""
        for p in pruned:
            self.ledger.study.tell_pruned(p.trial, p.reason)
            self.ledger.counts.not_promoted += 1

    def join(self, bracket: Bracket, member: Member) -> None:
        """A member joins its bracket, unless its candidate is in it already (told PRUNED) or
        was measured before (told the stored result)."""
        reason = self.ladder.refusal(bracket, member)
        if reason is not None:
            self.ledger.reject(member.trial, reason)
        elif not self.ledger.reuse(member.trial, member.candidate, member.cost):
            self.note([self.ladder.join(bracket, member)])
            self.limits.idle = 0

    def close(self) -> bool:
        """Nothing runs and nothing more can be proposed: decide the brackets whose members
        are scored as they stand; False when none could be."""
        closed = False
        while (verdict := self.ladder.close(self.ledger.front())) is not None:
            self.settle(verdict)
            closed = True
        return closed
