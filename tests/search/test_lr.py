"""The learning rate per scheme family: families, the choice on validation, and the driver's
grid (run once per study, stored, its preset results reused as measurements)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tinytune.db import open_store
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask, run_evaluation
from tinytune.search import InlineExecutor, SearchConfig, run_search
from tinytune.search.run.lr_grid import (
    FAMILIES,
    StudyRates,
    choose,
    families_needed,
    family_of,
    grid_order,
    longest_first,
)
from tinytune.search.run.preflight import preflight
from tinytune.spaces import PRESET_NAMES, Candidate, get_supernet, make_preset
from tinytune.spaces.candidate import LiteResidualBranch, LiteResidualConfig, UpdateScheme

from .fakes import FakeEvaluator, search_config

SPEC = get_supernet("ofa-proxyless-w0.35")


def test_every_preset_falls_in_the_expected_family() -> None:
    expected = {
        "full": "full",
        "last": "classifier",
        "bias-only": "bias",
        "bn+last": "bias",
        "tinytl": "sparse",
        "mcunetv3": "sparse",
    }
    assert set(expected) == set(PRESET_NAMES)
    for name, family in expected.items():
        assert family_of(make_preset(name, SPEC), SPEC) == family, name
    for family in FAMILIES.values():  # each family's representative is in it
        assert family_of(make_preset(family.preset, SPEC), SPEC) == family.name


def test_partial_weights_or_a_lite_branch_alone_make_a_sparse_candidate() -> None:
    base = make_preset("last", SPEC)
    n = len(make_preset("full", SPEC).update.weights)
    all_but_half = UpdateScheme(n, tuple((i, 1.0 if i else 0.5) for i in range(n)))
    lite = LiteResidualConfig(((1, LiteResidualBranch()),))
    for candidate in (
        base.__class__(base.supernet, base.subnet, base.lite_residual, all_but_half),
        base.__class__(base.supernet, base.subnet, lite, UpdateScheme(0)),
    ):
        assert family_of(candidate, SPEC) == "sparse"


def _ok(val: float, test: float = 0.5, s: float = 1.0) -> EvaluationResult:
    return EvaluationResult("ok", val_accuracy=val, accuracy=test, wall_time_s=s)


def test_the_best_validation_accuracy_wins_and_test_never_decides() -> None:
    chosen = choose("full", {0.2: _ok(0.90, 0.99), 0.4: _ok(0.95, 0.10), 0.8: _ok(0.93)}, 0.1)
    assert chosen.lr == 0.4 and chosen.val_accuracy == 0.95 and chosen.test_accuracy == 0.10
    tie = choose("bias", {0.8: _ok(0.9), 0.4: _ok(0.9), 1.6: _ok(0.8)}, 0.1)
    assert tie.lr == 0.4  # the smaller rate on a tie
    failed = EvaluationResult.failed("diverged", 2.0)
    partly = choose("sparse", {0.4: failed, 0.8: _ok(0.7)}, 0.1)
    assert partly.lr == 0.8 and partly.tried[0] == (0.4, None, None, 2.0)
    assert choose("sparse", {0.4: failed}, 0.1).lr == 0.1  # every fine-tune failed
    calibration = StudyRates((chosen, tie, partly))
    assert StudyRates.from_json(calibration.to_json()) == calibration
    assert calibration.fine_tunes == 8 and calibration.wall_time_s == pytest.approx(9.0)
    assert calibration.lr("classifier", 0.3) == 0.3 and calibration.lr("bias", 0.3) == 0.4


def test_a_preset_study_calibrates_its_family_and_full_only() -> None:
    config = SearchConfig(checkpoint="", preset="bn+last")
    assert families_needed(config, SPEC) == ["bias", "full"]
    no_reference = SearchConfig(checkpoint="", preset="full", reference=False)
    assert families_needed(no_reference, SPEC) == ["full"]
    assert families_needed(SearchConfig(checkpoint=""), SPEC) == list(FAMILIES)


def test_the_grid_submits_the_longest_first_and_computes_two_prefixes_side_by_side(
    tmp_path: Path,
) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    fake = FakeEvaluator()
    config = search_config(ckpt, trials=1, tune_lr=True)
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        result = run_search(config, store, InlineExecutor(fake))
        hardware = preflight(config, store).hardware
    presets = [next(p for p in PRESET_NAMES if make_preset(p, SPEC) == c) for c in fake.candidates]
    # one executor slot: the submission order is the order of the fine-tunes; the families
    # that compute a frozen prefix last, one fine-tune of each at a time
    assert presets == ["full"] * 3 + ["bias-only"] * 3 + ["mcunetv3", "last"] * 3
    steps = [hardware(c).latency_s or 0.0 for c in fake.candidates]
    assert steps[:6] == sorted(steps[:6], reverse=True) and min(steps[:6]) > max(steps[6:])
    assert result.lr_calibration is not None  # the rates keep the families' order
    assert [r.family for r in result.lr_calibration.rates] == list(FAMILIES)
    assert longest_first({-1: 0.1, -2: 0.3, -3: 0.1, -4: 0.2}) == [-2, -4, -1, -3]
    family = {-1: "classifier", -2: "classifier", -3: "sparse", -4: "sparse", -5: "full"}
    step = {-1: 0.1, -2: 0.1, -3: 0.2, -4: 0.2, -5: 0.3}
    assert grid_order(family, step) == [-5, -3, -4, -1, -2]  # longest first
    assert grid_order(family, step, ("classifier", "sparse")) == [-5, -3, -1, -4, -2]


@pytest.mark.slow
def test_the_driver_chooses_rates_once_per_study_and_reuses_the_grid(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    tasks: list[FinetuneTask] = []

    def counting(task: FinetuneTask) -> EvaluationResult:
        tasks.append(task)
        return run_evaluation(task)

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = SearchConfig(
        checkpoint=str(tiny_checkpoint),
        study_name="lr",
        trials=4,  # the four baselines
        finetune=FinetuneConfig(epochs=1, batch_size=32),
    )
    with open_store(url) as store:
        first = run_search(config, store, InlineExecutor(counting))
    grid = sum(len(f.grid) for f in FAMILIES.values())
    assert first.lr_fine_tunes == grid and first.lr_calibration is not None
    assert [r.family for r in first.lr_calibration.rates] == list(FAMILIES)
    # the reference (full) and the baselines last, bias-only and mcunetv3 were measured by the
    # grid itself; only tinytl was fine-tuned again
    assert first.counts.measured == 5
    assert [t.candidate for t in tasks[grid:]] == [make_preset("tinytl", SPEC).to_json()]
    with open_store(url) as store:
        stored = {
            e.candidate_key: e.details["lr"]
            for e in store.evaluations("lr", fidelity="measured", status="ok")
            if e.details
        }
    rates = {r.family: r.lr for r in first.lr_calibration.rates}
    for family in FAMILIES.values():
        assert stored[make_preset(family.preset, SPEC).key] == rates[family.name]
    assert stored[make_preset("tinytl", SPEC).key] == rates["sparse"]
    study = optuna.load_study(study_name="lr", storage=url)
    assert StudyRates.from_json(study.user_attrs["lr_calibration"]) == first.lr_calibration

    tasks.clear()  # a later run reuses the stored rates: no grid
    with open_store(url) as store:
        again = run_search(
            SearchConfig(**{**config.__dict__, "trials": 6}), store, InlineExecutor(counting)
        )
    assert again.lr_fine_tunes == 0 and again.lr_calibration == first.lr_calibration
    assert again.counts.measured == len(tasks) == 2
    for task in tasks:
        candidate = Candidate.from_json(task.candidate)
        assert task.finetune.lr == rates[family_of(candidate, SPEC)]


def test_a_preset_study_keeps_the_grids_fine_tune_of_its_preset(tmp_path: Path) -> None:
    """In a study of one preset, the preset on the default sub-network is its first trial:
    the grid's fine-tune of it at the chosen rate is that trial's measurement, not thrown
    away."""
    evaluate = FakeEvaluator()
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = search_config(
        tmp_path / "weights.pt", preset="mcunetv3", reference=True, tune_lr=True, trials=1
    )
    (tmp_path / "weights.pt").write_bytes(b"weights")
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(evaluate))
        measured = {e.candidate_key for e in store.evaluations("s", fidelity="measured")}
    grid = len(FAMILIES["sparse"].grid) + len(FAMILIES["full"].grid)
    assert len(evaluate.candidates) == grid == result.lr_fine_tunes  # nothing fine-tuned twice
    assert measured == {make_preset("mcunetv3", SPEC).key, make_preset("full", SPEC).key}
    assert make_preset("mcunetv3", SPEC).key in {p.candidate_key for p in result.front}


@pytest.mark.parametrize("limit", ["time", "epochs"])
def test_a_run_out_of_budget_after_the_grid_still_records_what_the_grid_measured(
    tmp_path: Path, limit: str
) -> None:
    """The grid's fine-tunes of the reference and of the baselines are their measurements; a
    time or epoch budget spent by the grid does not throw them away (tinytl, which the grid
    did not fine-tune, waits for a later run)."""

    class Timed(FakeEvaluator):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            result = super().__call__(task)
            return result.replace(details={"train_epochs": float(task.finetune.epochs)})

    evaluate = Timed()
    (tmp_path / "weights.pt").write_bytes(b"weights")
    budget = {"time_budget_s": 1e-3} if limit == "time" else {"epoch_budget": 2}
    config = search_config(
        tmp_path / "weights.pt", reference=True, tune_lr=True, trials=10, **budget
    )
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(evaluate))
        measured = {e.candidate_key for e in store.evaluations("s", fidelity="measured")}
    grid = sum(len(f.grid) for f in FAMILIES.values())
    assert len(evaluate.candidates) == grid  # nothing beyond the grid was fine-tuned
    presets = ("full", "last", "bias-only", "mcunetv3")
    assert measured == {make_preset(name, SPEC).key for name in presets}
    assert result.counts.measured == 4
    assert result.stopped_by == limit  # what the CLI tells the user


def test_a_large_training_split_chooses_rates_on_a_subset_and_measures_presets_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond GRID_TRAIN_IMAGES training images the grid trains on GRID_SUBSET_IMAGES of them
    (a stratified share); its fine-tunes then choose rates only, and the preset is measured
    on every training image."""
    import tinytune.search.run.lr_grid as lr_module

    monkeypatch.setattr(lr_module, "GRID_TRAIN_IMAGES", 500)
    monkeypatch.setattr(lr_module, "GRID_SUBSET_IMAGES", 200)
    tasks: list[FinetuneTask] = []
    evaluate = FakeEvaluator()

    def recording(task: FinetuneTask) -> EvaluationResult:
        tasks.append(task)
        return evaluate(task)

    (tmp_path / "weights.pt").write_bytes(b"weights")
    config = search_config(
        tmp_path / "weights.pt", preset="mcunetv3", reference=True, tune_lr=True, trials=1
    )
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        train_images = preflight(config, store).train_images
        result = run_search(config, store, InlineExecutor(recording))
    assert train_images > 500
    grid = len(FAMILIES["sparse"].grid) + len(FAMILIES["full"].grid)
    assert result.lr_fine_tunes == grid
    fraction = lr_module.grid_fraction(train_images)
    assert fraction == 200 / train_images
    assert [t.train_fraction for t in tasks[:grid]] == [fraction] * grid
    # the reference and the preset, measured on every training image
    assert [t.train_fraction for t in tasks[grid:]] == [1.0, 1.0]
    measured = {Candidate.from_json(t.candidate) for t in tasks[grid:]}
    assert measured == {make_preset("mcunetv3", SPEC), make_preset("full", SPEC)}
    assert result.lr_calibration is not None
    assert result.lr_calibration.train_fraction == fraction
    study = optuna.load_study(study_name="s", storage=url)
    assert StudyRates.from_json(study.user_attrs["lr_calibration"]) == result.lr_calibration
    assert lr_module.grid_fraction(500) == lr_module.grid_fraction(0) == 1.0
