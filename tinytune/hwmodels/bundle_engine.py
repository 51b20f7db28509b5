"""Built-in profiles of the ``bundle`` engine: the step of the C that ``tinytune export`` writes.

Both are fits of :func:`tinytune.hwmodels.fitting.fit_latency` on the bundles' own profilers
(``platform/profile_main.c``: every kernel call timed), over bundles of candidates drawn at
random from the joint space, a quarter of them held out; ``bench/bundle_profiles.py`` writes
them from the measurement files of ``python3 -m bench.m7_instructions --sample`` and
``bench/bundle_host.py`` (commands and errors in ``docs/bench/latency.md``):

* ``data/bundle-cortex-m7.json``: instructions per step counted exactly under QEMU
  (``qemu-system-arm -M mps2-an500 -icount shift=0,sleep=off``, ``arm-none-eabi-gcc -O2
  -mcpu=cortex-m7``), as seconds at the cycles per instruction the profiler states in the
  file (``TT_CYCLES_PER_INSTRUCTION``, 1.0; :func:`cpi_note`) and the STM32F746's 216 MHz.
  Every Cortex-M7 device gets it at its own clock.
* ``data/bundle-cortex-m4.json``: the same on the Cortex-M4F (``-M mps2-an386``,
  ``-mcpu=cortex-m4``) for bundles of the nRF52840, at its 64 MHz.
* ``data/bundle-cortex-m0plus.json``: the same on the Cortex-M0+ (``-mcpu=cortex-m0plus``,
  an Armv6-M image on QEMU's Cortex-M3 board ``-M mps2-an385``, which runs the same
  instructions) for bundles of the RP2040, at its 133 MHz.
* ``data/bundle-rv32imc.json``: the same on RV32IMC (``riscv64-unknown-elf-gcc -O2
  -march=rv32imc``, ``qemu-system-riscv32 -M virt -icount shift=0``, the ``instret`` counter)
  for bundles of the ESP32-C3, at its 160 MHz.
* ``data/bundle-host.json``: the steps timed on the development machine (``gcc -O3``,
  ``clock_gettime``), like ``data/host.json`` for PyTorch; calibrate on your own machine for
  predictions that mean something there.

A board's own measurements (``make profile-cortex-m7`` or ``profile-cortex-m4`` flashed, its
DWT cycle counts fed to ``tinytune calibrate``; the RP2040's and the ESP32-C3's counters as the
bundle's README says) replace the assumed rate.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from importlib import resources

from tinytune.hwmodels.builtin_devices import builtin_boards, builtin_profiles
from tinytune.hwmodels.latency import LatencyCoefficients
from tinytune.hwmodels.profile import CalibrationPoint, DeviceProfile

__all__ = ["bundle_devices", "bundle_profile", "cpi_note", "cycles_per_instruction"]


def cpi_note(cycles_per_instruction: float, core: str = "Cortex-M7") -> str:
    """What a microcontroller's profile assumes to turn QEMU's instruction counts into time."""
    board = "its DWT cycle counts (the bundle's `make {image}` image flashed, then `tinytune "
    board += "calibrate`)"
    if core == "Cortex-M0+":
        why = (
            "the Cortex-M0+ issues one instruction a cycle at most; its loads and stores take 2 "
            "cycles, taken branches 2, the RP2040's 32-bit multiply 1 (Cortex-M0+ Technical "
            "Reference Manual, ARM DDI 0484, instruction timings), and code runs from external "
            "flash through a cache"
        )
        board = (
            "its timer's times (the profiler in a Pico SDK program with -DTT_RP2040_TIMER, as "
            "the bundle's README says, then `tinytune calibrate`)"
        )
    elif core == "RV32IMC":
        why = (
            "the ESP32-C3's core has a four-stage pipeline (ESP32-C3 datasheet; Espressif "
            "publishes no instruction timings) and loses cycles to taken branches, divisions "
            "and misses of the cache in front of its external flash"
        )
        board = (
            "its cycle counts (the profiler in an ESP-IDF or Arduino program with "
            "-DTT_ESP32C3_CYCLES, as the bundle's README says, then `tinytune calibrate`)"
        )
    elif core.startswith("Cortex-M4"):
        why = (
            "the Cortex-M4 issues at most one instruction a cycle; its loads take 2 cycles (1 "
            "when pipelined), taken branches 2 to 4, multiply-accumulates 1 (Cortex-M4 "
            "Technical Reference Manual, ARM DDI 0439, instruction timings), and flash wait "
            "states cost more"
        )
        board = board.format(image="profile-cortex-m4")
    else:
        why = (
            "the Cortex-M7 issues up to two instructions a cycle (dual issue; instruction pairs "
            "measured on an STM32H730 at quinapalus.com/cm7cycles.html), and loses cycles to "
            "taken branches, flash wait states and cache misses"
        )
        board = board.format(image="profile-cortex-m7")
    return (
        f"QEMU counts instructions, not cycles. They become time at {cycles_per_instruction:g} "
        f"cycle per instruction, an assumption: {why}, which QEMU does not model. No published "
        f"figure gives the cycles per instruction of these kernels; a board's measurements, "
        f"{board}, replace this rate."
    )


# the built-in fit of each Cortex-M core the bundle engine has one for
_CORE_FILES = {
    "Cortex-M7": "bundle-cortex-m7.json",
    "Cortex-M4F": "bundle-cortex-m4.json",
    "Cortex-M0+": "bundle-cortex-m0plus.json",
    "RV32IMC": "bundle-rv32imc.json",
}


def _shipped(name: str) -> dict:
    """The fitted profile and the fit's summary that ``bench/bundle_profiles.py`` wrote."""
    text = resources.files("tinytune.hwmodels").joinpath(f"data/{name}").read_text()
    return json.loads(text)


