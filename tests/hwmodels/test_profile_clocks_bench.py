"""bench/profile_clocks.py, run small: both clocks read around the same steps, a table of each
clock's share, and no busy process left behind."""

from __future__ import annotations

import multiprocessing as mp
import sys

import numpy as np
import pytest

from tests.search.benches import load_bench


def test_a_small_run_prints_both_clocks_and_stops_its_load(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["profile_clocks.py", "--networks", "2", "--load", "1", "--rounds", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--repeats", "1"])
    load_bench("profile_clocks").main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("2 networks, 1 rounds of 1 steps; first pass at a load average")
    assert lines[1].startswith("first pass: thread CPU time within 1 % of wall time for ")
    assert lines[2:4] == [
        "| clock | within ±5 % under load | within ±10 % under load |",
        "|---|---|---|",
    ]
    assert [line.split(" | ")[0] for line in lines[4:]] == ["| wall time", "| thread CPU time"]
    assert not [p for p in mp.active_children() if p.is_alive()]


def test_the_share_divides_out_a_uniform_slow_down() -> None:
    bench = load_bench("profile_clocks")
    quiet = np.array([1.0, 2.0, 4.0, 8.0])
    # twice as slow, one network 12 % more again: 3 of 4 within ±5 %, the same within ±10 %
    loaded = 2 * quiet * np.array([1.0, 1.0, 1.0, 1.12])
    assert bench._within(loaded, quiet, 0.05) == 0.75
    assert bench._within(loaded, quiet, 0.10) == 0.75
    assert bench._within(loaded, quiet, 0.15) == 1.0
