"""The study's measurements as a run reads them: whether a candidate fits the budgets, whether
it is taken (measured, or in flight in this run), and which fine-tune a schedule twin shares."""

from __future__ import annotations

from collections.abc import Callable

from tinytune.db import EvaluationRecord, Store
from tinytune.errors import ConfigError
from tinytune.search.config.budgets import over_budget
from tinytune.search.config.search_config import SearchConfig
from tinytune.search.ladder.decisions import Member
from tinytune.search.run.preflight import Preflight
from tinytune.spaces import Candidate

__all__ = ["StudyView"]


class StudyView:
    """The study of one run as it reads it (see the module docstring); ``pending``: the run's
    measured fine-tunes in flight, by trial number, as the ledger keeps them."""

    def __init__(
        self, config: SearchConfig, store: Store, checked: Preflight, pending: dict[int, Member]
    ) -> None:
        self.config, self.store, self.checked, self.pending = config, store, checked, pending
        self.trained: dict[str, str] = {}  # a stored candidate's key: its training key

    def fits(self, candidate: Candidate) -> bool:
        """Whether the candidate, scheduled as the search schedules it, is predicted within
        the budgets."""
        try:
            cost = self.checked.hardware(self.checked.hardware.schedule(candidate))
        except ConfigError:  # a fixed patch schedule its network cannot run
            return False
        return over_budget(self.config, self.checked.flash_budget, cost)[1] is None

    def taken(self) -> Callable[[Candidate], bool]:
        """Whether a candidate is measured in the study, or in flight in this run, under any
        schedule of its frozen prefix (which changes no value: a schedule twin is priced, not
        fine-tuned): a test against the study as it is now, read once, for the many candidates
        that one proposal draws (up to 64 a mutant, eight times that a climb)."""
        pending = {m.candidate.training.key for m in self.pending.values()}
        stored = self.store.evaluations(self.config.study_name, fidelity="measured", status="ok")
        own = {e.candidate_key for e in stored}  # with or without a validation accuracy
        fine_tuned = {
            self.training_key(e.candidate_key) for e in stored if e.val_accuracy is not None
        }

        def taken(candidate: Candidate) -> bool:
            whole = candidate.training.key
            return whole in pending or candidate.key in own or whole in fine_tuned

        return taken

    def training_key(self, candidate_key: str) -> str | None:
        """The training key of a stored candidate (None where it is not stored)."""
        if candidate_key not in self.trained:
            record = self.store.get_candidate(candidate_key)
            if record is None:
                return None
            self.trained[candidate_key] = Candidate.from_json(record.payload).training.key
        return self.trained[candidate_key]

    def fine_tuned(self, candidate: Candidate) -> EvaluationRecord | None:
        """The study's successful measurement of ``candidate`` under any schedule: its own
        first, else a schedule twin's; None when none."""
        own = self.store.find_evaluation(self.config.study_name, candidate.key, "measured")
        if own is not None and own.val_accuracy is not None:
            return own
        whole = candidate.training.key
        for e in self.store.evaluations(self.config.study_name, fidelity="measured", status="ok"):
            if e.val_accuracy is not None and self.training_key(e.candidate_key) == whole:
                return e
        return None
