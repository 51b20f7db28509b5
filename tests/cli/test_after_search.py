"""After a real search, as a new user meets it: the README's default run (digits) and a search
of the printed letters (EfficientNet-Lite0, an image folder), each in a folder of its own.
``tinytune report`` draws every point of each front (patched ones included), and ``tinytune
pareto`` at 100 columns cuts no cell and gives a row per fine-tune."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.letters import write_letters
from tinytune.cli.main import main

pytestmark = pytest.mark.slow

PNG = b"\x89PNG\r\n\x1a\n"


def _tinytune(folder: Path, *args: str, columns: int = 100) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    done = subprocess.run(
        [sys.executable, "-m", "tinytune.cli.main", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module", params=["digits", "letters"])
def searched(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where ``tinytune search`` ran with no option but the data set."""
    folder = tmp_path_factory.mktemp(request.param)
    args = ["search"]
    if request.param == "letters":
        images = write_letters(folder / "letters", 30, 0)
        args += ["--dataset", f"imagefolder:{images}"]
    _tinytune(folder, *args)
    return folder


def _front(folder: Path) -> list[dict]:
    return json.loads(_tinytune(folder, "pareto", "--json"))


def test_report_draws_every_point_of_the_front(
    searched: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    front = _front(searched)
    patched = [p for p in front if (p["patches"] or 1) > 1]
    url = f"sqlite:///{searched / 'tinytune.db'}"
    for point in front:
        out = searched / f"report-{point['trial']}.png"
        code = main(["report", str(point["trial"]), "--storage", url, "-o", str(out)])
        assert code == 0, (point, capsys.readouterr().err)
        assert out.read_bytes()[:8] == PNG
    assert len(front) >= 3
    if searched.name.startswith("digits"):
        assert patched  # the default run's front holds points run patch by patch


def test_pareto_fits_100_columns_with_a_row_per_fine_tune(searched: Path) -> None:
    text = _tinytune(searched, "pareto", columns=100)
    lines = text.splitlines()
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("a row per"))]
    assert "…" not in "\n".join(table)
    assert all(len(line) <= 100 for line in table)
    front = _front(searched)
    rows = [line for line in table if line.rstrip().endswith(" ms")]
    fine_tunes = {p["fine_tune"] for p in front}
    assert len(rows) == len(fine_tunes) <= 12
    # each row lists its trials; together they are the front's (and the reference's) trials
    listed = {int(t) for row in rows for t in row.split("  ")[0].split()}
    assert listed == {p["trial"] for p in front}


def test_the_plot_and_the_table_give_one_hypervolume(searched: Path) -> None:
    from tinytune.db import open_store
    from tinytune.search.front import hypervolume_history

    text = _tinytune(searched, "pareto", "--plot", "front.png")
    with open_store(f"sqlite:///{searched / 'tinytune.db'}") as store:
        snapshots = store.pareto_snapshots("tinytune")
        measured = store.evaluations("tinytune", fidelity="measured", status="ok")
    stored = snapshots[-1].hypervolume
    assert hypervolume_history(snapshots, measured)[-1][1] == stored
    assert f"hypervolume {stored:.4f}" in " ".join(text.split())
    assert (searched / "front.png").read_bytes()[:8] == PNG
