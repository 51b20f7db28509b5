"""bench/calibration_size.py: its table on a pool of bundle steps and calls that a profile of
a form the fit can choose predicts exactly (every set stored, every test network predicted
exactly) and, a second pool, steps 60 % off (every set refused)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.hwmodels.support import MORE_MODELS, SMALL, form_truth, predicted_file, timed
from tests.search.benches import load_bench
from tinytune.hwmodels.measurements import save_measurements
from tinytune.hwmodels.reference_models import mobilenet_v1_id

POOL = [*MORE_MODELS, *(mobilenet_v1_id(a, r, 3, 5) for a in (0.25, 1.0) for r in (112, 144, 176))]
"""Eighteen reference networks: twelve to fit, six to test on."""


@pytest.mark.parametrize(
    ("noise", "row"), [(0.0, "| 12 | 1 | 1 of 1 |"), (0.6, "| 12 | 1 | 0 of 1 |")]
)
def test_the_table_of_a_known_pool(
    noise: float,
    row: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    truth = form_truth(SMALL)
    file = timed(predicted_file("int8", POOL, truth, "host", noise), truth)
    path = tmp_path / "pool.json"
    save_measurements(path, file)
    argv = ["calibration_size.py", str(path), "--sizes", "12", "--fit-pool", "12"]
    monkeypatch.setattr(sys, "argv", argv)
    load_bench("calibration_size").main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{path}: 12 networks to fit from, 6 to test on"
    (table_row,) = [line for line in lines if line.startswith("| 12 |")]
    assert table_row.startswith(row), table_row
    if not noise:  # stored, and every test network predicted exactly
        assert " | 100% | 0.0% | 0.0% | 0.0% | 0.0% | " in table_row


def test_the_bounds_of_a_known_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pool that a form of the model predicts exactly is fitted exactly by the full model,
    and a pool timed "again" as the same file repeats itself exactly."""
    truth = form_truth(SMALL)
    path = tmp_path / "pool.json"
    save_measurements(path, timed(predicted_file("int8", POOL, truth, "host", 0.0), truth))
    argv = ["calibration_size.py", str(path), "--sizes", "12", "--fit-pool", "12"]
    monkeypatch.setattr(sys, "argv", [*argv, "--bounds", str(path)])
    load_bench("calibration_size").main()
    lines = capsys.readouterr().out.splitlines()
    exact = "100% within ±5 %, 100% within ±10 % (median 0.0%, max 0.0%)"
    assert lines[:2] == [
        f"full model fitted on all 18, in sample: {exact}",
        f"the same 18 networks timed in another run: {exact}",
    ]
