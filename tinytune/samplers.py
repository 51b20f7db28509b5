"""The samplers a search can use, each one entry of :data:`REGISTRY` (its name, its help, how to
make it), and the one it uses when none is given. Registering a sampler is adding an entry: the
``--sampler`` choices, their help and the study's sampler all come from here.

The search's vocabulary, in a leaf module outside ``tinytune.search``: the front door and the
command line read the names at start-up, and importing any module of ``tinytune.search``
imports the whole search (torch, Optuna). Optuna is imported when a sampler is made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_SAMPLER",
    "EARLY_STARTUP_TRIALS",
    "REGISTRY",
    "SAMPLERS",
    "Sampler",
    "make_sampler",
    "samplers_help",
]

EARLY_STARTUP_TRIALS = 4
"""Random trials before the early samplers model the others: at a budget of about ten
fine-tunes, Optuna's default of 10 would be random search."""


@dataclass(frozen=True)
class Sampler:
    """A registered sampler.

    Attributes:
        name: the ``--sampler`` value.
        help: what it is, in a few words, for the option's help.
        make: Optuna's sampler, given the search's seed.
    """

    name: str
    help: str
    make: Callable[[int], Any]


def _random(seed: int) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _nsga2(seed: int) -> Any:
    import optuna

    return optuna.samplers.NSGAIISampler(seed=seed)


def _tpe(seed: int) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed)


def _tpe_early(seed: int) -> Any:
    # Optuna's TPE draws its first 10 trials at random, which at a budget of about ten
    # fine-tunes is random search; this one models from the 5th on, all parameters jointly
    # (multivariate), with ``group`` keeping the conditional parameters of each scheme family
    # (define-by-run) apart
    import optuna

    return optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=EARLY_STARTUP_TRIALS, multivariate=True, group=True
    )


def _gp(seed: int) -> Any:
    # Optuna's Gaussian-process sampler (log EHVI for several objectives) models the parameters
    # every trial has (the sub-network's and the scheme family); the conditional parameters of
    # a family, which only some trials have, are drawn at random, as Optuna does for any
    # parameter outside the intersection of the trials' spaces
    import optuna

    return optuna.samplers.GPSampler(
        seed=seed, n_startup_trials=EARLY_STARTUP_TRIALS, warn_independent_sampling=False
    )


REGISTRY: dict[str, Sampler] = {
    s.name: s
    for s in (
        Sampler("tpe", "tpe", _tpe),
        Sampler("tpe-early", "tpe-early (models from the 5th trial on)", _tpe_early),
        Sampler("gp", "gp (Gaussian process, from the 5th trial on)", _gp),
        Sampler("random", "random", _random),
        Sampler("nsga2", "nsga2", _nsga2),
    )
}
"""Every sampler a search can use, by name."""

SAMPLERS = tuple(REGISTRY)
"""The ``--sampler`` values: Optuna's samplers and tinytune's strategies over them."""

DEFAULT_SAMPLER = "tpe-early"
"""The sampler of ``tinytune search``, which proposes where no new mutant of the front fits
(``--mutate``) and learns from the mutants' results: of the samplers alone, the best median
hypervolume at equal compute in ``bench/search_efficiency.py``
(``docs/bench/archive/search.md``)."""


def make_sampler(name: str, seed: int) -> Any:
    """Optuna's sampler registered as ``name``, seeded."""
    return REGISTRY[name].make(seed)


def samplers_help() -> str:
    """The registered samplers for the option's help: ``tpe, tpe-early (…), … or nsga2``."""
    names = [s.help for s in REGISTRY.values()]
    return ", ".join(names[:-1]) + " or " + names[-1]
