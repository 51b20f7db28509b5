"""The pre-trained checkpoint shipped inside the package: intact, loadable, used by default."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tinytune import checkpoints
from tinytune.checkpoints import WEIGHTS_DIR, ensure_checkpoint, sha256_file, shipped_checkpoint
from tinytune.errors import ModelError
from tinytune.models import PretrainRecipe, load_supernet
from tinytune.models.supernet import DEFAULT_RECIPE, get_recipe
from tinytune.spaces import get_supernet

SPEC = get_supernet("ofa-proxyless-w0.35")
SHIPPED = WEIGHTS_DIR / f"{SPEC.name}.pt"
RECORD = WEIGHTS_DIR / f"{SPEC.name}.json"


def test_the_shipped_file_matches_its_record_and_loads() -> None:
    record = json.loads(RECORD.read_text())
    assert record["sha256"] == sha256_file(SHIPPED)
    assert record["recipe"] == get_recipe(record["recipe_name"]).to_dict()
    assert record["command"].startswith("tinytune pretrain ")
    assert SHIPPED.stat().st_size < 10 * 2**20  # small enough to live in git
    net = load_supernet(SPEC, SHIPPED)
    assert net.classifier.linear.out_features == record["recipe"]["source_classes"]
    assert {str(p.dtype) for p in net.parameters()} == {"torch.float32"}


def test_the_default_checkpoint_is_the_shipped_one_without_pretraining(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path))

    def no_pretraining(*args: object, **kwargs: object) -> None:
        raise AssertionError("pre-trained although a checkpoint ships")

    monkeypatch.setattr(checkpoints, "pretrain_into", no_pretraining)
    assert ensure_checkpoint(SPEC) == SHIPPED
    assert ensure_checkpoint(SPEC, get_recipe("glyphs-gpu")) == SHIPPED
    assert not any(tmp_path.iterdir())


def test_other_supernets_and_recipes_are_not_shipped() -> None:
    assert shipped_checkpoint(get_supernet("ofa-proxyless-w0.5")) is None
    assert shipped_checkpoint(SPEC, PretrainRecipe(steps=2)) is None
    assert shipped_checkpoint(SPEC, get_recipe("formula-cpu")) is None
    assert shipped_checkpoint(SPEC, get_recipe(DEFAULT_RECIPE)) is None  # quick: cached


def test_a_supernet_without_a_shipped_checkpoint_is_pretrained_by_the_default_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path))
    asked: list[PretrainRecipe] = []

    def record(spec: object, recipe: PretrainRecipe, path: Path, **kwargs: object) -> None:
        asked.append(recipe)

    monkeypatch.setattr(checkpoints, "pretrain_into", record)
    ensure_checkpoint(get_supernet("ofa-proxyless-w0.5"))
    ensure_checkpoint(SPEC, PretrainRecipe(steps=2))
    assert asked == [get_recipe(DEFAULT_RECIPE), PretrainRecipe(steps=2)]


def test_a_damaged_shipped_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(RECORD, tmp_path / RECORD.name)
    data = bytearray(SHIPPED.read_bytes())
    data[-100] ^= 0xFF
    (tmp_path / SHIPPED.name).write_bytes(bytes(data))
    monkeypatch.setattr(checkpoints, "WEIGHTS_DIR", tmp_path)
    with pytest.raises(ModelError, match="damaged"):
        ensure_checkpoint(SPEC)
