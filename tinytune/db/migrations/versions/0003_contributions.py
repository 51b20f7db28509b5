"""Add the contribution analysis (``tt_contributions``): MCUNetV3 Δacc tables, reused by key.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tt_contributions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("table_key", sa.String(64), nullable=False),
        sa.Column("entry", sa.String(64), nullable=False),
        sa.Column("part", sa.String(16), nullable=False),
        sa.Column("layer", sa.Integer(), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("supernet", sa.String(128), nullable=False),
        sa.Column("checkpoint_sha256", sa.String(64), nullable=False),
        sa.Column("dataset", sa.String(512), nullable=False),
        sa.Column("data_seed", sa.Integer(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("subnet_key", sa.String(64), nullable=False),
        sa.Column("candidate_key", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("accuracy", sa.Float(), nullable=True),
        sa.Column("test_accuracy", sa.Float(), nullable=True),
        sa.Column("wall_time_s", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('ok', 'failed')", name=op.f("ck_tt_contributions_status")),
        sa.ForeignKeyConstraint(
            ["candidate_key"],
            ["tt_candidates.key"],
            name=op.f("fk_tt_contributions_candidate_key_tt_candidates"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tt_contributions")),
        sa.UniqueConstraint("table_key", "entry", name=op.f("uq_tt_contributions_table_key")),
    )
    op.create_index(
        op.f("ix_tt_contributions_table_key"), "tt_contributions", ["table_key"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_tt_contributions_table_key"), table_name="tt_contributions")
    op.drop_table("tt_contributions")
