"""Timed training steps of sampled candidates' bundles on this host, as a measurement file.

N candidates are drawn at random from the joint space of ``ofa-proxyless-w0.35`` (``--supernet``
names another; those whose arena fits the STM32F746's SRAM, as in ``python3 -m
bench.m7_instructions --sample``); each bundle's profiler is built for the host (``make
profile-host``: its Makefile's flags, ``gcc -O3``, ``clock_gettime`` around every kernel call).
The profilers run in ``--rounds`` rounds, each round every binary once in a shuffled order
(``--steps`` timed steps after an untimed one), so that a burst of other work on a shared
machine falls on all of them alike; a candidate's step and each of its calls is the fastest
over the rounds (the host profile's convention; the median step is kept beside it). The file
(``tinytune-latency/1``, engine ``bundle``) is what ``tinytune calibrate`` fits: the latency
model of the bundle's own kernels on this host.

    python3 -m bench.bundle_host --sample 40 --seed 0 --out host-bundle.json
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

from bench.harness import DEFAULT_DEVICE, DEFAULT_SUPERNET, add_arguments


def sampled_bundles(
    n: int,
    seed: int,
    root: Path,
    device_name: str = DEFAULT_DEVICE,
    supernet: str = DEFAULT_SUPERNET,
) -> Iterator[tuple[Any, Any, Path]]:
    """The first ``n`` candidates of ``supernet`` drawn at random (Optuna's random sampler)
    whose bundle fits the device (default the STM32F746): each candidate, its traced int8
    graph at batch 1 and its bundle's folder under ``root``."""
    from tinytune.bundle import BundleRequest, build_bundle, write_bundle
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.errors import TinyTuneError
    from tinytune.evaluators.hardware import HardwareConfig, HardwareEvaluator
    from tinytune.evaluators.profile import sample_candidates
    from tinytune.hwmodels.builtin_devices import builtin_boards, builtin_profiles
    from tinytune.spaces import get_supernet

    spec = get_supernet(supernet)
    # its SRAM and flash (a board has no published profile: its facts alone)
    device = (builtin_profiles() | builtin_boards())[device_name]
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
    """Build the bundle's profiler for the host (``make profile-host``); returns the binary."""
    subprocess.run(
        ["make", "-s", "profile-host", f"PROFILE_STEPS={steps}"],
        cwd=folder, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return folder / "build" / "host" / "profile"


def merge(runs: list[Any]) -> Any:
    """One measurement from several runs of a profiler: the fastest step, call and prediction
    over all of them, every step's time kept."""
    from dataclasses import replace as with_

    samples = [s for m in runs for s in m.samples]
    calls = [
        with_(first, seconds=min(m.per_call[i].seconds for m in runs))
        for i, first in enumerate(runs[0].per_call)
    ]
    return with_(
        runs[0],
        train_step_s=min(m.train_step_s for m in runs),
        train_step_median_s=statistics.median(samples),
        inference_s=min(m.inference_s for m in runs if m.inference_s),
        samples=tuple(samples),
        per_call=tuple(calls),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("host-bundle.json"))
    add_arguments(parser, supernet=True)
    args = parser.parse_args(argv)

    from tinytune.hwmodels.host import machine_info
    from tinytune.hwmodels.measurements import (
        MeasurementFile,
        load_measurements,
        save_measurements,
    )

    binaries: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="tt-host-") as tmp:
        for candidate, _, folder in sampled_bundles(
            args.sample, args.seed, Path(tmp), supernet=args.supernet
        ):
            binaries[candidate.key] = build(folder, args.steps)
        runs: dict[str, list[Any]] = {key: [] for key in binaries}
        order = list(binaries)
        rng = random.Random(args.seed)
        for _ in range(args.rounds):
            rng.shuffle(order)
            for key in order:
                done = subprocess.run(
                    [str(binaries[key])], check=True, capture_output=True, text=True
                )
                out = Path(tmp) / "run.json"
                out.write_text(done.stdout)
                runs[key] += load_measurements(out).measurements
        measurements = []
        for key in binaries:
            m = merge(runs[key])
            measurements.append(m)
            print(f"{key[:12]}: {1000 * m.train_step_s:.3f} ms fastest, "
                  f"{1000 * m.train_step_median_s:.3f} ms median", flush=True)  # fmt: skip
    save_measurements(
        args.out,
        MeasurementFile(
            device="host",
            precision="int8",
            machine={
                **machine_info(),
                "counter": "clock_gettime(CLOCK_MONOTONIC)",
                "compiler": "gcc -O3",
            },
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            measurements=tuple(measurements),
            engine="bundle",
        ),
    )
    print(f"wrote {len(measurements)} measurements to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
