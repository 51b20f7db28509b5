"""Fit the built-in profiles of the bundle engine from bundle profilers' measurement files.

    python3 bench/m7_instructions.py --sample 40 --seed 0 --out m7-s0.json   # and --seed 1
    python3 bench/bundle_host.py --sample 40 --seed 0 --out host-s0.json     # and --seed 1
    python3 bench/m7_instructions.py --target cortex-m4 --sample 40 --seed 0 --out m4-s0.json
    python3 bench/bundle_profiles.py --m7 m7-s0.json m7-s1.json --host host-s0.json host-s1.json \
        --m4 m4-s0.json m4-s1.json

Each target's files are fitted together by ``tinytune.hwmodels.fitting.calibrate`` (a quarter
of the bundles held out, chosen by a hash of their names) and written, with the fit's summary,
to ``tinytune/hwmodels/data/bundle-cortex-m7.json``, ``bundle-cortex-m4.json`` and
``bundle-host.json``, which
:mod:`tinytune.hwmodels.bundle_engine` loads. The held-out error is printed and kept in the
profile (``loo_within_10``, ``loo_median_error``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tinytune" / "hwmodels" / "data"


def fit(files: list[Path], base: object, out: Path) -> None:
    from tinytune.hwmodels.fitting import calibrate
    from tinytune.hwmodels.measurements import load_measurements, write_json_atomic

    result = calibrate([load_measurements(f) for f in files], base, held_out=0.25)
    write_json_atomic(out, {"profile": result.profile.to_dict(), "fit": result.fit})
    f, h = result.fit["fit"], result.fit["held_out"]
    print(
        f"{out.name}: fitted on {f['n']} bundles ({result.fit['timed_calls']} with timed calls), "
        f"median |error| {100 * f['median_abs_error']:.1f} %; held out {h['n']}: "
        f"{100 * h['within_10']:.0f} % within ±10 %, median {100 * h['median_abs_error']:.1f} %, "
        f"max {100 * h['max_abs_error']:.1f} %"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m7", type=Path, nargs="*", default=[])
    parser.add_argument("--host", type=Path, nargs="*", default=[])
    parser.add_argument("--m4", type=Path, nargs="*", default=[])
    args = parser.parse_args(argv)

    from tinytune.hwmodels.devices import builtin_profiles
    from tinytune.hwmodels.host import host_base

    if args.m7:
        base = dataclasses.replace(builtin_profiles()["stm32f746"], engine="bundle")
        fit(args.m7, base, DATA / "bundle-cortex-m7.json")
    if args.m4:
        base = dataclasses.replace(builtin_profiles()["nrf52840"], engine="bundle")
        fit(args.m4, base, DATA / "bundle-cortex-m4.json")
    if args.host:
        base = dataclasses.replace(
            host_base(),
            engine="bundle",
            precision="int8",
            description="this machine: the exported bundle's C step (int8, gcc -O3)",
        )
        fit(args.host, base, DATA / "bundle-host.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
