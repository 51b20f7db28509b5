"""Host latency model: measure sampled candidates, fit, and check on held-out ones.

Runs the same pipeline as ``tinytune profile`` followed by ``tinytune calibrate --device host``:
samples ``--candidates`` networks of the joint space, times their training steps on this
machine (batch 1, one thread, interleaved rounds; the fastest repeat, and the median for
comparison), fits the per-op coefficients on all but ``--held-out`` of them and reports, on
those, the share predicted within ±10 % and the median relative error. ``--write-default``
stores the fitted profile as the package's built-in ``host`` profile.

    python3 -m bench.host_latency --candidates 100 --held-out 30 --seed 0
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from bench.harness import add_arguments
from tinytune.evaluators.profile import profile_host
from tinytune.hwmodels.fitting import fit_latency
from tinytune.hwmodels.host import host_base
from tinytune.hwmodels.measurements import load_measurements, save_measurements, write_json_atomic
from tinytune.spaces import get_supernet

DEFAULT = Path(__file__).resolve().parents[1] / "tinytune" / "hwmodels" / "data" / "host.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, supernet=True)
    parser.add_argument("--candidates", type=int, default=90)
    parser.add_argument("--held-out", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--measurements", type=Path, help="reuse (or write) this file")
    parser.add_argument("--write-default", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    path = args.measurements
    if path is not None and path.is_file():
        file = load_measurements(path)
    else:
        file = profile_host(
            get_supernet(args.supernet),
            args.candidates,
            seed=args.seed,
            rounds=args.rounds,
            repeats=args.repeats,
            progress=print,
        )
        if path is not None:
            save_measurements(path, file)
    result = fit_latency([file], host_base(), held_out=args.held_out)
    steps = [m.train_step_s for m in file.measurements]
    print(f"machine: {file.machine['processor']}, {file.machine['cpu_count']} cores")
    print(
        f"measured {len(steps)} networks: step median {1000 * statistics.median(steps):.1f} ms "
        f"(min {1000 * min(steps):.1f}, max {1000 * max(steps):.1f})"
    )
    for part in ("fit", "held_out", "held_out_vs_median"):
        s = result.fit[part]
        print(
            f"{part:18s} n={s['n']:3d}: within ±10 % {100 * s['within_10']:.0f} %; median |error| "
            f"{100 * s['median_abs_error']:.1f} %; max |error| {100 * s['max_abs_error']:.1f} %"
        )
    if args.write_default:
        write_json_atomic(DEFAULT, result.profile.to_dict())
        print(f"wrote {DEFAULT}")
    else:
        print(json.dumps(result.fit["held_out"]))


if __name__ == "__main__":
    main()
