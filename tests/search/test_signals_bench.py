"""bench/signals.py end to end at the smallest settings: every signal gets a τ, the JSON keeps
each candidate's validation and test accuracy, and the repeat's τ is reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .benches import load_bench


@pytest.mark.slow
def test_signals_bench_smallest_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load_bench("signals")
    out = tmp_path / "signals.json"
    args = ["--sample", "1", "--epochs", "2", "--contribution-epochs", "1", "--short-epochs", "1"]
    args += ["--repeat-seed", "1"]
    assert module.main([*args, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "contribution table: 34 fine-tunes of 1 epochs" in printed
    data = json.loads(out.read_text())
    assert set(data["tau"]) == {
        "probe",
        "fisher",
        "grad_norm",
        "potential",
        "contribution",
        "short",
    }
    assert all(-1.0 <= t["pooled"] <= 1.0 for t in data["tau"].values())
    assert -1.0 <= data["tau_repeat"] <= 1.0
    rows = data["candidates"].values()
    assert len(rows) == 6  # five presets and one drawn candidate
    assert all(0.0 <= r["val_accuracy"] <= 1.0 and 0.0 <= r["test_accuracy"] <= 1.0 for r in rows)
    assert all(0.0 <= r["signals"]["short"] <= 1.0 for r in rows)  # a short fine-tune's val
    assert {r["family"] for r in rows} >= {"classifier", "bias", "sparse", "full"}
