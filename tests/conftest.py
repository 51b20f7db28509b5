"""Shared fixtures: a private cache with a tiny pre-trained supernet, and Ray settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TINY_STEPS = 2


@pytest.fixture(autouse=True)
def _one_torch_thread() -> object:
    """One intra-op thread per test process: on a shared 2-core machine, two torch threads
    competing with other work slow small convolutions down by orders of magnitude."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding a 2-step pre-trained ofa-proxyless-w0.35 checkpoint."""
    from tinytune.data import ProceduralTask
    from tinytune.models import PretrainRecipe, checkpoint_path, pretrain_supernet, save_supernet
    from tinytune.spaces import get_supernet

    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("TINYTUNE_CACHE")
    os.environ["TINYTUNE_CACHE"] = str(cache)
    try:
        spec = get_supernet("ofa-proxyless-w0.35")
        recipe = PretrainRecipe(steps=TINY_STEPS, batch_size=8)
        net = pretrain_supernet(spec, recipe, ProceduralTask(recipe.source_classes).batch)
        save_supernet(net, spec, recipe, checkpoint_path(spec, recipe))
    finally:
        if old is None:
            os.environ.pop("TINYTUNE_CACHE", None)
        else:
            os.environ["TINYTUNE_CACHE"] = old
    return cache


@pytest.fixture
def use_tiny_cache(tiny_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TINYTUNE_CACHE", str(tiny_cache))
    return tiny_cache


@pytest.fixture
def tiny_checkpoint(use_tiny_cache: Path) -> Path:
    """The path of the tiny checkpoint (resolved inside the private cache)."""
    from tinytune.models import PretrainRecipe, checkpoint_path
    from tinytune.spaces import get_supernet

    recipe = PretrainRecipe(steps=TINY_STEPS, batch_size=8)
    return checkpoint_path(get_supernet("ofa-proxyless-w0.35"), recipe)
