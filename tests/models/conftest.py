"""Fixtures of the model tests: one randomly initialised supernet per family, and seeded
sampling of candidates."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from torch import nn

from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import Candidate, family_supernets, get_supernet, suggest_candidate

SampleFn = Callable[[str, int, int, str | None], tuple[Candidate, ...]]


@pytest.fixture(scope="session")
def supernets() -> dict[str, nn.Module]:
    """Supernet name → a randomly initialised ``ofa`` supernet (40 source classes), one of
    every family, and a randomly initialised EfficientNet-Lite0 (a fixed network that pads
    "SAME")."""
    specs = (*family_supernets(0.35), get_supernet("efficientnet-lite0"))
    return {spec.name: build_ofa_supernet(spec, 40, seed=0) for spec in specs}


@functools.cache
def _sample(name: str, n: int, seed: int, preset: str | None) -> tuple[Candidate, ...]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    spec = get_supernet(name)
    return tuple(suggest_candidate(study.ask(), spec, preset) for _ in range(n))


@pytest.fixture(scope="session")
def sample() -> SampleFn:
    """``sample(name, n, seed, preset)``: ``n`` candidates of supernet ``name`` drawn by Optuna's
    seeded random sampler through :func:`~tinytune.spaces.suggest_candidate` (``preset=None``
    samples the scheme too; ``"joint"`` samples lite residuals and the update scheme freely)."""
    return _sample
