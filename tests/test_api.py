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


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"preset": "everything"}, "unknown preset 'everything'"),
        ({"precision": "int4"}, "unknown precision 'int4'; allowed: fp32, int8"),
        ({"sampler": "grid"}, "unknown sampler 'grid'"),
        ({"engine": "tflite"}, "unknown engine 'tflite'"),
        ({"workers": 0}, "--workers must be >= 1"),
        ({"sram_budget": "12parsecs"}, "is not a size"),
        ({"dataset": "cifar"}, "unknown data set"),
    ],
)
def test_bad_arguments_raise_before_any_work(tmp_path: Path, kwargs: dict, message: str) -> None:
    import tinytune

    db = tmp_path / "t.db"
    with pytest.raises(tinytune.TinyTuneError, match=message):
        tinytune.optimize(storage=f"sqlite:///{db}", inline=True, **kwargs)
    assert not db.exists()  # nothing was opened, let alone stored
