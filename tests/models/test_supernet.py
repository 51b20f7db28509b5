"""Supernet checkpoints: the cache path, atomic saves, safe loading and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tinytune.data import SourceTask
from tinytune.errors import ModelError
from tinytune.models import (
    PretrainRecipe,
    cache_dir,
    checkpoint_path,
    load_supernet,
    pretrain_supernet,
    save_supernet,
)
from tinytune.spaces import get_supernet

SPEC = get_supernet("ofa-proxyless-w0.35")


def test_cache_dir_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TINYTUNE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "tinytune"
    recipe = PretrainRecipe(steps=7)
    assert checkpoint_path(SPEC, recipe) != checkpoint_path(SPEC, PretrainRecipe(steps=8))


def test_pretrain_save_load_round_trip(tmp_path: Path) -> None:
    recipe = PretrainRecipe(steps=1, batch_size=4, source_classes=8)
    net = pretrain_supernet(SPEC, recipe, SourceTask(8).batch)
    path = tmp_path / "s.pt"
    save_supernet(net, SPEC, recipe, path)
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt"]  # no temporary file left
    back = load_supernet(SPEC, path)
    for (k, a), (k2, b) in zip(net.state_dict().items(), back.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(a, b)
    again = pretrain_supernet(SPEC, recipe, SourceTask(8).batch)
    assert all(
        torch.equal(a, b)
        for a, b in zip(net.state_dict().values(), again.state_dict().values(), strict=True)
    )  # seeded: the same recipe gives the same weights


def test_bad_checkpoints_give_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        load_supernet(SPEC, tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match="cannot read") as info:
        load_supernet(SPEC, junk)
    assert "\n" not in str(info.value)
    other = tmp_path / "other.pt"
    torch.save({"format": "something else"}, other)
    with pytest.raises(ModelError, match="not a tinytune supernet checkpoint"):
        load_supernet(SPEC, other)


def test_published_supernet_needs_its_file(tmp_path: Path) -> None:
    spec = get_supernet("ofa_mbv3_d234_e346_k357_w1.0")
    with pytest.raises(ModelError, match=r"--weights FILE") as info:
        load_supernet(spec, tmp_path / "none")
    assert "ofa_nets/ofa_mbv3_d234_e346_k357_w1.0" in str(info.value)
    wrong = tmp_path / "wrong.pt"
    torch.save({"state_dict": {"x": torch.zeros(1)}}, wrong)
    with pytest.raises(ModelError, match="does not match"):
        load_supernet(spec, wrong)
    with pytest.raises(ModelError, match="published supernet"):
        pretrain_supernet(spec, PretrainRecipe(steps=1), SourceTask(8).batch)
