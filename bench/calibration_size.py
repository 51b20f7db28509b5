"""Error of a latency calibration against the number of networks measured.

One measurement file (a pool measured in one run, so that every network is timed under the
same conditions) is split in two: the first ``--fit-pool`` networks to draw calibrations
from, the others (``--test``) to check them on — networks no calibration saw. For each size N
of ``--sizes`` the fit pool is cut into disjoint sets of N networks (``--fit-pool // N``
sets), and each set is calibrated as ``tinytune calibrate`` does (``--held-out 0.25``: the
form chosen by cross-validation over whole networks, and whether the held-out and
cross-validated errors meet the accuracy a profile needs, so that it would be stored) and as
it did before forms were chosen (the full model, 112 coefficients, on whole steps and a
bundle's timed calls). Each calibration predicts the test networks' steps; the table gives,
per N, the medians over sets of the share within ±10 %, the median and the largest |error|,
and the worst set's largest error.

    python3 -m bench.calibration_size --device host host-pool.json
    python3 -m bench.calibration_size --device stm32f746 m7-pool.json

The host pool: ``tinytune profile --candidates 96 --seed 1 -o host-pool.json`` (about 2 min);
the Cortex-M7 pool: ``python3 -m bench.m7_instructions --sample 96 --seed 0 --out
m7-pool.json`` (instruction counts under QEMU, about 45 min).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import numpy as np

from bench.harness import add_arguments, head, row
from tinytune.hwmodels.fitting import EAGER_ENGINES, fit_latency
from tinytune.hwmodels.latency import predict_latency
from tinytune.hwmodels.latency_fit import FULL_FORM, fit_coefficients
from tinytune.hwmodels.measurements import Measurement, load_measurements
from tinytune.hwmodels.memory import PRECISIONS
from tinytune.hwmodels.registry import get_device


def errors(coefficients: object, tests: list[Measurement], width: int) -> np.ndarray:
    """|relative error| of each test network's predicted step."""
    return np.array(
        [
            abs(predict_latency(m.graph, coefficients, width).train_step_s / m.train_step_s - 1)
            for m in tests
        ]
    )


def _shares(e: np.ndarray) -> str:
    return (
        f"{np.mean(e <= 0.05):.0%} within ±5 %, {np.mean(e <= 0.10):.0%} within ±10 % "
        f"(median {np.median(e):.1%}, max {e.max():.1%})"
    )


def bounds(
    pool: tuple[Measurement, ...], again: tuple[Measurement, ...], width: int, eager: bool
) -> None:
    """Print the full model's error on the very networks it was fitted on (every network and
    op pass of the pool: no calibration from fewer does better on average), and the steps'
    repeatability: each network's fastest step against its fastest in the other run, the
    median ratio divided out (one run may be uniformly slower)."""
    everything = fit_coefficients(
        [m.graph for m in pool],
        [m.train_step_s for m in pool],
        width,
        calls=[[(c.op, c.kernel, c.seconds) for c in m.per_call] for m in pool],
        forward=[m.per_op_forward_s for m in pool],
        backward=[m.per_op_backward_s for m in pool],
        form=dataclasses.replace(FULL_FORM, eager=eager),
    )
    in_sample = _shares(errors(everything, list(pool), width))
    print(f"full model fitted on all {len(pool)}, in sample: {in_sample}")
    other = {m.name: m.train_step_s for m in again}
    both = [m for m in pool if m.name in other]
    ratio = np.array([m.train_step_s / other[m.name] for m in both])
    ratio = ratio / np.median(ratio)
    print(f"the same {len(both)} networks timed in another run: {_shares(np.abs(ratio - 1))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measurements", type=Path)
    add_arguments(parser, device="host")  # the host's calibration unless told
    parser.add_argument("--sizes", type=int, nargs="+", default=[6, 12, 24, 48])
    parser.add_argument("--fit-pool", type=int, default=48)
    parser.add_argument(
        "--bounds",
        type=Path,
        metavar="AGAIN.json",
        help="also print what bounds any calibration here: the full model fitted on every "
        "network of the pool and checked on the same networks, and how far the pool's steps "
        "are from AGAIN.json's, the same networks timed again in another run",
    )
    args = parser.parse_args()
    file = load_measurements(args.measurements)
    if args.bounds is not None:
        width = PRECISIONS[file.precision].activation
        again = load_measurements(args.bounds).measurements
        bounds(file.measurements, again, width, file.engine in EAGER_ENGINES)
    pool, tests = (
        list(file.measurements[: args.fit_pool]),
        list(file.measurements[args.fit_pool :]),
    )
    width = PRECISIONS[file.precision].activation
    engine = file.engine or None
    base = get_device(args.device, engine=engine)
    print(f"{args.measurements}: {len(pool)} networks to fit from, {len(tests)} to test on")
    columns = [
        "networks", "sets", "stored", "form (most chosen)", "within ±10 %", "median", "max",
        "worst set's max", "stored sets' max", "before: within ±10 %", "median", "max",
    ]  # fmt: skip
    print(head(columns))
    for n in args.sizes:
        sets = [pool[k * n : (k + 1) * n] for k in range(len(pool) // n)]
        rows, old, kept, forms = [], [], [], []
        for chosen in sets:
            sub = dataclasses.replace(file, measurements=tuple(chosen))
            result = fit_latency([sub], base, held_out=0.25)
            forms.append(result.fit["form_text"].split(":")[0])
            rows.append(errors(result.profile.coefficients, tests, width))
            if result.shortfall is None:
                kept.append(rows[-1])
            full = fit_coefficients(
                [m.graph for m in chosen],
                [m.train_step_s for m in chosen],
                width,
                calls=[[(c.op, c.kernel, c.seconds) for c in m.per_call] for m in chosen],
            )
            old.append(errors(full, tests, width))

        def cells(errs: list[np.ndarray]) -> list[str]:
            return [
                f"{statistics.median(float(np.mean(e <= 0.10)) for e in errs):.0%}",
                f"{statistics.median(float(np.median(e)) for e in errs):.1%}",
                f"{statistics.median(float(e.max()) for e in errs):.1%}",
            ]

        common = max(set(forms), key=forms.count)
        new, before = cells(rows), cells(old)
        worst = f"{max(float(e.max()) for e in rows):.1%}"
        worst_kept = f"{max(float(e.max()) for e in kept):.1%}" if kept else "–"
        print(
            row(
                [
                    n,
                    len(sets),
                    f"{len(kept)} of {len(sets)}",
                    common,
                    *new,
                    worst,
                    worst_kept,
                    *before,
                ]
            )
        )


if __name__ == "__main__":
    main()
