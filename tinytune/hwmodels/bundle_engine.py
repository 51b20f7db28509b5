"""Built-in profiles of the ``bundle`` engine: the step of the C that ``tinytune export`` writes.

Both are fits of :func:`tinytune.hwmodels.fitting.calibrate` on the bundles' own profilers
(``platform/profile_main.c``: every kernel call timed), over bundles of candidates drawn at
random from the joint space, a quarter of them held out; ``bench/bundle_profiles.py`` writes
them from the measurement files of ``bench/m7_instructions.py --sample`` and
``bench/bundle_host.py`` (commands and errors in ``docs/bench/latency.md``):

* ``data/bundle-cortex-m7.json``: instructions per step counted exactly under QEMU
  (``qemu-system-arm -M mps2-an500 -icount shift=0,sleep=off``, ``arm-none-eabi-gcc -O2
  -mcpu=cortex-m7``), as seconds at the cycles per instruction the profiler states in the
  file (``TT_CYCLES_PER_INSTRUCTION``, 1.0; :func:`cpi_note`) and the STM32F746's 216 MHz.
  Every Cortex-M7 device gets it at its own clock.
* ``data/bundle-cortex-m4.json``: the same on the Cortex-M4F (``-M mps2-an386``,
  ``-mcpu=cortex-m4``) for bundles of the nRF52840, at its 64 MHz.
* ``data/bundle-host.json``: the steps timed on the development machine (``gcc -O3``,
  ``clock_gettime``), like ``data/host.json`` for PyTorch; calibrate on your own machine for
  predictions that mean something there.

A board's own measurements (``make profile-cortex-m7`` or ``profile-cortex-m4`` flashed, its
DWT cycle counts fed to ``tinytune calibrate``) replace the assumed rate.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from importlib import resources

from tinytune.hwmodels.devices import CalibrationPoint, DeviceProfile, builtin_profiles
from tinytune.hwmodels.latency import LatencyCoefficients

__all__ = ["bundle_devices", "bundle_profile", "cpi_note"]


def cpi_note(cycles_per_instruction: float, core: str = "Cortex-M7") -> str:
    """What a Cortex-M profile assumes to turn QEMU's instruction counts into time."""
    if core.startswith("Cortex-M4"):
        why = (
            "the Cortex-M4 issues at most one instruction a cycle; its loads take 2 cycles (1 "
            "when pipelined), taken branches 2 to 4, multiply-accumulates 1 (Cortex-M4 "
            "Technical Reference Manual, ARM DDI 0439, instruction timings), and flash wait "
            "states cost more"
        )
        image = "profile-cortex-m4"
    else:
        why = (
            "the Cortex-M7 issues up to two instructions a cycle (dual issue; instruction pairs "
            "measured on an STM32H730 at quinapalus.com/cm7cycles.html), and loses cycles to "
            "taken branches, flash wait states and cache misses"
        )
        image = "profile-cortex-m7"
    return (
        f"QEMU counts instructions, not cycles. They become time at {cycles_per_instruction:g} "
        f"cycle per instruction, an assumption: {why}, which QEMU does not model. No published "
        "figure gives the cycles per instruction of these kernels; a board's DWT cycle counts "
        f"(the bundle's `make {image}` image, then `tinytune calibrate`) replace this rate."
    )


# the built-in fit of each Cortex-M core the bundle engine has one for
_CORE_FILES = {"Cortex-M7": "bundle-cortex-m7.json", "Cortex-M4F": "bundle-cortex-m4.json"}


def _shipped(name: str) -> dict:
    """The fitted profile and the fit's summary that ``bench/bundle_profiles.py`` wrote."""
    text = resources.files("tinytune.hwmodels").joinpath(f"data/{name}").read_text()
    return json.loads(text)


def _at_clock(profile: DeviceProfile, device: DeviceProfile, note: str) -> DeviceProfile:
    """``profile`` (fitted at its own clock) for ``device``: the same cycles at its clock."""
    ratio = profile.clock_hz / device.clock_hz
    values = {
        cls: {phase: tuple(v * ratio for v in coef) for phase, coef in phases.items()}
        for cls, phases in profile.coefficients.values.items()
    }
    points = tuple(
        CalibrationPoint(
            p.model,
            p.engine,
            p.board,
            p.measured_s * ratio,
            p.fitted_s * ratio,
            None if p.loo_predicted_s is None else p.loo_predicted_s * ratio,
        )
        for p in profile.calibration
    )
    return dataclasses.replace(
        device,
        engine="bundle",
        precision="int8",
        coefficients=LatencyCoefficients(values),
        calibration=points,
        loo_median_error=profile.loo_median_error,
        loo_within_10=profile.loo_within_10,
        source=profile.source,
        notes=f"{profile.notes} {note}"
        + (
            f" Fitted at {profile.clock_hz / 1e6:g} MHz, here at {device.clock_hz / 1e6:g} MHz."
            if ratio != 1.0
            else ""
        ),
    )


def bundle_devices() -> list[str]:
    """The devices with a built-in profile of the bundle engine (no file is read)."""
    return [*(p.name for p in builtin_profiles().values() if p.core in _CORE_FILES), "host"]


@cache
def bundle_profile(name: str) -> DeviceProfile:
    """The ``bundle`` engine's built-in profile of device ``name`` (one of
    :func:`bundle_devices`), read from the package's data on first use."""
    from tinytune.hwmodels.host import host_profile

    if name != "host":
        device = builtin_profiles()[name]
        fitted = _shipped(_CORE_FILES[device.core])
        note = cpi_note(fitted["fit"]["machine"]["cycles_per_instruction"], device.core)
        return _at_clock(DeviceProfile.from_dict(fitted["profile"]), device, note)
    host = DeviceProfile.from_dict(_shipped("bundle-host.json")["profile"])
    here = host_profile()
    return dataclasses.replace(
        host,
        description="this machine: the exported bundle's C step (int8, gcc -O3)",
        core=here.core,
        clock_hz=here.clock_hz,
        sram_bytes=here.sram_bytes,
        flash_bytes=here.flash_bytes,
        source=f"{host.source} (on the development machine, not this one)",
    )
