"""The default budget of measured fine-tunes: as many of 12 as fit in 10 minutes on the run's
workers, sized from the learning-rate grid's fine-tunes and kept with the study."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tinytune.db import open_store
from tinytune.evaluators import EvaluationResult, FinetuneTask
from tinytune.search import DEFAULT_SEARCH_S, DEFAULT_TRIALS, InlineExecutor, run_search
from tinytune.search.config.budgets import Sizing, size_trials
from tinytune.search.run.lr_grid import family_of
from tinytune.search.run.preflight import preflight
from tinytune.search.run.timing import Sizes, family_seconds, grid_timing
from tinytune.search.study.attrs import Attr
from tinytune.spaces import Candidate, get_supernet

from .fakes import FakeEvaluator, search_config

SPEC = get_supernet("ofa-proxyless-w0.35")
FAMILIES = ["classifier", "bias", "sparse", "full"]


def test_as_many_as_fit_beside_the_reference_between_the_presets_and_twelve() -> None:
    seconds = {"classifier": 10.0, "bias": 40.0, "sparse": 70.0, "full": 100.0}
    # a fine-tune: (10 + 40 + 70) / 3 = 40 s; 600 s on 2 workers less the reference's 100 s
    sized = size_trials(seconds, FAMILIES, slots=2, reference=True, least=4)
    assert sized == Sizing(
        trials=DEFAULT_TRIALS,
        fit=27,
        each_s=40.0,
        reference_s=100.0,
        slots=2,
        time_s=600.0,
        least=4,
    )
    slow = {f: 12 * s for f, s in seconds.items()}  # 480 s a fine-tune, 1200 s the reference
    # (1200 - 1200) / 480: none fits, the four presets are measured all the same
    assert size_trials(slow, FAMILIES, 2, reference=True, least=4) == Sizing(
        4, 0, 480.0, 1200.0, 2, 600.0, 4
    )
    some = {f: 3 * s for f, s in seconds.items()}  # 120 s, the reference 300 s
    assert size_trials(some, FAMILIES, 2, reference=True, least=4).trials == 7  # 900 / 120
    assert size_trials(some, FAMILIES, 2, reference=False, least=4).trials == 10  # 1200 / 120
    assert size_trials(some, FAMILIES, 1, reference=False, least=1).trials == 5  # 600 / 120
    # a preset study: its own family's time, at least one fine-tune
    assert size_trials(slow, ["bias", "full"], 1, reference=True, least=1).trials == 1
    assert size_trials(seconds, ["full"], 1, reference=False, least=1).trials == 6  # 600 / 100
    assert size_trials({}, FAMILIES, 2, reference=True, least=4) is None
    assert size_trials(seconds, FAMILIES, 2, reference=True, least=4, time_s=60.0).trials == 4


def _timed(seconds: dict[str, float]) -> FakeEvaluator:
    """The fake evaluator, each fine-tune taking its family's ``seconds``."""

    class Timed(FakeEvaluator):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            result = super().__call__(task)
            family = family_of(Candidate.from_json(task.candidate), SPEC)
            return result.replace(wall_time_s=seconds[family])

    return Timed()


