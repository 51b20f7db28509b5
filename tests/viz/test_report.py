"""The candidate report: the plotted breakdown adds up to the planner's timeline; the command
writes a PNG for a trial or a key and refuses bad targets in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest

from tinytune.cli.main import main
from tinytune.db import open_store
from tinytune.evaluators import HardwareConfig, HardwareEvaluator
from tinytune.hwmodels.builtin_devices import builtin_profiles
from tinytune.spaces import default_subnet, get_supernet, make_preset
from tinytune.viz.report import CATEGORIES, report_figure, step_breakdown

SPEC = get_supernet("ofa-proxyless-w0.35")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def candidate():
    return make_preset("mcunetv3", SPEC, default_subnet(SPEC))


def test_breakdown_sums_to_the_timeline_and_peak(candidate, tmp_path: Path) -> None:
    hw = HardwareEvaluator(SPEC, 10, HardwareConfig(), builtin_profiles()["stm32f746"])
    cost, graph = hw.cost_with_graph(candidate)
    parts = step_breakdown(cost.memory)
    assert parts.shape == (len(CATEGORIES), 2 * len(graph.ops))
    np.testing.assert_array_equal(parts.sum(axis=0), np.array(cost.memory.timeline))
    assert parts.sum(axis=0).max() == cost.memory.peak_bytes
    at_peak = parts[:, cost.memory.peak_step]
    assert {c: int(v) for c, v in zip(CATEGORIES, at_peak, strict=True) if v} == {
        c: v for c, v in cost.memory.breakdown.items() if v
    }
    path = report_figure(graph, cost.memory, cost.latency, tmp_path / "r.png", title="t")
    assert path.read_bytes()[:8] == PNG


@pytest.fixture
def db(tmp_path: Path, candidate) -> str:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        store.add_candidate(candidate.key, candidate.supernet, candidate.to_json())
    study = optuna.create_study(study_name="s", storage=url)
    trial = study.ask()
    trial.set_user_attr("candidate", candidate.to_json())
    study.tell(trial, 1.0)
    return url


def test_report_for_a_trial_and_a_key(
    db: str, candidate, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trial.png"
    assert main(["report", "0", "--study", "s", "--storage", db, "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    out = tmp_path / "new" / "folder" / "key.png"  # made, as profile's and export's are
    args = ["report", candidate.key[:10], "--storage", db, "--device", "nrf52840"]
    assert main([*args, "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    assert "nrf52840; wrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["7", "--study", "s"], "has no trial 7 with a candidate (trial 0 has one)"),
        (["0", "--study", "other"], "no study 'other'"),
        (["abc123"], "matches 0 stored candidates"),
        (["not-a-key"], "is not lower-case hex digits"),
        (["٣", "--study", "s"], "is not lower-case hex digits"),  # a digit, but not 0-9
        (["0", "--study", "s", "--device", "esp32"], "unknown device 'esp32'"),
        (["0", "--study", "s", "--device", ""], "unknown device ''"),
        (["0", "--study", "s", "-o", "report.svg"], "--out 'report.svg' must name a .png file"),
    ],
)
def test_bad_targets_are_one_line(
    argv: list[str], message: str, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", *argv, "--storage", db]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
