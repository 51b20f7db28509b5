"""Mark a calibration stored although its held-out error missed the accuracy a profile needs
(``forced``: ``tinytune calibrate --force``); calibrations stored before are unmarked.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "tt_calibrations",
        sa.Column("forced", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("tt_calibrations", "forced")
