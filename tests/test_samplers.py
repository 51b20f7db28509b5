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
