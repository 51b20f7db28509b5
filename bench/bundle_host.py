"""Timed training steps of sampled candidates' bundles on this host, as a measurement file.

N candidates are drawn at random from the joint space of ``ofa-proxyless-w0.35`` (those whose
arena fits the STM32F746's SRAM, as in ``bench/m7_instructions.py --sample``); each bundle's C
step is compiled for the host with its Makefile's flags (``gcc -O2``) and a driver that prints
the seconds of each step (``clock_gettime``, monotonic). The binaries run in ``--rounds``
rounds, each round every binary once in a shuffled order for ``--steps`` timed steps after two
untimed ones, so that a burst of other work on a shared machine falls on all of them alike; a
candidate's figure is the fastest of its steps (the host profile's convention; the median is
kept beside it). The file (``tinytune-latency/1``, precision int8) is what ``tinytune
calibrate`` fits: the latency model of the bundle's own kernels on this host.

    python3 bench/bundle_host.py --sample 40 --seed 0 --out host-bundle.json
    tinytune calibrate host-bundle.json --device host --held-out 0.25 --storage sqlite:///hb.db
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DRIVER = r"""
#include <stdio.h>
#include <time.h>

#include "tt_data.h"
#include "tt_model.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
    int i;
    float loss = 0.0f;
    tt_model_init();
    for (i = 0; i < STEPS + 2; i++) {
        double start = now();
        tt_train_step(tt_train_images[i % TT_TRAIN_SAMPLES],
                      (int)tt_train_labels[i % TT_TRAIN_SAMPLES], &loss);
        if (i >= 2) {
            printf("%.9f\n", now() - start);
        }
    }
    return 0;
}
"""


def sampled_bundles(n: int, seed: int, root: Path) -> Iterator[tuple[Any, Any, Path]]:
    """The first ``n`` candidates drawn at random (Optuna's random sampler) whose bundle fits
    the STM32F746: each candidate, its traced int8 graph at batch 1 and its bundle's folder
    under ``root``."""
    from tinytune.bundle import BundleRequest, build_bundle, write_bundle
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.errors import TinyTuneError
    from tinytune.evaluators.hardware import HardwareConfig, HardwareEvaluator
    from tinytune.evaluators.profile import sample_candidates
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet

    spec = get_supernet("ofa-proxyless-w0.35")
    device = get_device("stm32f746")
    checkpoint = ensure_checkpoint(spec)
    evaluator = HardwareEvaluator(spec, 10, HardwareConfig())
    found = 0
    for i, candidate in enumerate(sample_candidates(spec, 3 * n, seed)):
        if found == n:
            return
        try:
            bundle = build_bundle(BundleRequest(candidate, checkpoint, device, samples=2))
        except TinyTuneError:  # over the device's SRAM or flash
            continue
        found += 1
        _, graph = evaluator.cost_with_graph(candidate)
        yield candidate, graph, write_bundle(root / f"c{i}", bundle.files, bundle.manifest)


def build(folder: Path, steps: int) -> Path:
    """Compile the bundle in ``folder`` with the timing driver; returns the binary."""
    (folder / "main.c").write_text(DRIVER.replace("STEPS", str(steps)))
    sources = ["main.c", "tt_model.c", "tt_data.c"]
    sources += sorted(f"kernels/{p.name}" for p in (folder / "kernels").glob("*.c"))
    flags = ["-std=c99", "-ffp-contract=off", "-O2", "-D_POSIX_C_SOURCE=199309L"]
    cmd = ["gcc", *flags, "-I.", "-Ikernels", *sources, "-o", "timed", "-lm"]
    subprocess.run(cmd, cwd=folder, check=True)
    return folder / "timed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("host-bundle.json"))
    args = parser.parse_args(argv)

    from tinytune.hwmodels.host import machine_info
    from tinytune.hwmodels.measurements import Measurement, MeasurementFile, save_measurements

    binaries: dict[str, tuple[Path, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tt-host-") as tmp:
        for candidate, graph, folder in sampled_bundles(args.sample, args.seed, Path(tmp)):
            binaries[candidate.key] = (build(folder, args.steps), graph)
        times: dict[str, list[float]] = {key: [] for key in binaries}
        order = list(binaries)
        rng = random.Random(args.seed)
        for _ in range(args.rounds):
            rng.shuffle(order)
            for key in order:
                done = subprocess.run(
                    [str(binaries[key][0])], check=True, capture_output=True, text=True
                )
                times[key] += [float(line) for line in done.stdout.split()]
        measurements = []
        for key, (_, graph) in binaries.items():
            samples = times[key]
            measurements.append(
                Measurement(
                    key,
                    graph,
                    min(samples),
                    samples=tuple(samples),
                    train_step_median_s=statistics.median(samples),
                )
            )
            print(f"{key[:12]}: {1000 * min(samples):.3f} ms fastest, "
                  f"{1000 * statistics.median(samples):.3f} ms median", flush=True)  # fmt: skip
    save_measurements(
        args.out,
        MeasurementFile(
            device="host",
            precision="int8",
            machine={**machine_info(), "engine": "tinytune bundle, gcc -O2"},
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            measurements=tuple(measurements),
        ),
    )
    print(f"wrote {len(measurements)} measurements to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
