"""Record with each Pareto snapshot the budgets its front was chosen under (``budgets``: a JSON
object; NULL in snapshots stored before, whose budgets are unknown).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tt_pareto_snapshots", sa.Column("budgets", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("tt_pareto_snapshots", "budgets")
