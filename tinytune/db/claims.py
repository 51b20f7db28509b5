"""Measurements in flight between drivers that share a study: a candidate claimed by one trial
at a time, the study's budget counted over finished evaluations and claims, the setup of a new
study claimed by one driver, claims released when a driver stops.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from tinytune.db.models import ClaimRow, EvaluationRow, StudySetupRow
from tinytune.db.records import Claim, EvaluationRecord, _evaluation_record, _now
from tinytune.db.transactions import StoreBase, retried
from tinytune.errors import StorageError

__all__ = ["TWIN_OF", "Claims"]

TWIN_OF = "twin_of"
"""The key in a measured evaluation's ``details`` of the trial whose fine-tune it shares: the
same candidate under another schedule of its frozen prefix, which changes no value it
computes (:class:`tinytune.spaces.Schedule`), priced by the hardware model and trained never."""


class Claims(StoreBase):
    """The claims protocol of :class:`~tinytune.db.store.Store`."""

    def claim_measurement(
        self,
        study_name: str,
        candidate_key: str,
        trial_number: int,
        budget: int | None,
        uncounted: str | None = None,
    ) -> Claim:
        """Reserve a measured fine-tune of a candidate for a trial, atomically.

        The study's budget counts its finished measured fine-tunes (successful or failed; not
        the schedule twins, which share another's) and its claims, except those of the
        candidate ``uncounted`` (the study's reference, measured beside its budget);
        ``budget=None`` claims regardless of it. Drivers sharing the study
        serialise here: on PostgreSQL through a transaction-scoped advisory lock on the study,
        on SQLite through the database's single writer (the transaction writes first, so it
        holds the write lock before it reads).

        A claim whose commit reached the server but whose answer was lost (the connection
        dropped) is found by the retry as this trial's own and kept: ``claimed``.

        Returns:
            The outcome; see :class:`Claim`.
        """
        attempts = 0

        def claim() -> Claim:
            nonlocal attempts
            attempts += 1
            return self._claim(
                study_name, candidate_key, trial_number, budget, uncounted, attempts
            )

        return self.reconnect.call(claim)

    def _claim(
        self,
        study_name: str,
        candidate_key: str,
        trial_number: int,
        budget: int | None,
        uncounted: str | None,
        attempt: int,
    ) -> Claim:
        with self._transaction("claim a measurement in") as s:
            self._lock_study(s, study_name)
            previous = s.scalars(
                sa.select(EvaluationRow)
                .where(
                    EvaluationRow.study_name == study_name,
                    EvaluationRow.candidate_key == candidate_key,
                    EvaluationRow.fidelity == "measured",
                    EvaluationRow.status == "ok",
                )
                .order_by(EvaluationRow.id.desc())
                .limit(1)
            ).first()
            if previous is not None:
                return Claim("measured", evaluation=_evaluation_record(previous))
            holder = s.scalars(
                sa.select(ClaimRow.trial_number).where(
                    ClaimRow.study_name == study_name, ClaimRow.candidate_key == candidate_key
                )
            ).first()
            if holder is not None and attempt > 1 and holder == trial_number:
                return Claim("claimed")  # this very call's claim, committed before the drop
            if holder is not None:
                return Claim("in_flight", holder=holder)
            if budget is not None and self._spent(s, study_name, uncounted) >= budget:
                return Claim("spent")
            s.add(
                ClaimRow(
                    study_name=study_name,
                    candidate_key=candidate_key,
                    trial_number=trial_number,
                    created_at=_now(),
                )
            )
            return Claim("claimed")

    @retried
    def finish_measurement(self, rec: EvaluationRecord) -> int:
        """Store a measured evaluation and drop its claim in one transaction; returns its id.

        A trial's measurement is stored once: when the study holds a measured evaluation of the
        same trial and candidate already (the commit of a call whose answer a dropped
        connection lost), its id is returned and nothing is added.
        """
        if rec.id is not None:
            raise StorageError(
                f"evaluation record already has id {rec.id}; expected a new record (id=None)"
            )
        with self._transaction("finish a measurement in") as s:
            s.execute(
                sa.delete(ClaimRow).where(
                    ClaimRow.study_name == rec.study_name,
                    ClaimRow.candidate_key == rec.candidate_key,
                )
            )
            stored = s.scalars(
                sa.select(EvaluationRow.id).where(
                    EvaluationRow.study_name == rec.study_name,
                    EvaluationRow.candidate_key == rec.candidate_key,
                    EvaluationRow.trial_number == rec.trial_number,
                    EvaluationRow.fidelity == rec.fidelity,
                )
            ).first()
            if stored is not None and rec.trial_number is not None:
                return int(stored)
            return self._insert_evaluation(s, rec)

    @retried
    def claim_study_setup(self, study_name: str, driver: str) -> bool:
        """Whether ``driver`` (a token unique to the caller) sets up the new study
        ``study_name``: True for the first caller of a study, atomically, and again for that
        caller (a retry whose first commit went through); False for every other."""
        with self._transaction("claim the setup of a study in") as s:
            self._lock_study(s, study_name)
            holder = s.get(StudySetupRow, study_name)
            if holder is not None:
                return holder.driver == driver
            s.add(StudySetupRow(study_name=study_name, driver=driver, created_at=_now()))
            return True

    @retried
    def release_claims(self, study_name: str, trial_numbers: Iterable[int]) -> int:
        """Drop the claims of trials that will not finish (their driver stopped); returns how
        many there were."""
        numbers = list(trial_numbers)
        if not numbers:
            return 0
        with self._transaction("release claims in") as s:
            result = s.execute(
                sa.delete(ClaimRow).where(
                    ClaimRow.study_name == study_name, ClaimRow.trial_number.in_(numbers)
                )
            )
            return int(result.rowcount or 0)

    @retried
    def measured_budget_spent(
        self, study_name: str, uncounted: str | None = None
    ) -> tuple[int, int]:
        """Finished measured evaluations (ok or failed) and claims in flight of a study, those
        of the candidate ``uncounted`` left out, and schedule twins too (an evaluation whose
        ``details`` name, under :data:`TWIN_OF`, the trial whose fine-tune it shares)."""
        with self._transaction("read claims from") as s:
            return self._finished(s, study_name, uncounted), self._claims(s, study_name, uncounted)

    @staticmethod
    def _finished(s: Session, study_name: str, uncounted: str | None) -> int:
        # a schedule twin (``details.twin_of``) shares another's fine-tune: it costs none
        query = (
            sa.select(sa.func.count())
            .select_from(EvaluationRow)
            .where(
                EvaluationRow.study_name == study_name,
                EvaluationRow.fidelity == "measured",
                EvaluationRow.details[TWIN_OF].as_integer().is_(None),
            )
        )
        if uncounted is not None:
            query = query.where(EvaluationRow.candidate_key != uncounted)
        return int(s.scalar(query) or 0)

    @staticmethod
    def _claims(s: Session, study_name: str, uncounted: str | None) -> int:
        query = sa.select(sa.func.count()).select_from(ClaimRow)
        query = query.where(ClaimRow.study_name == study_name)
        if uncounted is not None:
            query = query.where(ClaimRow.candidate_key != uncounted)
        return int(s.scalar(query) or 0)

    def _spent(self, s: Session, study_name: str, uncounted: str | None) -> int:
        return self._finished(s, study_name, uncounted) + self._claims(s, study_name, uncounted)

    def _lock_study(self, s: Session, study_name: str) -> None:
        if self._engine.dialect.name == "postgresql":
            lock = sa.text("SELECT pg_advisory_xact_lock(hashtext(:name))")
            s.execute(lock, {"name": study_name})
        else:  # a write first: SQLite takes its one write lock before the reads that follow
            s.execute(sa.delete(ClaimRow).where(sa.false()))
