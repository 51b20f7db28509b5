"""The front door (``tinytune.api``) beyond the README's example."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_devices_reads_no_database_that_does_not_exist(tmp_path: Path) -> None:
    import tinytune
    from tinytune.hwmodels import device_names

    missing = tmp_path / "none.db"
    profiles = tinytune.devices(f"sqlite:///{missing}")
    assert [p.name for p in profiles] == device_names()
    assert not missing.exists()
    with pytest.raises(tinytune.TinyTuneError, match="cannot parse database URL"):
        tinytune.devices("postgresql+psycopg://u:pw@:::bad")
