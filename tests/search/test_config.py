"""What a study stores of its search (``StudySpace``): written from a ``SearchConfig``, read back
typed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tinytune.evaluators import FinetuneConfig, HardwareConfig
from tinytune.search import SearchConfig
from tinytune.search.study.study_space import FinetuneSettings, StudySpace


def _configs(tmp_path: Path) -> list[SearchConfig]:
    weights = tmp_path / "weights.pt"
    weights.write_bytes(b"supernet weights")
    return [
        SearchConfig(checkpoint=""),
        SearchConfig(
            checkpoint=str(weights),
            supernet="ofa-mbv3-w0.35",
            dataset="procedural",
            data_seed=3,
            preset="tinytl",
            device="rpi4",
            engine="published",
            tune_lr=False,
            repeats=3,
            finetune=FinetuneConfig(epochs=2, batch_size=16, lr=0.05),
            hardware=HardwareConfig(precision="fp32"),
        ),
    ]


def test_a_space_round_trips_through_what_the_study_stores(tmp_path: Path) -> None:
    for config in _configs(tmp_path):
        space = StudySpace.from_config(config)
        attrs = space.to_attrs()
        assert json.loads(json.dumps(attrs)) == attrs  # a JSON user attribute of Optuna's
        assert StudySpace.from_attrs(attrs) == space
    default, other = (StudySpace.from_config(c) for c in _configs(tmp_path))
    assert default.finetune == FinetuneSettings(epochs=8, batch_size=32, lr=None, repeats=None)
    assert default.to_attrs()["finetune"] == {
        "epochs": 8,
        "lr": "per family",
        "batch_size": 32,
        "weight_decay": 0.0,
        "augment": "none",
        "repeats": "auto",
    }
    assert default.weights is None  # no checkpoint file
    assert other.finetune == FinetuneSettings(epochs=2, batch_size=16, lr=0.05, repeats=3)
    assert other.weights == hashlib.sha256(b"supernet weights").hexdigest()
    assert (other.device, other.engine, other.precision, other.preset) == (
        "rpi4",
        "published",
        "fp32",
        "tinytl",
    )


def test_no_stored_space_reads_as_the_defaults_of_a_search() -> None:
    from tinytune.options import DEFAULT_DATASET, DEFAULT_DEVICE

    for attrs in (None, {}):
        space = StudySpace.from_attrs(attrs)
        assert space.supernet is None
        assert (space.device, space.dataset, space.data_seed) == (
            DEFAULT_DEVICE,
            DEFAULT_DATASET,
            0,
        )
        assert (space.precision, space.batch_size) == ("int8", 1)
    assert StudySpace.from_attrs({"supernet": "x", "engine": None}).engine is None


def test_a_key_the_stored_space_lacks_differs_from_every_value_asked_for() -> None:
    from tinytune.search.study.space_checks import space_difference

    requested = StudySpace.from_config(SearchConfig(checkpoint="", engine="bundle")).to_attrs()
    lacking = {k: v for k, v in requested.items() if k not in ("engine", "update", "device")}
    assert space_difference(lacking, requested) == {
        "engine": (None, "bundle"),
        "update": (None, "fused"),
        "device": (None, "stm32f746"),
    }
    # weights stored as None (no checkpoint file) are recorded, and compared
    assert space_difference(
        {**requested, "weights": None}, {**requested, "weights": "ab" * 32}
    ) == {"weights": (None, "abababababab…")}
    assert space_difference(requested, requested) == {}
    stored = {**requested, "finetune": {**requested["finetune"], "epochs": 3}}
    assert space_difference(stored, requested) == {"finetune": {"epochs": (3, 8)}}
    unset = {**requested, "finetune": {k: v for k, v in requested["finetune"].items()
                                       if k != "weight_decay"}}  # fmt: skip
    assert space_difference(unset, requested) == {"finetune": {"weight_decay": (None, 0.0)}}
    # a study stored before --augment existed trained without it: the same study as none
    before = {**requested, "finetune": {k: v for k, v in requested["finetune"].items()
                                        if k != "augment"}}  # fmt: skip
    assert space_difference(before, requested) == {}
    assert StudySpace.from_attrs(before) == StudySpace.from_attrs(requested)
    cropped = {**requested, "finetune": {**requested["finetune"], "augment": "crop"}}
    assert space_difference(before, cropped) == {"finetune": {"augment": ("none", "crop")}}


def test_a_stored_option_is_part_of_the_study(tmp_path: Path) -> None:
    """An option declared ``stored`` in the options' declaration is in the study's space by
    that alone: another value is another study."""
    from tinytune.options import resolve
    from tinytune.search import SearchConfig
    from tinytune.search.study.space_checks import space_difference

    def config(**given: object) -> SearchConfig:
        return SearchConfig.from_options(
            resolve(given), checkpoint=str(tmp_path / "none.pt"), n_classes=10
        )

    stored = StudySpace.from_config(config()).to_attrs()
    assert StudySpace.from_attrs(stored).finetune == StudySpace.from_config(config()).finetune
    assert "weight_decay" in stored["finetune"]
    decayed = StudySpace.from_config(config(weight_decay=0.01)).to_attrs()
    assert space_difference(stored, decayed) == {"finetune": {"weight_decay": (0.0, 0.01)}}
    assert config(weight_decay=0.01).finetune.weight_decay == 0.01
