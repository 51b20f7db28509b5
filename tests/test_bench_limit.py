"""``bench/limit.py``: the reference is fine-tuned with the recipe options its searches ran
with, and no other of their options."""

from __future__ import annotations

import shlex

from bench.limit import _recipe


def test_the_reference_takes_the_searchs_recipe_options_and_no_others() -> None:
    options = shlex.split("--reproducible --augment crop-flip --sram-budget 200KB --epochs 16")
    assert _recipe(options) == {"augment": "crop-flip", "epochs": 16}
    assert _recipe([]) == {}
