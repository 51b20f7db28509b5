"""bench/scale.py: its generated folder is deterministic, in every mode and format it says,
readable as an image folder without copies; it reads memory from /proc; and its table says
"no GPU here" where no GPU ran."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from PIL import Image

from tinytune.data import ImageFolderDataset

from .benches import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("scale")


def test_the_generated_folder_is_deterministic_and_readable(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path / "cache"))
    root = bench.write_folder(tmp_path / "a", 70)
    again = bench.write_folder(tmp_path / "b", 70)
    files = sorted(p.relative_to(root) for p in root.rglob("*") if p.suffix in (".png", ".jpg"))
    assert len(files) == 70 and [p.parent.name for p in files[::7]] == sorted(bench.CLASSES)
    assert all((root / p).read_bytes() == (again / p).read_bytes() for p in files)
    modes = {(Image.open(root / p).mode, p.suffix) for p in files}
    assert {m for m, _ in modes} == {"RGB", "RGBA", "L", "P", "I;16"}
    assert {s for _, s in modes} == {".png", ".jpg"}
    assert {Image.open(root / p).size for p in files} == set(bench.SIZES)
    mtime = (root / files[0]).stat().st_mtime_ns
    bench.write_folder(root, 70)  # the same recipe: reused, not written again
    assert (root / files[0]).stat().st_mtime_ns == mtime
    dataset = ImageFolderDataset(root)
    assert dataset.copies == 0 and dataset.num_classes == 10
    grey = np.asarray(dataset.load(16).train.x)
    assert grey.std() > 0.1  # the 16-bit images read as their greys, not clipped white


def test_memory_is_read_from_proc(bench: ModuleType) -> None:
    status = bench._status(os.getpid())
    assert status["VmHWM"] >= status["VmRSS"] > 0 and "RssAnon" in status
    assert bench._status(2**22 + 7) == {}  # no such process
    tree = bench._descendants(os.getpid())
    assert os.getpid() in tree and "python" in tree[os.getpid()]
    memory = bench.Memory(os.getpid(), every=0.01)
    peaks = memory.stop()
    assert peaks["driver"]["hwm"] >= status["VmRSS"] // 2


def _run(decode: float | None) -> dict:
    m = {"hwm": 2_000_000_000, "anon": 500_000_000, "rss": 1_000_000_000}
    return {
        "list_hash_s": 1.5,
        "decode_s": decode,
        "reuse_s": None if decode else 0.004,
        "optimize_to_data_s": 70.0,
        "decoded_bytes": 5_800_000_000,
        "fine_tunes": 4,
        "ok": 4,
        "search_s": 360.0,
        "memory": {"driver": m, "worker": m, "other": m},
    }


def test_the_table_shows_both_runs_and_no_gpu_here(bench: ModuleType) -> None:
    settings = {"trials": 3, "epochs": 1, "lr": 0.05, "workers": 2, "time_budget": "20m"}
    result = {
        "images": 20000,
        "settings": settings,
        "runs": {"cold": _run(60.0), "warm": _run(None), "gpu": None},
    }
    text = bench.table([result], "2 cores of a test CPU")
    rows = text.splitlines()
    cold = "| 20,000 | CPU workers, cold cache | 61.5 | 1.5 | 60.0 | 70.0 | 5.80 GB | 4 (4) |"
    assert rows[2].startswith(cold)
    assert "| 40 | 2,000 MB | 2,000 MB | 500 MB |" in rows[2]  # 4 fine-tunes in 360 s: 40/h
    assert "none: found in 4.0 ms" in rows[3] and rows[3].count("|") == rows[2].count("|")
    assert rows[4].startswith("| 20,000 | GPU workers | no GPU here |")
    assert rows[4].count("|") == rows[2].count("|")
    assert (
        "20,000 images with `--trials 3 --epochs 1 --lr 0.05 --workers 2 --time-budget 20m`"
        in text
    )
