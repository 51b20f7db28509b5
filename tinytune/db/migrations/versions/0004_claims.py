"""Add the measurements in flight (``tt_claims``), so that drivers can share a study.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tt_claims",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("study_name", sa.String(512), nullable=False),
        sa.Column("candidate_key", sa.String(64), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["candidate_key"],
            ["tt_candidates.key"],
            name=op.f("fk_tt_claims_candidate_key_tt_candidates"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tt_claims")),
        sa.UniqueConstraint("study_name", "candidate_key", name=op.f("uq_tt_claims_study_name")),
    )
    op.create_index(op.f("ix_tt_claims_study_name"), "tt_claims", ["study_name"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_tt_claims_study_name"), table_name="tt_claims")
    op.drop_table("tt_claims")
