"""Add fitted device latency profiles (``tt_calibrations``).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tt_calibrations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("device", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("profile", sa.JSON(), nullable=False),
        sa.Column("fit", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tt_calibrations")),
    )
    op.create_index(op.f("ix_tt_calibrations_device"), "tt_calibrations", ["device"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_tt_calibrations_device"), table_name="tt_calibrations")
    op.drop_table("tt_calibrations")
