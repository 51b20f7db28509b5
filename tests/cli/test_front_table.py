"""The front's table: a row per fine-tune with its schedule twins folded in, the reference in a
row of its own; ``wide`` a row per point; every cell whole at 100 columns."""

from __future__ import annotations

from rich.console import Console

from tinytune.cli.front_table import Schedule, augmented_words, fold, front_json, front_table
from tinytune.search import FrontPoint
from tinytune.search.run.verify_int8 import Int8Accuracy


def _point(
    trial: int, key: str, scheme: str, test: float, memory: int, latency: float = 0.1
) -> FrontPoint:
    return FrontPoint(
        trial=trial,
        candidate_key=key,
        val_accuracy=test,
        test_accuracy=test,
        memory_bytes=memory,
        flash_bytes=200_000,
        latency_s=latency,
        scheme=scheme,
    )


REFERENCE = _point(0, "f" * 16, "full (reference)", 0.98, 240 * 1024, 0.156)
# one fine-tune (key "a") under whole images and three patch schedules, another alone
TWINS = [
    _point(8, "a" * 16, "last", 0.90, 25 * 1024 + 512, 0.012),
    _point(9, "b" * 16, "last", 0.90, 23 * 1024 + 614, 0.015),
    _point(10, "c" * 16, "last", 0.90, 22 * 1024 + 717, 0.020),
    _point(11, "d" * 16, "last", 0.90, 22 * 1024, 0.026),
]
SCHEDULES = {
    "a" * 16: Schedule("a" * 16, 1),
    "b" * 16: Schedule("a" * 16, 2),
    "c" * 16: Schedule("a" * 16, 3),
    "d" * 16: Schedule("a" * 16, 4),
    "e" * 16: Schedule("e" * 16, 1),
    "f" * 16: Schedule("f" * 16, 1),
}
FRONT = [*TWINS, _point(3, "e" * 16, "mcunetv3", 0.97, 60 * 1024, 0.047)]


def _lines(table, width: int = 100) -> list[str]:
    console = Console(width=width, record=True)
    console.print(table)
    return console.export_text().splitlines()


def test_twins_fold_into_one_row_in_order_of_sram() -> None:
    groups = fold(FRONT, SCHEDULES)
    assert [[p.trial for p in g] for g in groups] == [[11, 10, 9, 8], [3]]
    rows = [line for line in _lines(front_table(FRONT, "front", REFERENCE, schedules=SCHEDULES))]
    twins = next(line for line in rows if line.lstrip().startswith("11 10 9 8"))
    assert "4 3 2 1" in twins  # the patches per side of each trial in turn
    assert "22.0–25.5 KB" in twins and "12–26 ms" in twins and "-8.0 pp" in twins
    alone = next(line for line in rows if line.lstrip().startswith("3 "))
    assert "60.0 KB" in alone and "47 ms" in alone and "–" not in alone


def test_the_reference_has_the_last_row_or_none_on_the_front() -> None:
    rows = _lines(front_table(FRONT, "front", REFERENCE, schedules=SCHEDULES))
    body = [line for line in rows if "KB" in line]
    assert len(body) == 3 and "reference" in body[-1] and "240.0 KB" in body[-1]
    on = _lines(front_table([*FRONT, REFERENCE], "front", REFERENCE, schedules=SCHEDULES))
    assert sum("reference" in line for line in on if "KB" in line) == 1


def test_no_cell_is_cut_at_100_columns_even_with_int8_accuracies() -> None:
    int8 = {"e" * 16: Int8Accuracy(0.95, 0.94, 0.01)}
    lines = _lines(front_table(FRONT, "front", REFERENCE, int8, schedules=SCHEDULES))
    assert all(len(line) <= 100 for line in lines)
    assert "…" not in "\n".join(lines)
    assert "95.0/94.0%" in "\n".join(lines)


def test_wide_gives_every_point_its_flash_and_whole_key() -> None:
    lines = _lines(front_table(FRONT, "f", REFERENCE, schedules=SCHEDULES, wide=True), 200)
    body = [line for line in lines if " KB" in line]
    assert len(body) == len(FRONT) + 1
    assert all("195.3 KB" in line for line in body)  # the flash of each
    assert any("d" * 16 in line and "10.9× less" in line for line in body)
    assert "full (reference), off the front" in body[-1]


def test_json_holds_every_point_and_the_reference_with_their_schedules() -> None:
    points = front_json(FRONT, REFERENCE, {}, SCHEDULES)
    assert [p["trial"] for p in points] == [8, 9, 10, 11, 3, 0]
    assert points[3]["patches"] == 4 and points[3]["fine_tune"] == "a" * 16
    assert points[-1]["reference"] and not points[-1]["on_front"]
    assert all(p["on_front"] for p in points[:-1])


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


def test_a_narrow_terminal_loses_the_optional_columns_first_and_says_so() -> None:
    int8 = {"e" * 16: Int8Accuracy(0.95, 0.94, 0.01)}
    table = front_table(FRONT, "front", REFERENCE, int8, schedules=SCHEDULES, width=80)
    lines = _lines(table, 80)
    text = "\n".join(lines)
    assert all(len(line) <= 80 for line in lines) and "…" not in text
    header = next(line for line in lines if "trials" in line)
    assert "vs full" not in header and "peak SRAM" in header and "step" in header
    assert "left out to fit 80 columns (--json has every field)" in " ".join(text.split())
    wide_enough = _lines(front_table(FRONT, "front", REFERENCE, schedules=SCHEDULES, width=100))
    assert "vs full" in "\n".join(wide_enough) and "left out" not in "\n".join(wide_enough)


def test_a_front_of_augmented_fine_tunes_says_so_in_its_title() -> None:
    assert augmented_words("none") == augmented_words(None) == ""
    words = augmented_words("crop-flip")
    assert words == (
        ", fine-tuned on augmented images (--augment crop-flip; the bundle trains on its "
        "samples as given)"
    )
    table = front_table(FRONT, "front" + words, REFERENCE, schedules=SCHEDULES)
    assert table.title == "front" + words
