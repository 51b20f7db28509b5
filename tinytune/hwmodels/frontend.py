"""What a keyword model's front-end costs on the device, beside its training step.

A bundle of an ``audio:`` study computes its input of every clip it learns from
(``tt_input_from_pcm16``: :mod:`tinytune.data.logmel` in C). That costs the device three
things the training step's plan does not hold, and a search counts them with it:

* **SRAM**: one frame's FFT, ``8 x fft`` bytes of static memory beside the arena
  (:attr:`~tinytune.data.logmel.LogMelSpec.scratch_bytes`);
* **flash**: its tables (window, twiddles, mel bands and weights) and the 255 ``int32``
  thresholds that map a feature to its int8 input;
* **time**: per clip, the instructions of its FFTs and of its per-sample work, as counted on each
  core under QEMU by ``python3 -m bench.frontend_cost`` and fitted, per core, on two units
  (:func:`frontend_units`), in ``data/frontend.json``; they become seconds at the cycles per
  instruction and the clock of the device's bundle profile, as the training step's do. A device
  of another core (the host's, a published or a PyTorch profile) has no figure of its time:
  :attr:`FrontendCost.seconds` is None there and the step's latency is the step's alone.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

import numpy as np

from tinytune.data.logmel import LogMelSpec
from tinytune.hwmodels.profile import DeviceProfile

__all__ = ["THRESHOLD_BYTES", "UNITS", "FrontendCost", "frontend_cost", "frontend_units"]

THRESHOLD_BYTES = 255 * 4
"""The ``int32`` thresholds that map a Q8 feature to one of the 256 int8 inputs."""

UNITS = ("butterflies", "logarithms")
"""What the front-end's time is fitted on, per clip: the FFTs' butterflies (``frames x fft / 2
x log2 fft``) and the bands' logarithms (``frames x bands``, eight 64-bit squarings each). A
frame's other work (its window, its power spectrum, its bands' weights) is nearly the same at
every front-end a search tries, as the FFT is, and the butterflies' rate holds it."""


def frontend_units(spec: LogMelSpec) -> np.ndarray:
    """The :data:`UNITS` of one clip by the front-end ``spec``."""
    butterflies = spec.frames * (spec.fft // 2) * (spec.fft.bit_length() - 1)
    return np.array([butterflies, spec.frames * spec.bands], np.float64)


@dataclass(frozen=True)
class FrontendCost:
    """One front-end on one device.

    Attributes:
        scratch_bytes: static SRAM beside the arena.
        flash_bytes: its tables and the input map's thresholds.
        seconds: one clip's input, predicted (None: no model of the device's core).
    """

    scratch_bytes: int
    flash_bytes: int
    seconds: float | None


@functools.cache
def _fits() -> dict[str, list[float]]:
    text = resources.files("tinytune.hwmodels").joinpath("data/frontend.json").read_text()
    return {core: fit["instructions_per_unit"] for core, fit in json.loads(text)["cores"].items()}


def frontend_cost(spec: LogMelSpec, device: DeviceProfile | None) -> FrontendCost:
    """What ``spec`` costs on ``device`` (its time only under a bundle profile of a core that
    ``data/frontend.json`` has a fit of)."""
    flash = spec.table_bytes + THRESHOLD_BYTES
    seconds = None
    if device is not None and device.engine == "bundle" and device.core in _fits():
        from tinytune.hwmodels.bundle_engine import cycles_per_instruction

        instructions = float(np.dot(_fits()[device.core], frontend_units(spec)))
        seconds = instructions * cycles_per_instruction(device.core) / device.clock_hz
    return FrontendCost(spec.scratch_bytes, flash, seconds)
