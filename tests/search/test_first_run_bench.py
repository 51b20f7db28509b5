"""bench/first_run.py: the figures it reads back from a finished study are the study's own
(its reference, the classifier-only preset, the front's best point on validation), and its
summary gives the median, mean and range of each over the seeds."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

import tinytune

from .benches import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("first_run")


def _run(seed: int, wall: float, full: float, last: float, best: float, ratio: float) -> dict:
    point = {"scheme": "mcunetv3", "val": 0.99, "memory_bytes": 1000, "sram_ratio": ratio}
    return {
        "seed": seed,
        "wall_s": wall,
        "full": {"val": 0.99, "test": full, "memory_bytes": 4000},
        "last": {"val": 0.9, "test": last, "memory_bytes": 500},
        "best": {**point, "test": best},
        "saver": {**point, "test": best},
        "front": 4,
        "hypervolume": 0.7,
    }


def test_summary_gives_median_mean_and_range(bench: ModuleType) -> None:
    runs = [
        _run(0, 100.0, 0.97, 0.85, 0.96, 4.0),
        _run(1, 110.0, 0.98, 0.87, 0.97, 4.5),
        _run(2, 90.0, 0.99, 0.86, 0.98, 8.0),
    ]
    text = bench.table(runs, "digits")
    assert "3 fresh runs of `tinytune search --dataset digits --seed S`" in text
    assert "- time: 100 s (mean 100 s, 90 to 110 s)" in text
    assert "- full fine-tuning, test: 98.0 % (mean 98.0 %, 97.0 to 99.0 %)" in text
    assert "- classifier only, test: 86.0 % (mean 86.0 %, 85.0 to 87.0 %)" in text
    assert (
        "the front's best point on validation, test: 97.0 % (mean 97.0 %, 96.0 to 98.0 %)" in text
    )
    assert "validation: 4.5× (mean 5.5×, 4.0 to 8.0×)" in text
    assert "full fine-tuning's: -1.0 pp (mean -1.0 pp, -1.0 to -1.0 pp)" in text
    assert "| 2 | 90 s | 99.0 / 99.0 | 90.0 / 86.0 | mcunetv3, 99.0 / 98.0, 8.0× |" in text


@pytest.mark.slow
def test_read_study_gives_the_studys_own_figures(bench: ModuleType, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    result = tinytune.optimize("digits", trials=2, epochs=1, lr=1.6, inline=True, storage=storage)
    figures = bench.read_study(storage)
    view = tinytune.load(storage=storage)
    ref = view.reference
    assert figures["full"] == {
        "val": ref.val_accuracy,
        "test": ref.test_accuracy,
        "memory_bytes": ref.memory_bytes,
    }
    assert 0.0 < figures["last"]["test"] <= 1.0 and figures["last"]["memory_bytes"] > 0
    best = max(result.front, key=lambda p: (p.val_accuracy, -p.memory_bytes))
    assert (figures["best"]["val"], figures["best"]["test"]) == (
        best.val_accuracy,
        best.test_accuracy,
    )
    assert figures["best"]["sram_ratio"] == ref.memory_bytes / best.memory_bytes
    saver = figures["saver"]
    assert ref.val_accuracy - saver["val"] <= 0.01
    assert all(
        p.memory_bytes >= saver["memory_bytes"]
        for p in result.front
        if ref.val_accuracy - p.val_accuracy <= 0.01
    )
    assert figures["front"] == len(result.front) and figures["hypervolume"] == view.hypervolume


def test_from_json_writes_the_named_block_only(bench: ModuleType, tmp_path: Path) -> None:
    runs = [_run(0, 100.0, 0.97, 0.85, 0.96, 4.0), _run(1, 110.0, 0.98, 0.87, 0.97, 4.5)]
    earlier = tmp_path / "letters.json"
    earlier.write_text(json.dumps({"dataset": "imagefolder:/tmp/letters", "runs": runs}))
    page = tmp_path / "page.md"
    first = "<!-- first-run:begin -->\ndigits\n<!-- first-run:end -->\n"
    page.write_text(
        first + "<!-- first-run-letters:begin -->\nstale\n<!-- first-run-letters:end -->\n"
    )
    argv = ["--from-json", str(earlier), "--write", str(page), "--section", "first-run-letters"]
    assert bench.main(argv) == 0
    text = page.read_text()
    assert text.startswith(first) and "stale" not in text
    assert "2 fresh runs of `tinytune search --dataset imagefolder:/tmp/letters --seed S`" in text
