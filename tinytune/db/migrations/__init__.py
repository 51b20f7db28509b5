"""Alembic migrations of tinytune's own tables, run from code (no ``alembic.ini`` needed)."""

from __future__ import annotations

from tinytune.db.migrations.runner import (
    VERSION_TABLE,
    current_revision,
    head_revision,
    include_name,
    upgrade,
)

__all__ = ["VERSION_TABLE", "current_revision", "head_revision", "include_name", "upgrade"]
