"""The front's table: each point against the study's reference, which has one row."""

from __future__ import annotations

from rich.console import Console

from tinytune.cli.common import front_table
from tinytune.search import FrontPoint


def _point(trial: int, key: str, scheme: str, test: float, memory: int) -> FrontPoint:
    return FrontPoint(
        trial=trial,
        candidate_key=key,
        val_accuracy=test,
        test_accuracy=test,
        memory_bytes=memory,
        flash_bytes=None,
        latency_s=0.1,
        scheme=scheme,
    )


def _rows(front: list[FrontPoint], reference: FrontPoint) -> list[str]:
    console = Console(width=200, record=True)
    console.print(front_table(front, "front", reference))
    return [line for line in console.export_text().splitlines() if "KB" in line]


def test_a_reference_off_the_front_gets_a_row_of_its_own() -> None:
    reference = _point(0, "f" * 64, "full (reference)", 0.98, 240 * 1024)
    rows = _rows([_point(3, "a" * 64, "mcunetv3", 0.97, 60 * 1024)], reference)
    assert len(rows) == 2
    assert "-1.0 pp" in rows[0] and "4.0× less" in rows[0]
    assert "(reference)" in rows[1]


def test_a_reference_on_the_front_is_one_row() -> None:
    reference = _point(0, "f" * 64, "full (reference)", 0.98, 240 * 1024)
    front = [_point(3, "a" * 64, "mcunetv3", 0.97, 60 * 1024), reference]
    rows = _rows(front, reference)
    assert len(rows) == 2
    assert "(reference)" in rows[1] and "× less" not in rows[1]
