"""The README: its Python example, run as a user would (in an empty folder, with ``import
tinytune`` only), and its front, whose picture and table ``bench/readme.py`` writes from one
fresh run of the default job."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import tinytune
from tests.search.benches import load_bench

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 200


@pytest.fixture(scope="module")
def readme_bench() -> ModuleType:
    return load_bench("readme")


def _example() -> str:
    text = README.read_text()
    marker = text.index("<!-- readme-example")
    match = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert match is not None
    return match.group(1)


@pytest.mark.slow
def test_the_readme_example_runs(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tinytune.models import PretrainRecipe, checkpoint_path
    from tinytune.spaces import get_supernet

    cache = tmp_path / "cache"
    monkeypatch.setenv("TINYTUNE_CACHE", str(cache))
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    # a checkpoint where the default one is looked for (the tiny one, so no pre-training runs
    # here; where the package ships the default checkpoint, that one is used instead)
    target = checkpoint_path(get_supernet("ofa-proxyless-w0.35"), PretrainRecipe())
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_checkpoint, target)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _example()],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) >= 3
    assert lines[-1] == "True"  # the stored study shows the same front
    assert "bytes of arena" in lines[-2]
    assert (work / "bundle" / "manifest.json").is_file()
    assert (work / "ex.db").is_file()


def test_the_readme_is_short_and_shows_the_front() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_LINES
    assert "](docs/front.png)" in text
    assert (ROOT / "docs" / "front.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_front_block_is_the_scripts_table_of_the_kept_run(readme_bench: ModuleType) -> None:
    """The block was written by ``bench/readme.py`` from the figures kept beside the picture,
    not typed by hand (``python3 -m bench.readme --from-json docs/front.json`` rewrites it)."""
    markers = load_bench("markers")
    figures = json.loads((ROOT / "docs" / "front.json").read_text())
    block = markers.read_block(README.read_text(), readme_bench.BLOCK, "README.md")
    assert block == readme_bench.table(figures)
    assert figures["reference"]["scheme"].startswith("full")
    assert figures["front"], "a fresh run's front has at least one point"


def _point(scheme: str, val: float, test: float, kb: float, ms: float | None) -> dict[str, Any]:
    return {
        "scheme": scheme,
        "val": val,
        "test": test,
        "memory_bytes": int(kb * 1024),
        "latency_s": None if ms is None else ms / 1000,
        "key": scheme,
    }


def test_the_table_of_a_hand_built_run(readme_bench: ModuleType) -> None:
    full = _point("full (reference)", 0.983, 0.981, 240.0, 234)
    run = {
        "wall_s": 92.4,
        "cores": 2,
        "cpu": "Some CPU",
        "load": [1.25, 3.0],
        "device": "stm32f746",
        # out of order: the table sorts by SRAM
        "front": [
            _point("mcunetv3", 0.986, 0.969, 60.0, 114),
            _point("last", 0.914, 0.875, 30.0, None),
            {**_point("mcunetv3", 0.986, 0.969, 45.0, 130), "patches": 2, "key": "twin"},
        ],
        "reference": full,
    }
    assert readme_bench.table(run).splitlines() == [
        "`tinytune search` in an empty folder with an empty cache took **1 min 32 s** on this "
        "machine (2 cores, Some CPU; load average 1.2 as it started and 3.0 as it ended). Its "
        "front has 3 points, "
        "chosen on validation accuracy:",
        "",
        "| update scheme | validation / test accuracy | test vs full fine-tuning | training "
        "SRAM | training step on `stm32f746` (predicted) |",
        "|---|---|---|---|---|",
        "| `last`: the classifier only | 91.4 % / 87.5 % | -10.6 pp | 30.0 KB (8.0× less) | – |",
        "| `mcunetv3`: sparse update (MCUNetV3), its frozen layers in 2 × 2 patches | 98.6 % / "
        "96.9 % | -1.2 pp | 45.0 KB (5.3× less) | 130 ms |",
        "| `mcunetv3`: sparse update (MCUNetV3) | 98.6 % / 96.9 % | -1.2 pp | 60.0 KB (4.0× less) "
        "| 114 ms |",
        "| full fine-tuning (the reference, off the front) | 98.3 % / 98.1 % | – | 240.0 KB "
        "| 234 ms |",
    ]
    # the reference on the front is a row of the front, not a second row
    on_front = {**run, "front": [*run["front"], full], "load": None, "wall_s": 41.0}
    lines = readme_bench.table(on_front).splitlines()
    assert lines[0].startswith(
        "`tinytune search` in an empty folder with an empty cache took "
        "**41 s** on this machine (2 cores, Some CPU). Its front has 4"
    )
    assert (
        lines[-1]
        == "| full fine-tuning (the reference) | 98.3 % / 98.1 % | – | 240.0 KB | 234 ms |"
    )
    assert len(lines) == 8


@pytest.mark.slow
def test_read_study_gives_the_studys_own_figures(readme_bench: ModuleType, tmp_path: Path) -> None:
    """The figures the script writes into the README are read back from a real stored study:
    its front, its reference and the settings of its typed space."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    tinytune.optimize("digits", trials=2, epochs=1, lr=1.6, inline=True, storage=storage)
    figures = readme_bench.read_study(storage)
    view = tinytune.load(storage=storage)
    assert view.reference is not None
    assert (figures["device"], figures["dataset"]) == (view.space.device, "digits")
    assert figures["supernet"] == view.space.supernet == "ofa-proxyless-w0.35"
    assert len(figures["front"]) == len(view.front) >= 1
    for point, stored in zip(figures["front"], view.front, strict=True):
        assert point["patches"] == view.candidate(stored.candidate_key).candidate.schedule.patches
    assert figures["reference"]["test"] == view.reference.test_accuracy
