"""SQLAlchemy 2 declarative models of tinytune's own tables.

These tables sit beside Optuna's in the same database and hold what Optuna does not: candidates,
evaluations at several fidelities, Pareto snapshots, device calibrations and the contribution
analysis (MCUNetV3 Δacc tables), and the measurements in flight (claims). Every table name
starts with ``tt_`` so that neither side ever touches the other's tables. The schema is created
and changed only by the Alembic migrations in :mod:`tinytune.db.migrations`; a test checks that
these models and the migrations describe the same schema, so a change here needs a new
migration.

Constraint and index names follow :data:`NAMING_CONVENTION`, which keeps them predictable for
later migrations (SQLite batch mode needs named constraints).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "NAMING_CONVENTION",
    "TABLE_PREFIX",
    "VERSION_TABLE",
    "Base",
    "CalibrationRow",
    "CandidateRow",
    "ClaimRow",
    "ContributionRow",
    "EvaluationRow",
    "ParetoSnapshotRow",
    "StudySetupRow",
    "UTCDateTime",
]

TABLE_PREFIX = "tt_"

VERSION_TABLE = "tinytune_alembic_version"
"""Where tinytune records its schema revision (never Optuna's ``alembic_version``); named here
with the tables so that the engine can look for it without importing the migrations."""

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(sa.TypeDecorator[dt.datetime]):
    """A timestamp that is always written as UTC and always read back timezone-aware in UTC.

    SQLite keeps no time zone and returns naive values; they were written as UTC, so they are
    read as UTC. PostgreSQL returns aware values in the session's zone; they are converted.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        # Records reject naive timestamps before they get here.
        assert value.tzinfo is not None, "naive timestamp reached the database layer"
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


class Base(DeclarativeBase):
    """Declarative base of tinytune's tables (``tt_*``); Optuna's tables are not mapped."""

    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class CandidateRow(Base):
    """One candidate of a search space, stored once under its stable key."""

    __tablename__ = "tt_candidates"

    key: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    supernet: Mapped[str] = mapped_column(sa.String(128))
    payload: Mapped[str] = mapped_column(sa.Text)  # the candidate's canonical JSON
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class EvaluationRow(Base):
    """One evaluation of a candidate in a study, at one fidelity; failed ones keep their error."""

    __tablename__ = "tt_evaluations"
    __table_args__ = (sa.CheckConstraint("status IN ('ok', 'failed')", name="status"),)

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    study_name: Mapped[str] = mapped_column(sa.String(512), index=True)
    candidate_key: Mapped[str] = mapped_column(sa.String(64), sa.ForeignKey("tt_candidates.key"))
    trial_number: Mapped[int | None] = mapped_column(sa.Integer)
    fidelity: Mapped[str] = mapped_column(sa.String(32))
    status: Mapped[str] = mapped_column(sa.String(16))
    accuracy: Mapped[float | None] = mapped_column(sa.Float)
    val_accuracy: Mapped[float | None] = mapped_column(sa.Float)
    memory_bytes: Mapped[int | None] = mapped_column(sa.BigInteger)
    latency_ms: Mapped[float | None] = mapped_column(sa.Float)
    wall_time_s: Mapped[float | None] = mapped_column(sa.Float)
    error: Mapped[str | None] = mapped_column(sa.Text)
    details: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class ParetoSnapshotRow(Base):
    """The Pareto front of a study as it stood after ``n_trials`` trials."""

    __tablename__ = "tt_pareto_snapshots"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    study_name: Mapped[str] = mapped_column(sa.String(512), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    n_trials: Mapped[int] = mapped_column(sa.Integer)
    hypervolume: Mapped[float | None] = mapped_column(sa.Float)
    points: Mapped[list[dict[str, Any]]] = mapped_column(sa.JSON)
    # the budgets the front was chosen under; NULL for a snapshot stored before they were kept
    budgets: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON, nullable=True)


class CalibrationRow(Base):
    """A fitted latency profile of a device; the newest row of a device is the one in use."""

    __tablename__ = "tt_calibrations"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    device: Mapped[str] = mapped_column(sa.String(128), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    profile: Mapped[dict[str, Any]] = mapped_column(sa.JSON)  # the DeviceProfile's dict
    fit: Mapped[dict[str, Any]] = mapped_column(sa.JSON)  # fit and held-out errors, inputs
    # stored although its held-out error missed the accuracy a profile needs (--force)
    forced: Mapped[bool] = mapped_column(sa.Boolean, default=False, server_default=sa.false())


class ContributionRow(Base):
    """One measured configuration of a contribution analysis (MCUNetV3 §2.2, Eq. 5).

    Rows sharing a ``table_key`` form one table: the same supernet weights (by SHA-256), data set,
    data seed, fine-tuning settings and sub-network. ``entry`` names the configuration (``base``,
    ``bias:<k>``, ``weight:<layer>:<ratio>``, ``lite:<block>``, ``norm``); each entry is stored
    once per table, so a later run with the same key reuses it instead of training again.
    """

    __tablename__ = "tt_contributions"
    __table_args__ = (
        sa.UniqueConstraint("table_key", "entry"),
        sa.CheckConstraint("status IN ('ok', 'failed')", name="status"),
    )

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    table_key: Mapped[str] = mapped_column(sa.String(64), index=True)
    entry: Mapped[str] = mapped_column(sa.String(64))
    part: Mapped[str] = mapped_column(sa.String(16))
    layer: Mapped[int | None] = mapped_column(sa.Integer)
    ratio: Mapped[float | None] = mapped_column(sa.Float)
    supernet: Mapped[str] = mapped_column(sa.String(128))
    checkpoint_sha256: Mapped[str] = mapped_column(sa.String(64))
    dataset: Mapped[str] = mapped_column(sa.String(512))
    data_seed: Mapped[int] = mapped_column(sa.Integer)
    seed: Mapped[int] = mapped_column(sa.Integer)
    subnet_key: Mapped[str] = mapped_column(sa.String(64))
    candidate_key: Mapped[str] = mapped_column(sa.String(64), sa.ForeignKey("tt_candidates.key"))
    status: Mapped[str] = mapped_column(sa.String(16))
    accuracy: Mapped[float | None] = mapped_column(sa.Float)  # validation split
    test_accuracy: Mapped[float | None] = mapped_column(sa.Float)
    wall_time_s: Mapped[float | None] = mapped_column(sa.Float)
    error: Mapped[str | None] = mapped_column(sa.Text)
    details: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class StudySetupRow(Base):
    """A new study being set up by one driver: the first to insert its name enqueues the
    study's reference and baselines; a driver that starts it at the same moment finds the row
    and leaves them to it."""

    __tablename__ = "tt_study_setups"

    study_name: Mapped[str] = mapped_column(sa.String(512), primary_key=True)
    driver: Mapped[str] = mapped_column(sa.String(64))  # who claimed it (a random token)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class ClaimRow(Base):
    """A measured fine-tune in flight: the candidate of a study that one trial is measuring.

    A claim is taken before a candidate is sent to a worker and removed in the transaction that
    stores its evaluation (or when its trial is failed because its driver stopped beating). One
    claim per candidate and study, so that drivers sharing a study never measure a candidate
    twice, and the study's budget counts finished evaluations plus claims.
    """

    __tablename__ = "tt_claims"
    __table_args__ = (sa.UniqueConstraint("study_name", "candidate_key"),)

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    study_name: Mapped[str] = mapped_column(sa.String(512), index=True)
    candidate_key: Mapped[str] = mapped_column(sa.String(64), sa.ForeignKey("tt_candidates.key"))
    trial_number: Mapped[int] = mapped_column(sa.Integer)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
