"""Fixtures of the bundle tests: the tiny supernet checkpoint at module scope, and the
``export`` command on the command line's app."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tinytune.bundle import Bundle


@pytest.fixture(scope="session")
def checkpoint(tiny_cache: Path) -> Path:
    """The tiny pre-trained ofa-proxyless-w0.35 checkpoint of the shared cache (for fixtures
    wider than one test; ``tiny_checkpoint`` is per test)."""
    from tests.conftest import TINY_STEPS
    from tinytune.models import PretrainRecipe, checkpoint_path
    from tinytune.spaces import get_supernet

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TINYTUNE_CACHE", str(tiny_cache))
        path = checkpoint_path(
            get_supernet("ofa-proxyless-w0.35"), PretrainRecipe(steps=TINY_STEPS, batch_size=8)
        )
    assert path.is_file()
    return path


@pytest.fixture(scope="session")
def mbv3_checkpoint(tiny_cache: Path) -> Path:
    """A tiny pre-trained ofa-mbv3-w0.35 checkpoint (2 steps), made in the shared cache."""
    from tests.conftest import TINY_STEPS
    from tinytune.data import SourceTask
    from tinytune.models import PretrainRecipe, checkpoint_path, pretrain_supernet, save_supernet
    from tinytune.spaces import get_supernet

    spec = get_supernet("ofa-mbv3-w0.35")
    recipe = PretrainRecipe(steps=TINY_STEPS, batch_size=8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TINYTUNE_CACHE", str(tiny_cache))
        path = checkpoint_path(spec, recipe)
        if not path.is_file():
            net = pretrain_supernet(spec, recipe, SourceTask(recipe.source_classes).batch)
            save_supernet(net, spec, recipe, path)
    return path


@pytest.fixture(scope="session")
def sparse(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Bundle, Path]:
    """The bundle of the MCUNetV3-style preset on the smallest ProxylessNAS sub-network at
    32 px for the STM32F746 (built once: every target's and every layout's tests read it)."""
    from tests.bundle.support import build_preset

    out = tmp_path_factory.mktemp("bundles") / "mcunetv3"
    return build_preset("mcunetv3", checkpoint, out), out


@pytest.fixture(scope="session")
def host_outputs(sparse: tuple[Bundle, Path]) -> dict[str, str]:
    """What ``sparse``'s example prints on the host: ``plain``, and ``dump`` with -DTT_DUMP."""
    from tests.bundle.support import make

    _, folder = sparse
    return {
        "plain": make(folder, "run-host"),
        "dump": make(folder, "run-host", build="build-dump", defs="-DTT_DUMP"),
    }
