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
    assert "off the front" in rows[1] and "off the front" not in rows[0]


def test_a_reference_on_the_front_is_one_row() -> None:
    reference = _point(0, "f" * 64, "full (reference)", 0.98, 240 * 1024)
    front = [_point(3, "a" * 64, "mcunetv3", 0.97, 60 * 1024), reference]
    rows = _rows(front, reference)
    assert len(rows) == 2
    assert "(reference)" in rows[1] and "× less" not in rows[1]
    assert not any("off the front" in row for row in rows)


def test_output_to_a_pipe_is_wide_enough_for_every_column_or_as_wide_as_columns_says() -> None:
    import os
    import subprocess
    import sys

    code = "from tinytune.cli.common import console; print(console.width)"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    for columns, width in ((None, "160"), ("211", "211")):
        run_env = env if columns is None else {**env, "COLUMNS": columns}
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=run_env, check=True
        )
        assert done.stdout.strip() == width


def test_every_column_of_a_wide_front_fits_160_columns() -> None:
    from tinytune.search.run.verify_int8 import Int8Accuracy

    reference = _point(0, "f" * 64, "full (reference)", 0.98, 240 * 1024)
    front = [_point(3, "a" * 64, "bias-only (reordered lite)", 0.97, 60 * 1024)]
    console = Console(width=160, record=True)
    console.print(front_table(front, "front", reference, {"a" * 64: Int8Accuracy(0.9, 0.8, 0.1)}))
    text = console.export_text()
    assert "…" not in text and "90.0/80.0%" in text and "full (reference), off the front" in text


def test_names_and_paths_are_printed_as_given_not_as_markup() -> None:
    """A study named ``[/x]`` (rich markup's closing tag) or ``[bold]x[/bold]``: the commands'
    console prints it as it is, in a table's title and in a line, where markup would fail or
    hide the brackets."""
    from tinytune.cli.common import console

    for name in ("[/x]", "[bold]x[/bold]"):
        with console.capture() as captured:
            console.print(front_table([], f"Pareto front of study {name!r}", None))
            console.print(f"wrote '/tmp/{name}/front.png'")
        assert f"study {name!r}" in captured.get() and f"/tmp/{name}/front.png" in captured.get()
