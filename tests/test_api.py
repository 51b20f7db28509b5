"""The front door (``tinytune.api``) beyond the README's example."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_devices_reads_no_database_that_does_not_exist(tmp_path: Path) -> None:
    import tinytune
    from tinytune.hwmodels import device_names

    missing = tmp_path / "none.db"
    profiles = tinytune.devices(f"sqlite:///{missing}")
    assert [p.name for p in profiles] == device_names()
    assert not missing.exists()
    with pytest.raises(tinytune.TinyTuneError, match="cannot parse database URL"):
        tinytune.devices("postgresql+psycopg://u:pw@:::bad")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"preset": "everything"}, "unknown preset 'everything'"),
        ({"precision": "int4"}, "unknown precision 'int4'; allowed: fp32, int8"),
        ({"sampler": "grid"}, "unknown sampler 'grid'"),
        ({"engine": "tflite"}, "unknown engine 'tflite'"),
        ({"workers": 0}, "--workers must be >= 1"),
        ({"sram_budget": "12parsecs"}, "is not a size"),
        ({"dataset": "cifar"}, "unknown data set"),
        ({"trials": "3"}, "--trials must be an integer, got '3'"),
        ({"trials": 2.5}, "--trials must be an integer, got 2.5"),
        ({"epochs": 2.5}, "--epochs must be an integer, got 2.5"),
        ({"batch_size": None}, "--batch-size must be an integer, got None"),
        ({"lr": "0.1"}, "--lr must be a number, got '0.1'"),
        ({"lr": True}, "--lr must be a number, got True"),
        ({"workers": "2"}, "--workers must be an integer"),
        ({"max_retries": None}, "--max-retries must be an integer"),
        ({"repeats": 1.5}, "--repeats must be an integer"),
        ({"proposals": 2.0}, "--proposals must be an integer"),
        ({"pretrain_steps": 1.5}, "--pretrain-steps must be an integer"),
        ({"screen_fraction": "0.5"}, "--screen-fraction must be a number"),
        ({"sram_budget": [1]}, "--sram-budget must be a number, got \\[1\\]"),
        ({"latency_budget": float("nan")}, "--latency-budget must be a number, got nan"),
        ({"epoch_budget": float("nan")}, "--epoch-budget must be a number, got nan"),
        ({"seed": "1"}, "--seed must be an integer from 0 to 4294967295, got '1'"),
        ({"study": None}, "--study must be a name of 1 to 512 characters"),
        ({"weights": 5}, "--weights must be a path, got 5"),
        ({"weights": " "}, "--weights must be a path, got ' '"),
        ({"supernet": None}, "unknown supernet None"),
    ],
)
def test_bad_arguments_raise_before_any_work(tmp_path: Path, kwargs: dict, message: str) -> None:
    import tinytune

    db = tmp_path / "t.db"
    with pytest.raises(tinytune.TinyTuneError, match=message):
        tinytune.optimize(storage=f"sqlite:///{db}", inline=True, **kwargs)
    assert not db.exists()  # nothing was opened, let alone stored


@pytest.mark.parametrize(
    ("target", "kwargs", "message"),
    [
        (
            None,
            {},
            "the target must be a front point, a trial number or a candidate key, got None",
        ),
        (3.5, {}, "the target must be a front point, a trial number or a candidate key"),
        (True, {}, "the target must be a front point"),
        (0, {"out": None}, "out must be a path, got None"),
        (0, {"out": 5}, "out must be a path, got 5"),
        (0, {"weights": 5}, "--weights must be a path, got 5"),
        (0, {"lr": "x"}, "--lr must lie in \\(0, 10\\), got 'x'"),
        (0, {"lr": True}, "--lr must lie in \\(0, 10\\), got True"),
        (0, {"seed": 1.5}, "--seed must be an integer from 0 to 4294967295, got 1.5"),
    ],
)
def test_bad_export_arguments_raise_before_any_work(
    tmp_path: Path, target: object, kwargs: dict, message: str
) -> None:
    import tinytune

    db, out = tmp_path / "t.db", tmp_path / "bundle"
    with pytest.raises(tinytune.TinyTuneError, match=message):
        tinytune.export_bundle(
            target,  # type: ignore[arg-type]
            **{"out": out, "storage": f"sqlite:///{db}", **kwargs},
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_candidate_is_looked_up_by_a_trial_number_or_a_key_only() -> None:
    from tinytune.errors import StorageError
    from tinytune.studies import find_candidate

    for bad in (None, 3.5, False):
        with pytest.raises(StorageError, match="by a trial number or a stored key, got"):
            find_candidate(None, study=None, target=bad)  # type: ignore[arg-type]


def test_a_study_of_another_space_is_refused_before_any_pre_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Continuing a study with another supernet is refused before its weights are pre-trained
    (minutes); so is ``resume`` of a study that does not exist."""
    import tinytune
    import tinytune.checkpoints
    from tinytune.db import open_store
    from tinytune.evaluators import FinetuneConfig
    from tinytune.search import InlineExecutor, SearchConfig, run_search
    from tinytune.spaces import Candidate

    def made_up(task: dict) -> dict:
        acc = 0.3 + 0.01 * Candidate.from_json(task["candidate"]).update.bias_last_k
        return {"status": "ok", "accuracy": acc, "val_accuracy": acc, "wall_time_s": 0.0}

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = SearchConfig(
        tune_lr=False, checkpoint=str(ckpt), study_name="s", trials=2, finetune=FinetuneConfig()
    )
    with open_store(url) as store:
        run_search(config, store, InlineExecutor(made_up))

    def no_pre_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("pre-trained before the study's space was checked")

    monkeypatch.setattr(tinytune.checkpoints, "ensure_checkpoint", no_pre_training)
    with pytest.raises(AssertionError, match="pre-trained before"):  # the same space goes on
        tinytune.optimize("digits", study="s", lr=0.2, trials=3, storage=url)
    with pytest.raises(tinytune.TinyTuneError, match="study 's' exists with another search spa"):
        tinytune.optimize("digits", study="s", supernet="ofa-mbv3-w0.35", storage=url)
    with pytest.raises(tinytune.TinyTuneError, match="no study 'other' to resume"):
        tinytune.optimize("digits", study="other", resume=True, storage=url)
    new = tmp_path / "new.sqlite"
    with pytest.raises(tinytune.TinyTuneError, match="no study 'tinytune' to resume: the data"):
        tinytune.optimize("digits", resume=True, storage=f"sqlite:///{new}")
    assert not new.exists()
