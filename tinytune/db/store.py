"""The Store: tinytune's candidates, evaluations, Pareto snapshots, calibrations and contribution
tables, beside Optuna's tables.

Callers see frozen records, never ORM objects or sessions. Every method is its own short
transaction, so a crash loses at most the call in flight and nothing holds locks between calls
(SQLite has one writer at a time); on a database server, a transaction whose connection was lost
(a restart) is run again once the server answers (:mod:`tinytune.db.reconnect`).

The store is in three parts: the records and their validation (:mod:`tinytune.db.records`), the
engine and transactions every part shares (:mod:`tinytune.db.transactions`), the protocol of
measurements in flight between drivers (:mod:`tinytune.db.claims`); this module holds the
reads and writes of each table.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from tinytune.db.claims import Claims
from tinytune.db.engine import create_engine
from tinytune.db.migrations import upgrade
from tinytune.db.models import (
    CalibrationRow,
    CandidateRow,
    ContributionRow,
    EvaluationRow,
    ParetoSnapshotRow,
)
from tinytune.db.records import (
    CONTRIBUTION_PARTS,
    FIDELITIES,
    KEY_LENGTH,
    STATUSES,
    CalibrationRecord,
    CandidateRecord,
    Claim,
    ContributionRecord,
    EvaluationRecord,
    ParetoSnapshot,
    _calibration,
    _candidate_record,
    _check_json,
    _check_key,
    _check_name,
    _contribution_record,
    _evaluation_record,
    _now,
    _optional_float,
    _optional_int,
    _shorten,
    _snapshot,
)
from tinytune.db.transactions import retried
from tinytune.errors import StorageError

if TYPE_CHECKING:
    from tinytune.hwmodels.registry import Calibration

__all__ = [
    "CONTRIBUTION_PARTS",
    "FIDELITIES",
    "KEY_LENGTH",
    "STATUSES",
    "CalibrationRecord",
    "CandidateRecord",
    "Claim",
    "ContributionRecord",
    "EvaluationRecord",
    "ParetoSnapshot",
    "Store",
    "open_store",
]


def open_store(url: str, *, reconnect_wait_s: float | None = None) -> Store:
    """Opens tinytune's tables in the database at ``url``, creating or upgrading them first.

    The database may be empty or may already hold Optuna's tables; tinytune touches only its own
    ``tt_*`` tables and its own Alembic version table. ``reconnect_wait_s`` bounds how long the
    store's calls wait, in all, for a database server that went away (default
    :data:`~tinytune.db.reconnect.RECONNECT_WAIT_S`).

    Raises:
        StorageError: the URL cannot be parsed, the database cannot be reached or opened, or it
            holds a newer tinytune schema.
    """
    engine = create_engine(url)
    try:
        upgrade(engine)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, url, reconnect_wait_s=reconnect_wait_s)


class Store(Claims):
    """tinytune's own records in one database.

    Contract: every method runs in its own transaction and returns plain records; nothing ORM
    or session-bound escapes. Candidates are immutable once stored (same key, same payload).
    Evaluations and snapshots are append-only. Create one with :func:`open_store`, which also
    migrates the schema; the constructor does no I/O. Every method but :meth:`add_calibration`
    (whose ``before_commit`` acts outside the database) is run again when a database server
    drops its connection, until ``reconnect`` gives up.

    Attributes:
        url: The URL the store was opened with (``repr`` masks its password).
        reconnect: Retries while the database server is away; share it with other clients of
            the same database (Optuna's storage) so that one outage is waited out once.
    """

    # -- candidates ---------------------------------------------------------------------------

    @retried
    def add_candidate(self, key: str, supernet: str, payload: str) -> None:
        """Stores a candidate; storing the same key with the same content again does nothing.

        Raises:
            StorageError: the key is malformed, the payload is not JSON, or the key is already
                stored with a different supernet or payload.
        """
        _check_key(key)
        _check_name("supernet", supernet)
        if not isinstance(payload, str):
            raise StorageError(f"payload {payload!r} is not a string; expected JSON text")
        try:
            json.loads(payload)
        except ValueError as e:
            raise StorageError(
                f"payload of candidate {key!r} is not JSON ({e}); expected the canonical JSON"
            ) from e
        try:
            with self._transaction("add candidate to") as s:
                _put_candidate(s, key, supernet, payload)
        except StorageError as e:
            if not isinstance(e.__cause__, sa.exc.IntegrityError):
                raise
            # Another writer stored the same key between our read and our insert: compare.
            with self._transaction("add candidate to") as s:
                _put_candidate(s, key, supernet, payload)

    @retried
    def get_candidate(self, key: str) -> CandidateRecord | None:
        """The candidate stored under ``key``, or None."""
        with self._transaction("read candidate from") as s:
            row = s.get(CandidateRow, key)
            return None if row is None else _candidate_record(row)

    @retried
    def find_candidates(self, prefix: str, limit: int = 10) -> list[CandidateRecord]:
        """Stored candidates whose key starts with ``prefix`` (hex digits only), at most
        ``limit``."""
        if not prefix or any(c not in "0123456789abcdef" for c in prefix):
            raise StorageError(f"candidate key prefix {prefix!r} is not lower-case hex digits")
        query = (
            sa.select(CandidateRow)
            .where(CandidateRow.key.startswith(prefix))
            .order_by(CandidateRow.key)
            .limit(limit)
        )
        with self._transaction("read candidates from") as s:
            return [_candidate_record(row) for row in s.scalars(query).all()]

    # -- evaluations --------------------------------------------------------------------------

    @retried
    def add_evaluation(self, rec: EvaluationRecord) -> int:
        """Appends an evaluation and returns its id.

        Raises:
            StorageError: the record already has an id, or its candidate is not stored.
        """
        if rec.id is not None:
            raise StorageError(
                f"evaluation record already has id {rec.id}; expected a new record (id=None)"
            )
        with self._transaction("add evaluation to") as s:
            return self._insert_evaluation(s, rec)

    @retried
    def evaluations(
        self, study_name: str, *, fidelity: str | None = None, status: str | None = None
    ) -> list[EvaluationRecord]:
        """The evaluations of a study in the order they were added, optionally filtered."""
        query = sa.select(EvaluationRow).where(EvaluationRow.study_name == study_name)
        if fidelity is not None:
            if fidelity not in FIDELITIES:
                raise StorageError(f"fidelity {fidelity!r} is not one of {list(FIDELITIES)}")
            query = query.where(EvaluationRow.fidelity == fidelity)
        if status is not None:
            if status not in STATUSES:
                raise StorageError(f"status {status!r} is not one of {list(STATUSES)}")
            query = query.where(EvaluationRow.status == status)
        with self._transaction("read evaluations from") as s:
            rows = s.scalars(query.order_by(EvaluationRow.id)).all()
            return [_evaluation_record(row) for row in rows]

    @retried
    def find_evaluation(
        self, study_name: str, candidate_key: str, fidelity: str
    ) -> EvaluationRecord | None:
        """The latest successful evaluation of a candidate in a study at a fidelity, or None."""
        if fidelity not in FIDELITIES:
            raise StorageError(f"fidelity {fidelity!r} is not one of {list(FIDELITIES)}")
        query = (
            sa.select(EvaluationRow)
            .where(
                EvaluationRow.study_name == study_name,
                EvaluationRow.candidate_key == candidate_key,
                EvaluationRow.fidelity == fidelity,
                EvaluationRow.status == "ok",
            )
            .order_by(EvaluationRow.created_at.desc(), EvaluationRow.id.desc())
            .limit(1)
        )
        with self._transaction("read evaluations from") as s:
            row = s.scalars(query).first()
            return None if row is None else _evaluation_record(row)

    @retried
    def study_names(self) -> list[str]:
        """Names of the studies that have tinytune evaluations, sorted."""
        query = sa.select(EvaluationRow.study_name).distinct().order_by(EvaluationRow.study_name)
        with self._transaction("read study names from") as s:
            return list(s.scalars(query).all())

    # -- Pareto snapshots ---------------------------------------------------------------------

    @retried
    def add_pareto_snapshot(
        self,
        study_name: str,
        points: list[dict[str, Any]],
        n_trials: int,
        hypervolume: float | None,
        budgets: dict[str, Any] | None = None,
    ) -> int:
        """Appends a snapshot of a study's Pareto front and returns its id.

        Raises:
            StorageError: the points are not a JSON-serializable list of dicts, ``n_trials`` is
                not a non-negative integer, ``hypervolume`` is not finite, or ``budgets`` is
                not a JSON-serializable dict.
        """
        _check_name("study_name", study_name)
        if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
            raise StorageError(f"Pareto points {points!r} are not a list of dicts")
        _check_json("Pareto points", points)
        n_trials = _optional_int("n_trials", n_trials)
        if n_trials is None:
            raise StorageError("n_trials is None; expected a non-negative integer")
        hypervolume = _optional_float("hypervolume", hypervolume)
        if budgets is not None:
            if not isinstance(budgets, dict):
                raise StorageError(f"Pareto budgets {budgets!r:.80} are not a dict")
            _check_json("Pareto budgets", budgets)
        with self._transaction("add Pareto snapshot to") as s:
            row = ParetoSnapshotRow(
                study_name=study_name,
                created_at=_now(),
                n_trials=n_trials,
                hypervolume=hypervolume,
                points=points,
                budgets=budgets,
            )
            s.add(row)
            s.flush()
            return row.id

    @retried
    def pareto_snapshots(self, study_name: str) -> list[ParetoSnapshot]:
        """The Pareto snapshots of a study, oldest first."""
        query = (
            sa.select(ParetoSnapshotRow)
            .where(ParetoSnapshotRow.study_name == study_name)
            .order_by(ParetoSnapshotRow.created_at, ParetoSnapshotRow.id)
        )
        with self._transaction("read Pareto snapshots from") as s:
            return [_snapshot(row) for row in s.scalars(query).all()]

    @retried
    def latest_pareto(self, study_name: str) -> ParetoSnapshot | None:
        """The newest Pareto snapshot of a study, or None."""
        query = (
            sa.select(ParetoSnapshotRow)
            .where(ParetoSnapshotRow.study_name == study_name)
            .order_by(ParetoSnapshotRow.created_at.desc(), ParetoSnapshotRow.id.desc())
            .limit(1)
        )
        with self._transaction("read Pareto snapshots from") as s:
            row = s.scalars(query).first()
            return None if row is None else _snapshot(row)

    # -- calibrations --------------------------------------------------------------------------

    def add_calibration(
        self,
        device: str,
        profile: dict[str, Any],
        fit: dict[str, Any],
        before_commit: Callable[[int], None] | None = None,
        *,
        forced: bool = False,
    ) -> int:
        """Appends a fitted profile of ``device`` and returns its id; earlier ones are kept.
        ``forced`` marks one stored although its held-out error missed the accuracy a profile
        needs: it is in use all the same, and shown as such. ``before_commit`` is called
        with the id inside the transaction: whatever it raises rolls the calibration back and
        leaves as it is (an SQLAlchemy error as a :class:`StorageError`).

        Raises:
            StorageError: the device name is empty, the profile or fit is not a JSON object, or
                the database refuses the calibration or its commit.
        """
        _check_name("device", device)
        for what, value in (("profile", profile), ("fit", fit)):
            if not isinstance(value, dict):
                raise StorageError(f"calibration {what} {value!r} is not a JSON object")
            _check_json(f"calibration {what}", value)
        row = CalibrationRow(
            device=device, created_at=_now(), profile=profile, fit=fit, forced=bool(forced)
        )
        with self._transaction("add calibration to") as s:
            s.add(row)
            s.flush()
            if before_commit is not None:
                before_commit(row.id)
            return row.id

    @retried
    def latest_calibration(self, device: str) -> CalibrationRecord | None:
        """The newest calibration of ``device``, or None."""
        query = (
            sa.select(CalibrationRow)
            .where(CalibrationRow.device == device)
            .order_by(CalibrationRow.id.desc())
            .limit(1)
        )
        with self._transaction("read calibrations from") as s:
            row = s.scalars(query).first()
            return None if row is None else _calibration(row)

    def latest_device_calibration(
        self, device: str, engine: str | None = None
    ) -> Calibration | None:
        """The newest calibration of ``engine`` on ``device`` as the device registry takes it
        (``tinytune.hwmodels.get_device(device, calibration, engine)``), or None. Without
        ``engine``: the newest of the bundle's kernels if one is stored, else the newest of
        any engine (what was measured on the device replaces the built-in default).

        Raises:
            ConfigError: a stored profile is not a valid profile of ``device``.
        """
        from tinytune.hwmodels.registry import Calibration

        stored = [
            Calibration.parse(r.id, r.device, r.profile, forced=r.forced)
            for r in reversed(self.calibrations(device))
        ]
        for calibration in stored:
            if calibration.profile.engine == (engine or "bundle"):
                return calibration
        return None if engine or not stored else stored[0]

    @retried
    def calibrations(self, device: str | None = None) -> list[CalibrationRecord]:
        """Every stored calibration, optionally of one device, oldest first."""
        query = sa.select(CalibrationRow).order_by(CalibrationRow.id)
        if device is not None:
            query = query.where(CalibrationRow.device == device)
        with self._transaction("read calibrations from") as s:
            return [_calibration(row) for row in s.scalars(query).all()]

    # -- contribution analysis ----------------------------------------------------------------

    @retried
    def add_contribution(self, rec: ContributionRecord) -> int:
        """Stores one entry of a contribution table and returns its row id.

        An entry stored earlier as failed is replaced; one stored as ok is kept unchanged (two
        runs that measured the same entry agree up to the seed they share), and its id is
        returned.

        Raises:
            StorageError: the record already has an id, or its candidate is not stored.
        """
        if rec.id is not None:
            raise StorageError(
                f"contribution record already has id {rec.id}; expected a new record (id=None)"
            )
        fields = {f.name: getattr(rec, f.name) for f in dataclasses.fields(rec) if f.name != "id"}
        fields["created_at"] = rec.created_at or _now()
        query = sa.select(ContributionRow).where(
            ContributionRow.table_key == rec.table_key, ContributionRow.entry == rec.entry
        )
        for attempt in range(2):
            try:
                with self._transaction("add contribution to") as s:
                    if s.get(CandidateRow, rec.candidate_key) is None:
                        raise StorageError(
                            f"cannot add contribution entry {rec.entry!r}: candidate "
                            f"{rec.candidate_key!r} is not stored; expected add_candidate() first"
                        )
                    row = s.scalars(query).first()
                    if row is not None and row.status == "ok":
                        return row.id
                    if row is None:
                        row = ContributionRow(**fields)
                        s.add(row)
                    else:
                        for name, value in fields.items():
                            setattr(row, name, value)
                    s.flush()
                    return row.id
            except StorageError as e:
                # another writer stored the same entry between our read and our insert
                if attempt or not isinstance(e.__cause__, sa.exc.IntegrityError):
                    raise
        raise AssertionError("unreachable")

    @retried
    def contributions(self, table_key: str) -> list[ContributionRecord]:
        """The stored entries of one contribution table, in the order they were added."""
        query = (
            sa.select(ContributionRow)
            .where(ContributionRow.table_key == table_key)
            .order_by(ContributionRow.id)
        )
        with self._transaction("read contributions from") as s:
            return [_contribution_record(row) for row in s.scalars(query).all()]


def _put_candidate(s: Session, key: str, supernet: str, payload: str) -> None:
    stored = s.get(CandidateRow, key)
    if stored is None:
        s.add(CandidateRow(key=key, supernet=supernet, payload=payload, created_at=_now()))
        s.flush()
    elif (stored.supernet, stored.payload) != (supernet, payload):
        raise StorageError(
            f"candidate {key!r} is already stored as {stored.supernet!r} "
            f"{_shorten(stored.payload)}; got {supernet!r} {_shorten(payload)}; expected the "
            "same supernet and canonical JSON for the same key"
        )
