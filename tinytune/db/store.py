"""The Store: tinytune's candidates, evaluations, Pareto snapshots, calibrations and contribution
tables, beside Optuna's tables.

Callers see frozen records, never ORM objects or sessions. Every method is its own short
transaction, so a crash loses at most the call in flight and nothing holds locks between calls
(SQLite has one writer at a time); on a database server, a transaction whose connection was lost
(a restart) is run again once the server answers (:mod:`tinytune.db.reconnect`). Records are
validated where they are built, so a bad value fails at the line that made it, not at the commit.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import math
import numbers
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from tinytune.db.engine import create_engine, mask_url, translate_error
from tinytune.db.migrations import upgrade
from tinytune.db.models import (
    CalibrationRow,
    CandidateRow,
    ClaimRow,
    ContributionRow,
    EvaluationRow,
    ParetoSnapshotRow,
    StudySetupRow,
)
from tinytune.db.reconnect import Reconnect
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

FIDELITIES = ("measured", "proxy", "short", "int8")
"""How an evaluation was obtained: fine-tuned in float32 and tested on held-out data
(``measured``), estimated (``proxy``), fine-tuned briefly on part of the training data to
screen candidates (``short``), or trained as the device trains — int8, batch 1, the bundle's
integer step — and tested (``int8``)."""

STATUSES = ("ok", "failed")

CONTRIBUTION_PARTS = ("base", "bias", "weight", "lite", "norm")
"""What a contribution entry measures: classifier only, a bias tail, one weight-updated layer at
one ratio, one lite residual branch, or the per-channel scales (MCUNetV3 §2.2; TinyTL)."""

KEY_LENGTH = (16, 64)
"""Smallest and largest length of a candidate key."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """The answer to :meth:`Store.claim_measurement`.

    Attributes:
        outcome: ``claimed`` (the caller measures the candidate), ``spent`` (the study's budget
            of measured fine-tunes is taken), ``measured`` (the candidate has a successful
            measured evaluation: ``evaluation``) or ``in_flight`` (trial ``holder`` is
            measuring it).
        evaluation: The stored evaluation when ``outcome == "measured"``.
        holder: The trial holding the claim when ``outcome == "in_flight"``.
    """

    outcome: str
    evaluation: EvaluationRecord | None = None
    holder: int | None = None


@dataclasses.dataclass(frozen=True)
class CandidateRecord:
    """A stored candidate.

    Attributes:
        key: The candidate's stable key.
        supernet: Name of the supernet the candidate belongs to.
        payload: The candidate's canonical JSON, exactly as it was added.
        created_at: When it was first stored (aware, UTC).
    """

    key: str
    supernet: str
    payload: str
    created_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class EvaluationRecord:
    """One evaluation of a candidate in a study, at one fidelity.

    Attributes:
        study_name: The Optuna study the evaluation belongs to.
        candidate_key: Key of a stored candidate.
        fidelity: One of :data:`FIDELITIES`; results of different fidelities are never mixed.
        status: ``"ok"``, or ``"failed"`` together with ``error``.
        trial_number: The Optuna trial number, when the evaluation came from a trial.
        accuracy: Top-1 accuracy on the held-out test split, a fraction in [0, 1].
        val_accuracy: Top-1 accuracy on the validation split, a fraction in [0, 1].
        memory_bytes: Peak memory.
        latency_ms: Latency of one step.
        wall_time_s: How long the evaluation took.
        error: Why the evaluation failed (required when ``status == "failed"``).
        details: Free-form JSON-serializable dict.
        id: Set by the store; None on a record that has not been stored.
        created_at: Aware timestamp (normalized to UTC); the store fills it in when None.
    """

    study_name: str
    candidate_key: str
    fidelity: str
    status: str
    trial_number: int | None = None
    accuracy: float | None = None
    val_accuracy: float | None = None
    memory_bytes: int | None = None
    latency_ms: float | None = None
    wall_time_s: float | None = None
    error: str | None = None
    details: dict[str, Any] | None = None
    id: int | None = None
    created_at: dt.datetime | None = None

    def __post_init__(self) -> None:
        _check_name("study_name", self.study_name)
        _check_key(self.candidate_key)
        if self.fidelity not in FIDELITIES:
            raise StorageError(f"fidelity {self.fidelity!r} is not one of {list(FIDELITIES)}")
        if self.status not in STATUSES:
            raise StorageError(f"status {self.status!r} is not one of {list(STATUSES)}")
        if self.error is not None and not isinstance(self.error, str):
            raise StorageError(f"error {self.error!r} is not a string; expected text or None")
        if self.status == "failed" and not self.error:
            raise StorageError(
                f"a failed evaluation of {self.candidate_key!r} has error {self.error!r}; "
                "expected the error text"
            )
        self._set("trial_number", _optional_int("trial_number", self.trial_number))
        self._set("memory_bytes", _optional_int("memory_bytes", self.memory_bytes))
        for name in ("accuracy", "val_accuracy"):
            self._set(name, _optional_float(name, getattr(self, name), upper=1.0))
        for name in ("latency_ms", "wall_time_s"):
            self._set(name, _optional_float(name, getattr(self, name)))
        if self.details is not None:
            if not isinstance(self.details, dict):
                raise StorageError(
                    f"details {self.details!r} is not a dict; expected a dict or None"
                )
            _check_json("details", self.details)
        self._set("id", _optional_int("id", self.id))
        self._set("created_at", _optional_utc("created_at", self.created_at))

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)


@dataclasses.dataclass(frozen=True)
class ParetoSnapshot:
    """The Pareto front of a study as stored after ``n_trials`` trials.

    Attributes:
        id: Set by the store.
        study_name: The Optuna study.
        created_at: When the snapshot was stored (aware, UTC).
        n_trials: How many trials the study had when the front was computed.
        hypervolume: Hypervolume of the front, when one was computed.
        points: One dict per Pareto-optimal point.
        budgets: The budgets the front was chosen under (``sram_bytes``, ``flash_bytes``,
            ``latency_s``; None where there was none), or None for a snapshot stored before
            budgets were kept.
    """

    id: int
    study_name: str
    created_at: dt.datetime
    n_trials: int
    hypervolume: float | None
    points: list[dict[str, Any]]
    budgets: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class CalibrationRecord:
    """A fitted latency profile of a device.

    Attributes:
        id: Row id; the newest calibration of a device is the one in use.
        device: Device name.
        created_at: When it was stored (aware, UTC).
        profile: The device profile as a JSON object (``DeviceProfile.to_dict``).
        fit: How it was fitted: inputs, fit error and held-out error.
        forced: Stored although its held-out error missed the accuracy a profile needs.
    """

    id: int
    device: str
    created_at: dt.datetime
    profile: dict[str, Any]
    fit: dict[str, Any]
    forced: bool = False


@dataclasses.dataclass(frozen=True)
class ContributionRecord:
    """One measured configuration of a contribution analysis.

    Attributes:
        table_key: Identifies the table: supernet weights, data, fine-tuning and sub-network.
        entry: The configuration's name in the table, unique per table (``bias:4``, ...).
        part: One of :data:`CONTRIBUTION_PARTS`.
        supernet: Name of the supernet.
        checkpoint_sha256: SHA-256 of the supernet weights file.
        dataset: The data set the configuration was fine-tuned on.
        data_seed: Seed of the data set's splits.
        seed: Seed of the fine-tuning.
        subnet_key: Key of the sub-network the table is about.
        candidate_key: Key of the stored candidate that was fine-tuned.
        status: ``"ok"``, or ``"failed"`` together with ``error``.
        layer: ``k`` of a bias tail, the convolution of a weight entry, the block of a lite
            residual entry; None otherwise.
        ratio: The input-channel ratio of a weight entry; None otherwise.
        accuracy: Top-1 accuracy on the validation split, a fraction in [0, 1].
        test_accuracy: Top-1 accuracy on the test split (kept, never used by the analysis).
        wall_time_s: How long the fine-tune took.
        error: Why it failed (required when ``status == "failed"``).
        details: Free-form JSON-serializable dict (how the table was identified).
        id: Set by the store.
        created_at: Aware timestamp (UTC); the store fills it in when None.
    """

    table_key: str
    entry: str
    part: str
    supernet: str
    checkpoint_sha256: str
    dataset: str
    data_seed: int
    seed: int
    subnet_key: str
    candidate_key: str
    status: str
    layer: int | None = None
    ratio: float | None = None
    accuracy: float | None = None
    test_accuracy: float | None = None
    wall_time_s: float | None = None
    error: str | None = None
    details: dict[str, Any] | None = None
    id: int | None = None
    created_at: dt.datetime | None = None

    def __post_init__(self) -> None:
        for name in ("table_key", "entry", "supernet", "checkpoint_sha256", "dataset"):
            _check_name(name, getattr(self, name))
        if len(self.table_key) > 64 or len(self.entry) > 64 or len(self.checkpoint_sha256) > 64:
            raise StorageError(
                f"contribution key {self.table_key!r}, entry {self.entry!r} or checkpoint hash "
                "is longer than 64 characters"
            )
        _check_key(self.subnet_key)
        _check_key(self.candidate_key)
        if self.part not in CONTRIBUTION_PARTS:
            raise StorageError(
                f"contribution part {self.part!r} is not one of {list(CONTRIBUTION_PARTS)}"
            )
        if self.status not in STATUSES:
            raise StorageError(f"status {self.status!r} is not one of {list(STATUSES)}")
        if self.status == "failed" and not self.error:
            raise StorageError(
                f"a failed contribution entry {self.entry!r} has error {self.error!r}; "
                "expected the error text"
            )
        if self.status == "ok" and self.accuracy is None:
            raise StorageError(
                f"contribution entry {self.entry!r} is ok but has no accuracy; expected the "
                "validation accuracy"
            )
        for name in ("data_seed", "seed"):
            value = _optional_int(name, getattr(self, name))
            if value is None:
                raise StorageError(f"{name} is None; expected a non-negative integer")
            self._set(name, value)
        self._set("layer", _optional_int("layer", self.layer))
        self._set("ratio", _optional_float("ratio", self.ratio, upper=1.0))
        for name in ("accuracy", "test_accuracy"):
            self._set(name, _optional_float(name, getattr(self, name), upper=1.0))
        self._set("wall_time_s", _optional_float("wall_time_s", self.wall_time_s))
        if self.details is not None:
            if not isinstance(self.details, dict):
                raise StorageError(f"details {self.details!r} is not a dict; expected a dict")
            _check_json("details", self.details)
        self._set("id", _optional_int("id", self.id))
        self._set("created_at", _optional_utc("created_at", self.created_at))

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)


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


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _retried(method: Callable[Concatenate[Store, _P], _T]) -> Callable[Concatenate[Store, _P], _T]:
    """The method, run again while the database server is away (see :class:`Reconnect`)."""

    @functools.wraps(method)
    def retried(self: Store, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self.reconnect.call(lambda: method(self, *args, **kwargs))

    return retried


class Store:
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

    def __init__(self, engine: Engine, url: str, *, reconnect_wait_s: float | None = None) -> None:
        self.url = url
        self.reconnect = Reconnect(url, reconnect_wait_s)
        self._engine = engine
        self._closed = False

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"Store({mask_url(self.url)!r}{state})"

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Releases the store's connections; further calls raise :class:`StorageError`."""
        if not self._closed:
            self._closed = True
            self._engine.dispose()

    # -- candidates ---------------------------------------------------------------------------

    @_retried
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

    @_retried
    def get_candidate(self, key: str) -> CandidateRecord | None:
        """The candidate stored under ``key``, or None."""
        with self._transaction("read candidate from") as s:
            row = s.get(CandidateRow, key)
            return None if row is None else _candidate_record(row)

    @_retried
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

    @_retried
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

    def _insert_evaluation(self, s: Session, rec: EvaluationRecord) -> int:
        if s.get(CandidateRow, rec.candidate_key) is None:
            raise StorageError(
                f"cannot add an evaluation of candidate {rec.candidate_key!r}: no such "
                f"candidate in {mask_url(self.url)!r}; expected add_candidate() first"
            )
        fields = {f.name: getattr(rec, f.name) for f in dataclasses.fields(rec) if f.name != "id"}
        fields["created_at"] = rec.created_at or _now()
        row = EvaluationRow(**fields)
        s.add(row)
        s.flush()
        return row.id

    @_retried
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

    @_retried
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

    @_retried
    def study_names(self) -> list[str]:
        """Names of the studies that have tinytune evaluations, sorted."""
        query = sa.select(EvaluationRow.study_name).distinct().order_by(EvaluationRow.study_name)
        with self._transaction("read study names from") as s:
            return list(s.scalars(query).all())

    # -- Pareto snapshots ---------------------------------------------------------------------

    @_retried
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

    @_retried
    def pareto_snapshots(self, study_name: str) -> list[ParetoSnapshot]:
        """The Pareto snapshots of a study, oldest first."""
        query = (
            sa.select(ParetoSnapshotRow)
            .where(ParetoSnapshotRow.study_name == study_name)
            .order_by(ParetoSnapshotRow.created_at, ParetoSnapshotRow.id)
        )
        with self._transaction("read Pareto snapshots from") as s:
            return [_snapshot(row) for row in s.scalars(query).all()]

    @_retried
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

    @_retried
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

    @_retried
    def calibrations(self, device: str | None = None) -> list[CalibrationRecord]:
        """Every stored calibration, optionally of one device, oldest first."""
        query = sa.select(CalibrationRow).order_by(CalibrationRow.id)
        if device is not None:
            query = query.where(CalibrationRow.device == device)
        with self._transaction("read calibrations from") as s:
            return [_calibration(row) for row in s.scalars(query).all()]

    # -- contribution analysis ----------------------------------------------------------------

    @_retried
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

    @_retried
    def contributions(self, table_key: str) -> list[ContributionRecord]:
        """The stored entries of one contribution table, in the order they were added."""
        query = (
            sa.select(ContributionRow)
            .where(ContributionRow.table_key == table_key)
            .order_by(ContributionRow.id)
        )
        with self._transaction("read contributions from") as s:
            return [_contribution_record(row) for row in s.scalars(query).all()]

    # -- measurements in flight ---------------------------------------------------------------

    def claim_measurement(
        self,
        study_name: str,
        candidate_key: str,
        trial_number: int,
        budget: int | None,
        uncounted: str | None = None,
    ) -> Claim:
        """Reserve a measured fine-tune of a candidate for a trial, atomically.

        The study's budget counts its finished measured evaluations (successful or failed) and
        its claims, except those of the candidate ``uncounted`` (the study's reference, measured
        beside its budget); ``budget=None`` claims regardless of it. Drivers sharing the study
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

    @_retried
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

    @_retried
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

    @_retried
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

    @_retried
    def measured_budget_spent(
        self, study_name: str, uncounted: str | None = None
    ) -> tuple[int, int]:
        """Finished measured evaluations (ok or failed) and claims in flight of a study, those
        of the candidate ``uncounted`` left out."""
        with self._transaction("read claims from") as s:
            return self._finished(s, study_name, uncounted), self._claims(s, study_name, uncounted)

    @staticmethod
    def _finished(s: Session, study_name: str, uncounted: str | None) -> int:
        query = (
            sa.select(sa.func.count())
            .select_from(EvaluationRow)
            .where(EvaluationRow.study_name == study_name, EvaluationRow.fidelity == "measured")
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

    # -- internals ----------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, action: str) -> Iterator[Session]:
        """A session inside one transaction; foreign errors leave as :class:`StorageError`."""
        if self._closed:
            raise StorageError(
                f"cannot {action} the store of {mask_url(self.url)!r}: it is closed; "
                "expected an open store (see open_store)"
            )
        try:
            with Session(self._engine) as s, s.begin():
                yield s
        except sa.exc.SQLAlchemyError as e:
            raise translate_error(f"cannot {action} database", self.url, e) from e


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


def _candidate_record(row: CandidateRow) -> CandidateRecord:
    return CandidateRecord(
        key=row.key, supernet=row.supernet, payload=row.payload, created_at=row.created_at
    )


def _evaluation_record(row: EvaluationRow) -> EvaluationRecord:
    return EvaluationRecord(
        **{f.name: getattr(row, f.name) for f in dataclasses.fields(EvaluationRecord)}
    )


def _contribution_record(row: ContributionRow) -> ContributionRecord:
    return ContributionRecord(
        **{f.name: getattr(row, f.name) for f in dataclasses.fields(ContributionRecord)}
    )


def _snapshot(row: ParetoSnapshotRow) -> ParetoSnapshot:
    return ParetoSnapshot(
        id=row.id,
        study_name=row.study_name,
        created_at=row.created_at,
        n_trials=row.n_trials,
        hypervolume=row.hypervolume,
        points=row.points,
        budgets=row.budgets,
    )


def _calibration(row: CalibrationRow) -> CalibrationRecord:
    return CalibrationRecord(row.id, row.device, row.created_at, row.profile, row.fit, row.forced)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _check_key(key: object) -> None:
    low, high = KEY_LENGTH
    if not isinstance(key, str) or not low <= len(key) <= high:
        raise StorageError(f"candidate key {key!r} is not a string of {low} to {high} characters")


def _check_name(what: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise StorageError(f"{what} {value!r} is not a non-empty string")


def _optional_int(what: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise StorageError(f"{what} {value!r} is not a non-negative integer")
    return int(value)


def _optional_float(what: str, value: object, upper: float = math.inf) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or not 0.0 <= value <= upper
    ):
        allowed = "a finite number >= 0" if upper == math.inf else f"a number in [0, {upper}]"
        raise StorageError(f"{what} {value!r} is not {allowed}")
    return float(value)


def _optional_utc(what: str, value: object) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise StorageError(f"{what} {value!r} is not a timezone-aware datetime")
    return value.astimezone(dt.UTC)


def _check_json(what: str, value: object) -> None:
    """Requires ``value`` to survive a JSON round trip unchanged (no NaN, tuples, int keys)."""
    try:
        same = json.loads(json.dumps(value, allow_nan=False)) == value
    except (TypeError, ValueError) as e:
        raise StorageError(f"{what} cannot be stored as JSON: {e}") from e
    if not same:
        raise StorageError(
            f"{what} {_shorten(repr(value))} would change in a JSON round trip; expected only "
            "dicts with string keys, lists, strings, finite numbers, booleans and None"
        )


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
