"""The records of tinytune's tables as callers see them: frozen, validated where they are
built (so a bad value fails at the line that made it, not at the commit), and made from their
rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import numbers
from typing import Any, Protocol

from tinytune.db.models import (
    CalibrationRow,
    CandidateRow,
    ContributionRow,
    EvaluationRow,
    ParetoSnapshotRow,
)
from tinytune.errors import StorageError

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
    "Measurement",
    "ParetoSnapshot",
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


class Measurement(Protocol):
    """What a worker measured, as a row takes it (:meth:`EvaluationRecord.of`,
    :meth:`ContributionRecord.of`): a
    :class:`tinytune.evaluators.EvaluationResult`, which the store does not know by name."""

    @property
    def status(self) -> str: ...

    @property
    def accuracy(self) -> float | None: ...

    @property
    def val_accuracy(self) -> float | None: ...

    @property
    def wall_time_s(self) -> float: ...

    @property
    def error(self) -> str | None: ...

    @property
    def ok(self) -> bool:
        """Whether it measured both accuracies."""
        ...


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

    @classmethod
    def of(
        cls,
        study_name: str,
        candidate_key: str,
        fidelity: str,
        measured: Measurement,
        *,
        trial_number: int | None,
        memory_bytes: int | None,
        latency_ms: float | None,
        details: dict[str, Any] | None,
        failure: str = "unknown failure",
    ) -> EvaluationRecord:
        """The row of what a worker ``measured``: ``ok`` where it measured both accuracies,
        else ``failed`` with its error (``failure`` where it gave none) and no accuracy."""
        ok = measured.ok
        return cls(
            study_name=study_name,
            candidate_key=candidate_key,
            fidelity=fidelity,
            status="ok" if ok else "failed",
            trial_number=trial_number,
            accuracy=measured.accuracy if ok else None,
            val_accuracy=measured.val_accuracy if ok else None,
            memory_bytes=memory_bytes,
            latency_ms=latency_ms,
            wall_time_s=measured.wall_time_s,
            error=None if ok else str(measured.error or failure),
            details=details,
        )


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

    @classmethod
    def of(
        cls, measured: Measurement, *, failure: str = "unknown failure", **fields: Any
    ) -> ContributionRecord:
        """The row of a configuration's fine-tune that a worker ``measured``: ``ok`` with its
        validation and test accuracies where it measured both, else ``failed`` with its error
        (``failure`` where it gave none, cut at 2,000 characters) and no accuracy; ``fields``:
        the rest of the row (its table, entry and identity)."""
        ok = measured.ok
        return cls(
            status="ok" if ok else "failed",
            accuracy=measured.val_accuracy if ok else None,
            test_accuracy=measured.accuracy if ok else None,
            wall_time_s=measured.wall_time_s,
            error=None if ok else str(measured.error or failure)[:2000],
            **fields,
        )

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)


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