@pytest.mark.parametrize(
    "seconds",
    [
        {"classifier": 10.0, "bias": 40.0, "sparse": 70.0, "full": 100.0},
        {"classifier": 20.0, "bias": 100.0, "sparse": 120.0, "full": 150.0},
        {"classifier": 200.0, "bias": 400.0, "sparse": 600.0, "full": 900.0},
    ],
)
def test_a_study_without_trials_measures_as_many_as_its_grid_says_fit_and_keeps_the_number(
    tmp_path: Path, seconds: dict[str, float]
) -> None:
    """The grid's fine-tunes time each family's (:mod:`tinytune.search.run.timing`, tested
    against hand-computed times there); the budget is as many as fit, kept with the study.
    A time budget given, no deadline holds the run (tests/search/test_deadline.py): the
    number is sized."""
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    config = search_config(ckpt, trials=None, tune_lr=True, reference=True, time_budget_s=3600.0)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    events: list[tuple[str, int]] = []
    with open_store(url) as store:
        checked = preflight(config, store)
        first = run_search(
            config,
            store,
            InlineExecutor(_timed(seconds)),
            progress=lambda e: events.append((e.kind, e.budget)),
            checked=checked,
        )
    assert first.lr_calibration is not None and first.lr_calibration.train_fraction == 1.0
    sizes = Sizes(checked.train_images, checked.val_images + checked.test_images, 1)
    timing = grid_timing(first.lr_calibration, checked.hardware, sizes)
    assert timing is not None
    predicted = family_seconds(timing, FAMILIES, checked.hardware)
    # the grid trained on every image: its own fine-tunes are timed as they took, the
    # classifier's and the sparse update's with a frozen prefix of their own to compute
    assert predicted["full"] == pytest.approx(seconds["full"], rel=0.5)
    assert predicted["classifier"] >= seconds["classifier"]
    expected = size_trials(predicted, FAMILIES, 1, reference=True, least=4)
    assert expected is not None
    trials = expected.trials
    assert first.sizing == expected and first.trials == trials and first.finished == trials
    assert events[0] == ("start", DEFAULT_TRIALS) and ("sized", trials) in events
    assert all(budget == trials for kind, budget in events[events.index(("sized", trials)) :])
    study = optuna.load_study(study_name="s", storage=url)
    assert Sizing.from_json(study.user_attrs[Attr.TRIALS_SIZED]) == expected
    # a later run keeps the study's number, whatever its fine-tunes would take now
    with open_store(url) as store:
        again = run_search(config, store, InlineExecutor(_timed({f: 1.0 for f in seconds})))
    assert again.sizing == expected and again.trials == trials and again.counts.measured == 0


def test_trials_given_are_the_budget_and_nothing_is_sized(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    slow = {"classifier": 200.0, "bias": 400.0, "sparse": 600.0, "full": 900.0}
    config = search_config(ckpt, trials=6, tune_lr=True, reference=True)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(_timed(slow)))
    assert result.sizing is None and result.trials == 6 and result.finished == 6
    assert Attr.TRIALS_SIZED not in optuna.load_study(study_name="s", storage=url).user_attrs
    # without a grid there is nothing to size by: the most
    plain = search_config(ckpt, trials=None, study_name="plain")
    with open_store(url) as store:
        result = run_search(plain, store, InlineExecutor(FakeEvaluator()))
    assert result.sizing is None and result.trials == DEFAULT_TRIALS
    assert DEFAULT_SEARCH_S == 600.0


def test_a_reproducible_study_sized_below_twelve_says_its_number_hangs_on_the_machine(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    slow = {"classifier": 200.0, "bias": 400.0, "sparse": 600.0, "full": 900.0}
    fast = {f: s / 100 for f, s in slow.items()}
    for name, seconds, warned in (("slow", slow, True), ("fast", fast, False)):
        caplog.clear()
        config = search_config(
            ckpt, study_name=name, trials=None, tune_lr=True, reference=True, reproducible=True
        )
        with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
            run_search(config, store, InlineExecutor(_timed(seconds)))
        said = [r.getMessage() for r in caplog.records if "sized from this machine" in str(r.msg)]
        assert bool(said) == warned, name
        if warned:
            assert "4 measured fine-tunes" in said[0] and "trials" in said[0]


def test_the_options_help_says_the_sized_defaults_numbers() -> None:
    """The options sit below the search and cannot import its constants: their help repeats
    them as text, held to them here."""
    from tinytune.errors import CLI
    from tinytune.options import SEARCH_OPTIONS

    help_text = next(o for o in SEARCH_OPTIONS if o.name == "trials").help_text(CLI)
    minutes = f"{DEFAULT_SEARCH_S / 60:g} minutes"
    assert f"as many of {DEFAULT_TRIALS} as fit in {minutes}" in help_text
    assert f"; {DEFAULT_TRIALS} where no grid is run" in help_text
