"""Instructions per training step of a bundle on a Cortex-M7, M4F or M0+ or on RV32IMC,
counted exactly by QEMU.

The bundle of one candidate (default: the ``mcunetv3`` preset on ``ofa-proxyless-w0.35`` at 32
px, as ``bench/bundle_step.py``) is profiled by its own profiler on the Cortex-M7 image of its
Makefile (``make run-profile-cortex-m7``: the MPS2-AN500 board, ``-O2``, the CMSDK timer read
around every kernel call). QEMU runs with ``-icount shift=0,sleep=off``: one executed
instruction is one nanosecond of the guest's clock, and the timer counts at 25 MHz, so
instructions = ticks × 40, exactly and the same on every run
(``../shared/reference/environment-notes.md``). QEMU counts instructions, not cycles (no
pipeline, caches or flash wait states): a measure of the kernels' work on the real instruction
set. The figure is the fastest of ``--steps`` steps (the counts of steps differ by a few
instructions with the data).

    python3 -m bench.m7_instructions [--preset mcunetv3] [--resolution 32] [--steps 2]
        [--kernels DIR ...]
    python3 -m bench.m7_instructions --sample 40 --seed 0 --out m7.json
    tinytune calibrate m7.json --device stm32f746 --held-out 0.25 --storage sqlite:///m7.db

``--sample N`` counts the bundles of N candidates drawn at random from the joint space of
``--supernet`` (default ``ofa-proxyless-w0.35``; those that fit the STM32F746's SRAM) and
writes them as a measurement file (``tinytune-latency/1``) for ``tinytune calibrate``, with
every kernel call's count: instructions as seconds at one instruction per cycle at 216 MHz.
That rate is an assumption (the Cortex-M7 can issue two instructions a cycle, flash wait
states and caches cost cycles); it scales every measurement alike, so the relative held-out
error of a fit does not depend on it.

``--kernels DIR`` replaces the bundle's ``kernels/`` sources with those of DIR (e.g. an older
copy of ``tinytune/lowering/csrc``) for a comparison; several are measured one after the other.

``--target cortex-m4`` does the same on the Cortex-M4F image (``make run-profile-cortex-m4``,
MPS2-AN386, ``-mcpu=cortex-m4``) of bundles for the nRF52840 (those that fit its 256 KB of
SRAM; instructions as seconds at 64 MHz)::

    python3 -m bench.m7_instructions --target cortex-m4 --sample 40 --seed 0 --out m4-s0.json

``--target cortex-m0plus`` counts the Armv6-M image (``make run-profile-cortex-m0plus``,
``-mcpu=cortex-m0plus`` on QEMU's Cortex-M3 board MPS2-AN385, which executes the same
instructions) of bundles for the RP2040 (264 KB of SRAM; 133 MHz), and ``--target rv32imc``
the RV32IMC image (``make run-profile-rv32imc``: ``qemu-system-riscv32 -M virt -icount
shift=0``, the ``instret`` counter read around every call) of bundles for the ESP32-C3 (400 KB;
160 MHz)::

    python3 -m bench.m7_instructions --target cortex-m0plus --sample 40 --seed 0 --out m0p-s0.json
    python3 -m bench.m7_instructions --target rv32imc --sample 40 --seed 0 --out rv32-s0.json
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.bundle_host import sampled_bundles
from bench.harness import DEFAULT_DEVICE, add_arguments

# target → the device of its bundles, and the tools it needs
TARGETS = {
    "cortex-m7": DEFAULT_DEVICE,  # the STM32F746, the search's default device
    "cortex-m4": "nrf52840",
    "cortex-m0plus": "rp2040",
    "rv32imc": "esp32c3",
}
TOOLS = {
    "rv32imc": ("riscv64-unknown-elf-gcc", "qemu-system-riscv32", "make"),
}
ARM_TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm", "make")


def profile(folder: Path, steps: int, target: str = "cortex-m7") -> Any:
    """The bundle in ``folder`` profiled under QEMU (``make run-profile-<target>``, exact
    instruction counts): its measurement file, loaded."""
    from tinytune.hwmodels.measurements import load_measurements

    subprocess.run(
        ["make", "-s", f"run-profile-{target}", f"PROFILE_STEPS={steps}"],
        cwd=folder, check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return load_measurements(folder / "build" / f"profile-{target}.json")


def instructions(seconds: float, machine: dict[str, Any]) -> int:
    """Seconds of the profiler's file back to the instructions QEMU counted."""
    return round(seconds * machine["clock_hz"] / machine["cycles_per_instruction"])


def count(folder: Path, steps: int, target: str = "cortex-m7") -> int:
    """Instructions of the fastest of ``steps`` training steps of the bundle in ``folder``."""
    measured = profile(folder, steps, target)
    return instructions(measured.measurements[0].train_step_s, measured.machine)


def sample(args: argparse.Namespace) -> int:
    """Count sampled candidates' bundles and write a measurement file."""
    from datetime import UTC, datetime

    from tinytune.hwmodels.measurements import MeasurementFile, save_measurements

    measurements, machine = [], {}
    device = TARGETS[args.target]
    with tempfile.TemporaryDirectory(prefix="tt-m7-") as tmp:
        bundles = sampled_bundles(args.sample, args.seed, Path(tmp), device, args.supernet)
        for candidate, _, folder in bundles:
            measured = profile(folder, args.steps, args.target)
            machine = measured.machine
            measurements += measured.measurements
            step = measured.measurements[0].train_step_s
            print(f"{candidate.key[:12]}: {instructions(step, machine):,} instructions per "
                  "step", flush=True)  # fmt: skip
    save_measurements(
        args.out,
        MeasurementFile(
            device=device,
            precision="int8",
            machine=machine,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            measurements=tuple(measurements),
            engine="bundle",
        ),
    )
    print(f"wrote {len(measurements)} measurements to {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mcunetv3")
    parser.add_argument("--resolution", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--kernels", type=Path, nargs="*", default=[])
    parser.add_argument("--sample", type=int, help="count N sampled candidates' bundles")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("m7.json"))
    parser.add_argument("--target", choices=sorted(TARGETS), default="cortex-m7")
    add_arguments(parser, supernet=True)
    args = parser.parse_args(argv)
    for tool in TOOLS.get(args.target, ARM_TOOLS):
        if shutil.which(tool) is None:
            sys.exit(f"bench/m7_instructions.py needs {tool}")
    if args.sample:
        return sample(args)

    from tinytune.bundle import BundleRequest, build_bundle, write_bundle
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet(args.supernet)
    candidate = make_preset(args.preset, spec)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=args.resolution))
    device = get_device(TARGETS[args.target])
    bundle = build_bundle(BundleRequest(candidate, ensure_checkpoint(spec), device, samples=8))
    print(f"{args.preset} on {spec.name} at {args.resolution} px, {bundle.model.n_calls} calls")
    with tempfile.TemporaryDirectory(prefix="tt-m7-") as tmp:
        for i, label in enumerate(["bundle", *map(str, args.kernels)]):
            folder = write_bundle(Path(tmp) / f"b{i}", bundle.files, bundle.manifest)
            if label != "bundle":
                for source in Path(label).glob("*"):
                    if source.suffix in (".c", ".h"):
                        shutil.copy(source, folder / "kernels" / source.name)
            n = count(folder, args.steps, args.target)
            print(f"{label}: {n:,} instructions per step on the {args.target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