def _carried(profile: DeviceProfile, device: DeviceProfile) -> str:
    """Where ``device``'s profile came from: ``profile``'s source, and, where it was measured
    with another board's bundles, why it holds for this one."""
    boards = {p.board for p in profile.calibration} - {device.name}
    if not boards:
        return profile.source
    return (
        f"{profile.source}; used for {device.name} as well: under QEMU a step's time is its "
        f"instruction count, which the {device.core} code of a bundle has whatever the board "
        f"({', '.join(sorted(boards))} was the one measured), taken at {device.name}'s clock"
    )


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
        source=_carried(profile, device),
        notes=f"{profile.notes} {note}"
        + (
            f" Fitted at {profile.clock_hz / 1e6:g} MHz, here at {device.clock_hz / 1e6:g} MHz."
            if ratio != 1.0
            else ""
        ),
    )


def cycles_per_instruction(core: str) -> float:
    """The cycles per instruction that the built-in bundle profile of ``core`` (a key of
    the shipped fits: Cortex-M7, Cortex-M4F, Cortex-M0+, RV32IMC) turns QEMU's counts into
    time with (:func:`cpi_note`)."""
    return float(_shipped(_CORE_FILES[core])["fit"]["machine"]["cycles_per_instruction"])


def bundle_devices() -> list[str]:
    """The devices with a built-in profile of the bundle engine (no file is read)."""
    devices = builtin_profiles() | builtin_boards()
    return [*(p.name for p in devices.values() if p.core in _CORE_FILES), "host"]


@cache
def bundle_profile(name: str) -> DeviceProfile:
    """The ``bundle`` engine's built-in profile of device ``name`` (one of
    :func:`bundle_devices`), read from the package's data on first use."""
    from tinytune.hwmodels.host import host_profile

    if name != "host":
        boards = builtin_boards()
        device = (builtin_profiles() | boards)[name]
        fitted = _shipped(_CORE_FILES[device.core])
        note = cpi_note(fitted["fit"]["machine"]["cycles_per_instruction"], device.core)
        if name in boards:  # its facts come from the datasheet, its profile is this one
            note += f" {device.notes} The device: {device.source}."
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
        source=f"{host.source}: the development machine's; the core shown is this machine's, "
        "whose own profile `tinytune profile` and `tinytune calibrate` fit",
    )
