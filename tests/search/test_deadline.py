"""A default run (neither ``trials`` nor a time budget) keeps its minutes: a measured fine-tune
starts only where, predicted from the grid's, it ends within them; the reference and the
presets that would not are left out, each said so, and a proposal that would not ends the
run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

import tinytune.search.run.lr_grid as lr_module
from tinytune.cli.search import _stopped, late_words
from tinytune.db import open_store
from tinytune.evaluators import EvaluationResult, FinetuneTask
from tinytune.search import (
    DEFAULT_SEARCH_S,
    DEFAULT_TRIALS,
    InlineExecutor,
    SearchResult,
    run_search,
)
from tinytune.search.config.search_config import BASELINE_PRESETS
from tinytune.search.run.lr_grid import family_of
from tinytune.search.run.timing import Deadline, Late
from tinytune.search.study.attrs import Attr
from tinytune.spaces import JOINT, Candidate, get_supernet, make_preset

from .fakes import FakeEvaluator, search_config

SPEC = get_supernet("ofa-proxyless-w0.35")


class Timed(FakeEvaluator):
    """Fine-tunes of a family's ``seconds`` each, as a worker reports them (the frozen prefix
    computed in a tenth of a fine-tune with one), instantly."""

    def __init__(self, seconds: dict[str, float]) -> None:
        super().__init__()
        self.seconds = seconds

    def __call__(self, task: FinetuneTask) -> EvaluationResult:
        result = super().__call__(task)
        family = family_of(Candidate.from_json(task.candidate), SPEC)
        frozen = family in ("classifier", "sparse")
        seconds = self.seconds[family]
        details = {"prefix_s": 0.1 * seconds if frozen else 0.0, "prefix_computed": frozen}
        return result.replace(wall_time_s=seconds, details=details)


# on the grid's 100 training images; every image takes several times as long
SLOW = {"classifier": 1.0, "bias": 400.0, "sparse": 10.0, "full": 600.0}


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[SearchResult, list]:
    monkeypatch.setattr(lr_module, "GRID_TRAIN_IMAGES", 500)
    monkeypatch.setattr(lr_module, "GRID_SUBSET_IMAGES", 100)
    tmp_path.mkdir(parents=True, exist_ok=True)
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    config = search_config(ckpt, tune_lr=True, reference=True, **{"trials": None, **kw})
    events: list = []
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        result = run_search(config, store, InlineExecutor(Timed(SLOW)), progress=events.append)
    return result, events


def test_a_default_run_leaves_out_the_fine_tunes_that_would_end_after_its_minutes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, events = _run(tmp_path, monkeypatch)
    late = {entry.scheme: entry for entry in result.late}
    # the reference, bias-only and TinyTL (its biases train through every layer) would end
    # after the run's minutes; the classifier and the sparse update fit
    assert {"full (reference)", "bias-only", "tinytl"} <= set(late)
    assert all(entry.opening and entry.seconds > DEFAULT_SEARCH_S for entry in late.values())
    assert result.counts.late == len(result.late)
    assert [e.late for e in events if e.kind == "late"] == list(result.late)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'db.sqlite'}")
    schemes = {t.params.get("scheme"): t for t in study.trials if t.params.get("scheme") != JOINT}
    for scheme in ("bias-only", "tinytl"):
        trial = schemes[scheme]
        assert trial.state == optuna.trial.TrialState.PRUNED
        assert "would end after the run's deadline" in trial.user_attrs["pruned_reason"]
    measured = {t.params.get("scheme") for t in study.trials if t.state.name == "COMPLETE"}
    assert {"last", "mcunetv3"} <= measured
    assert result.reference is None  # not measured, so no front is read against it
    line = late_words(late["full (reference)"])
    assert line.startswith("not measured: the reference (full fine-tuning), about ")
    assert "--time-budget or --trials measures it" in line and "\n" not in line
    assert late_words(late["bias-only"]).startswith("not measured: the bias-only preset")


def test_a_default_run_sizes_no_number_its_deadline_holds_it_to_its_minutes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, _ = _run(tmp_path, monkeypatch)
    assert result.sizing is None and result.trials == DEFAULT_TRIALS
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert Attr.TRIALS_SIZED not in study.user_attrs


def test_trials_or_a_time_budget_given_measure_the_opening_whatever_the_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for kw in ({"trials": 4}, {"time_budget_s": 3600.0}):
        result, events = _run(tmp_path / next(iter(kw)), monkeypatch, **kw)
        assert result.late == () and not [e for e in events if e.kind == "late"]
        assert result.reference is not None and result.counts.presets == 4


def test_a_proposal_that_would_end_after_the_deadline_ends_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fast fine-tunes size the budget at 12; the search's first proposal, priced past the
    deadline, ends the run, which says why."""
    opening = {make_preset(p, SPEC).key for p in ("full", *BASELINE_PRESETS)}
    priced: list[Candidate] = []

    def seconds(self: Deadline, candidate: Candidate) -> float:
        priced.append(candidate)
        return 1.0 if candidate.training.key in opening else 10 * DEFAULT_SEARCH_S

    monkeypatch.setattr(Deadline, "seconds", seconds)
    monkeypatch.setitem(SLOW, "bias", 4.0)
    monkeypatch.setitem(SLOW, "full", 6.0)
    result, _ = _run(tmp_path, monkeypatch)
    assert result.trials == 12 and result.counts.presets == 4
    assert [c.training.key in opening for c in priced] == [True] * 5 + [False]
    assert result.stopped_by == "late"
    assert result.late == (Late(result.late[0].scheme, 10 * DEFAULT_SEARCH_S, False),)
    text = _stopped(result, result.trials, None, None, None)
    assert text.startswith(
        f"the run stopped at its {DEFAULT_SEARCH_S / 60:g} minutes: its next fine-tune, about "
        f"{10 * DEFAULT_SEARCH_S / 60:.0f} min, would have ended after them, with 4 of"
    )
    assert "--time-budget or --trials lets it measure more" in text


def test_the_line_names_what_was_left_out() -> None:
    assert late_words(Late("mcunetv3", 61.0, True)) == (
        "not measured: the mcunetv3 preset, about 61 s, would end after the run's 10 minutes; "
        "--time-budget or --trials measures it whatever the time"
    )
    assert "about 12 min" in late_words(Late("full (reference)", 700.0, True))
