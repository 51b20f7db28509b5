"""Instructions per training step of a bundle on the Cortex-M7, counted exactly under QEMU.

The bundle of one candidate (default: the ``mcunetv3`` preset on ``ofa-proxyless-w0.35`` at 32
px, as ``bench/bundle_step.py``) is built for the Cortex-M7 image of its Makefile (the
MPS2-AN500 board, ``-O2``) with a driver that reads the board's CMSDK timer 0 around
``--steps`` training steps. QEMU runs with ``-icount shift=0,sleep=off``: one executed
instruction is one nanosecond of the guest's clock, and the timer counts at 25 MHz, so
instructions = ticks × 40, exactly and the same on every run
(``../shared/reference/environment-notes.md``). QEMU counts instructions, not cycles (no
pipeline, caches or flash wait states): a measure of the kernels' work on the real instruction
set.

    python3 bench/m7_instructions.py [--preset mcunetv3] [--resolution 32] [--steps 4]
        [--kernels DIR ...]
    python3 bench/m7_instructions.py --sample 40 --seed 0 --out m7.json
    tinytune calibrate m7.json --device stm32f746 --held-out 0.25 --storage sqlite:///m7.db

``--sample N`` counts the bundles of N candidates drawn at random from the joint space (those
that fit the STM32F746's SRAM) and writes them as a measurement file (``tinytune-latency/1``)
for ``tinytune calibrate``: each step's instructions as seconds at one instruction per cycle at
216 MHz. That rate is an assumption (the Cortex-M7 can issue two instructions a cycle, flash
wait states and caches cost cycles); it scales every measurement alike, so the relative
held-out error of a fit does not depend on it.

``--kernels DIR`` replaces the bundle's ``kernels/`` sources with those of DIR (e.g. an older
copy of ``tinytune/export/csrc``) for a comparison; several are measured one after the other.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

CLOCK_HZ = 216e6  # the STM32F746's clock: instructions become seconds at one per cycle

DRIVER = r"""
#include <stdint.h>
#include <stdio.h>

#include "tt_data.h"
#include "tt_model.h"

/* CMSDK timer 0 of the MPS2 board: counts down at 25 MHz */
#define TIMER0_CTRL (*(volatile uint32_t *)0x40000000u)
#define TIMER0_VALUE (*(volatile uint32_t *)0x40000004u)
#define TIMER0_RELOAD (*(volatile uint32_t *)0x40000008u)

int main(void) {
    int i;
    float loss = 0.0f;
    uint32_t start, end;
    tt_model_init();
    tt_train_step(tt_train_images[0], (int)tt_train_labels[0], &loss); /* warm */
    TIMER0_RELOAD = 0xFFFFFFFFu;
    TIMER0_VALUE = 0xFFFFFFFFu;
    TIMER0_CTRL = 1u;
    start = TIMER0_VALUE;
    for (i = 0; i < STEPS; i++) {
        tt_train_step(tt_train_images[i % TT_TRAIN_SAMPLES],
                      (int)tt_train_labels[i % TT_TRAIN_SAMPLES], &loss);
    }
    end = TIMER0_VALUE;
    printf("ticks %lu steps %d\n", (unsigned long)(start - end), STEPS);
    return 0;
}
"""


def count(folder: Path, steps: int) -> int:
    """Instructions per step of the bundle in ``folder`` (its sources, this driver)."""
    (folder / "main.c").write_text(DRIVER.replace("STEPS", str(steps)))
    subprocess.run(
        ["make", "-s", "cortex-m7"], cwd=folder, check=True, capture_output=True, text=True
    )
    elf = next((folder / "build").rglob("*.elf"))
    done = subprocess.run(
        ["qemu-system-arm", "-M", "mps2-an500", "-nographic", "-monitor", "none", "-serial",
         "none", "-semihosting-config", "enable=on,target=native",
         "-icount", "shift=0,sleep=off", "-kernel", str(elf)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    m = re.search(r"ticks (\d+) steps (\d+)", done.stdout)
    if m is None:
        raise SystemExit(f"no count in the output: {done.stdout!r}")
    return int(m[1]) * 40 // int(m[2])


def sample(args: argparse.Namespace) -> int:
    """Count sampled candidates' bundles and write a measurement file."""
    from datetime import UTC, datetime

    from bundle_host import sampled_bundles  # a sibling script of this one

    from tinytune.hwmodels.measurements import Measurement, MeasurementFile, save_measurements

    measurements = []
    with tempfile.TemporaryDirectory(prefix="tt-m7-") as tmp:
        for candidate, graph, folder in sampled_bundles(args.sample, args.seed, Path(tmp)):
            instructions = count(folder, args.steps)
            measurements.append(Measurement(candidate.key, graph, instructions / CLOCK_HZ))
            print(f"{candidate.key[:12]}: {instructions:,} instructions per step", flush=True)
    save_measurements(
        args.out,
        MeasurementFile(
            device="stm32f746",
            precision="int8",
            machine={
                "what": "instructions per step under qemu-system-arm -M mps2-an500 -icount "
                "shift=0,sleep=off, at one instruction per cycle and 216 MHz",
                "compiler": "arm-none-eabi-gcc -O2 -mcpu=cortex-m7",
            },
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            measurements=tuple(measurements),
        ),
    )
    print(f"wrote {len(measurements)} measurements to {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mcunetv3")
    parser.add_argument("--resolution", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--kernels", type=Path, nargs="*", default=[])
    parser.add_argument("--sample", type=int, help="count N sampled candidates' bundles")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("m7.json"))
    args = parser.parse_args(argv)
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm", "make"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/m7_instructions.py needs {tool}")
    if args.sample:
        return sample(args)

    from tinytune.bundle import BundleRequest, build_bundle, write_bundle
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet("ofa-proxyless-w0.35")
    candidate = make_preset(args.preset, spec)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=args.resolution))
    bundle = build_bundle(
        BundleRequest(candidate, ensure_checkpoint(spec), get_device("stm32f746"), samples=8)
    )
    print(f"{args.preset} on {spec.name} at {args.resolution} px, {bundle.model.n_calls} calls")
    with tempfile.TemporaryDirectory(prefix="tt-m7-") as tmp:
        for i, label in enumerate(["bundle", *map(str, args.kernels)]):
            folder = write_bundle(Path(tmp) / f"b{i}", bundle.files, bundle.manifest)
            if label != "bundle":
                for source in Path(label).glob("*"):
                    if source.suffix in (".c", ".h"):
                        shutil.copy(source, folder / "kernels" / source.name)
            print(f"{label}: {count(folder, args.steps):,} instructions per step", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
