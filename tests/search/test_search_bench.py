"""bench/search_efficiency.py end to end at the smallest settings: every strategy runs within
its epochs, the records keep validation and test accuracy, and the report reads them back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .benches import load_bench


@pytest.mark.slow
def test_search_bench_smallest_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load_bench("search_efficiency")
    out = tmp_path / "runs.jsonl"
    args = [
        *("--budget", "6", "--epochs", "2", "--screen-epochs", "1", "--screen-fraction", "0.25"),
        *("--seeds", "0", "--workers", "0", "--evolution-trials", "12", "--population", "4"),
        *("--small-budget", "2", "--small", "halving", "--lr", "1.6"),
        *("--out", str(out), "--db", str(tmp_path / "bench.db")),
    ]
    assert module.main(args) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["strategy"] for r in records] == [*module.STRATEGIES, "halving@2"]
    for r in records:
        assert r["epochs"] <= r["budget_epochs"] + 1e-9, r["strategy"]
        assert r["points"], r["strategy"]  # each measured at least one candidate
        for val, sram, latency, test in r["points"]:
            assert 0.0 <= val <= 1.0 and 0.0 <= test <= 1.0 and sram > 0 and latency > 0
    by = {r["strategy"]: r for r in records}
    # the contribution analysis: 34 fine-tunes of 1 epoch on a quarter of the images
    assert by["mcunetv3"]["epochs"] == pytest.approx(
        34 * 0.25 + 2 * len(by["mcunetv3"]["points"]), abs=0.5
    )
    assert by["halving@2"]["budget_epochs"] == 4
    printed = capsys.readouterr().out
    assert "| mcunetv3 | 1 |" in printed and "× the best baseline's" in printed
    assert module.main(["--report", str(out)]) == 0
    assert capsys.readouterr().out.strip() in printed
