"""Add the setting up of a new study (``tt_study_setups``), claimed by one driver, so that
drivers that start a new study at one moment enqueue its reference and baselines once.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tt_study_setups",
        sa.Column("study_name", sa.String(512), nullable=False),
        sa.Column("driver", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("study_name", name=op.f("pk_tt_study_setups")),
    )


def downgrade() -> None:
    op.drop_table("tt_study_setups")
