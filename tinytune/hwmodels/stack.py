"""The SRAM a bundle needs besides its arena: its static data and its stack, by the device's core.

A training step on a board takes three kinds of SRAM:

* the **arena** (:mod:`tinytune.hwmodels.memory`): activations, what backward keeps,
  gradients and the trained weights, laid out by the planner;
* **static data** beside it: the float32 logits and the gradients' exponents (the engine's
  workspace, :attr:`~tinytune.hwmodels.memory.MemoryReport.workspace_bytes`), the learning
  rate's two words (:data:`RATE_BYTES`) and, for a keyword model, its front-end's frame
  buffers;
* the **stack** of the deepest function a firmware calls (``tt_train_step``, ``tt_predict``,
  an input function): the kernels' buffers (a tile of paired inputs, a one-pass gradient's
  scratch: up to 4.6 KB on the Armv7E-M paths) and their chain of calls.

The stack is a bound from the compiler, per core (``data/stack.json``, written by
``python3 -m bench.bundle_stack --table``): every function's frame from
``gcc -fstack-usage``, its calls from ``-fcallgraph-info=su``, the C library's and the
compiler's run-time routines read off the linked image, and the deepest chain over the bundles
of every built-in family, as if each step called every kernel (the chain does not depend on the
network, only on which kernels a step calls). The tests build three bundles on every target and
hold the compiler's bound of each, and the stack painted under QEMU, to at most this figure.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

__all__ = ["CORE_TARGETS", "RATE_BYTES", "build_target", "stack_bytes", "stack_table"]

CORE_TARGETS = {
    "Cortex-M7": "cortex-m7",
    "Cortex-M4F": "cortex-m4",
    "Cortex-M0+": "cortex-m0plus",
    "RV32IMC": "rv32imc",
}
"""The bundle Makefile's target of each microcontroller core the device registry names."""

RATE_BYTES = 8
"""The bundle's static learning-rate state: its halvings (int32) and its scale (float32)."""


def build_target(core: str) -> str | None:
    """The bundle Makefile's target of a device's core: a Cortex-M or RV32IMC core's,
    ``aarch64`` for an Arm Cortex-A board's, None for the host."""
    if core in CORE_TARGETS:
        return CORE_TARGETS[core]
    return "aarch64" if core.startswith("Cortex-A") else None


@functools.cache
def stack_table() -> dict[str, Any]:
    """The table of ``data/stack.json``: per build target, its bound and how it was found."""
    text = resources.files("tinytune.hwmodels").joinpath("data/stack.json").read_text()
    return dict(json.loads(text))


def stack_bytes(core: str) -> int:
    """The most stack a bundle's function takes on a device of ``core``, in bytes; 0 for a core
    the table does not have (the development machine: its stack is not what a budget is)."""
    target = build_target(core)
    row = stack_table()["targets"].get(target) if target is not None else None
    return 0 if row is None else int(row["stack_bytes"])
