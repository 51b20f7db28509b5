"""The sampler names: one home below the search, read by the front door without the search."""

from __future__ import annotations

import subprocess
import sys

import tinytune.api
from tinytune.samplers import DEFAULT_SAMPLER, SAMPLERS


def test_the_default_is_one_of_the_samplers_and_everyone_uses_it() -> None:
    from tinytune.search import SearchConfig
    from tinytune.search.config.search_config import SAMPLERS as CONFIG_SAMPLERS

    assert DEFAULT_SAMPLER in SAMPLERS
    assert tinytune.api.DEFAULT_SAMPLER == DEFAULT_SAMPLER
    assert CONFIG_SAMPLERS is SAMPLERS
    assert SearchConfig.__dataclass_fields__["sampler"].default == DEFAULT_SAMPLER


def test_the_front_door_reads_it_without_importing_the_search() -> None:
    code = (
        "import sys, tinytune.api, tinytune.cli.search; "
        "print(sorted(m for m in ('torch', 'optuna', 'tinytune.search') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_registered_sampler_is_one_entry_that_the_option_and_the_study_read() -> None:
    """Each entry of the registry is a choice of --sampler, in its help, and the sampler a
    study of it makes (seeded: the same seed draws the same first trial)."""
    import optuna

    from tinytune.options import option
    from tinytune.samplers import REGISTRY
    from tinytune.search import SearchConfig
    from tinytune.search.study.adapter import make_sampler

    sampler = option("sampler")
    assert tuple(REGISTRY) == SAMPLERS
    for name, entry in REGISTRY.items():
        assert sampler.parse(name) == name
        assert entry.help in str(sampler.help)
        made = make_sampler(SearchConfig(checkpoint="", sampler=name, seed=5))
        assert isinstance(made, optuna.samplers.BaseSampler), name
        draws = []
        for _ in range(2):
            study = optuna.create_study(sampler=entry.make(5))
            draws.append(study.ask().suggest_float("x", 0.0, 1.0))
        assert draws[0] == draws[1], name
