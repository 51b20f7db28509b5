"""Create tinytune's first tables: candidates, evaluations and Pareto snapshots.

Revision ID: 0001
Revises:
Create Date: 2026-01-01

Written out in full rather than imported from the models, so that this revision keeps meaning
the same schema however the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tt_candidates",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("supernet", sa.String(128), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_tt_candidates")),
    )
    op.create_table(
        "tt_evaluations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("study_name", sa.String(512), nullable=False),
        sa.Column("candidate_key", sa.String(64), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=True),
        sa.Column("fidelity", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("accuracy", sa.Float(), nullable=True),
        sa.Column("val_accuracy", sa.Float(), nullable=True),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("wall_time_s", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('ok', 'failed')", name=op.f("ck_tt_evaluations_status")),
        sa.ForeignKeyConstraint(
            ["candidate_key"],
            ["tt_candidates.key"],
            name=op.f("fk_tt_evaluations_candidate_key_tt_candidates"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tt_evaluations")),
    )
    op.create_index(
        op.f("ix_tt_evaluations_study_name"), "tt_evaluations", ["study_name"], unique=False
    )
    op.create_table(
        "tt_pareto_snapshots",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("study_name", sa.String(512), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("n_trials", sa.Integer(), nullable=False),
        sa.Column("hypervolume", sa.Float(), nullable=True),
        sa.Column("points", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tt_pareto_snapshots")),
    )
    op.create_index(
        op.f("ix_tt_pareto_snapshots_study_name"),
        "tt_pareto_snapshots",
        ["study_name"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_tt_pareto_snapshots_study_name"), table_name="tt_pareto_snapshots")
    op.drop_table("tt_pareto_snapshots")
    op.drop_index(op.f("ix_tt_evaluations_study_name"), table_name="tt_evaluations")
    op.drop_table("tt_evaluations")
    op.drop_table("tt_candidates")
