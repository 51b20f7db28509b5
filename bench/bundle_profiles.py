"""Fit the built-in profiles of the bundle engine from bundle profilers' measurement files.

    python3 -m bench.m7_instructions --sample 40 --seed 0 --out m7-s0.json   # and --seed 1
    python3 -m bench.bundle_host --sample 40 --seed 0 --out host-s0.json     # and --seed 1
    python3 -m bench.m7_instructions --target cortex-m4 --sample 40 --seed 0 --out m4-s0.json
    python3 -m bench.m7_instructions --target cortex-m0plus --sample 40 --seed 0 --out m0p-s0.json
    python3 -m bench.m7_instructions --target rv32imc --sample 40 --seed 0 --out rv32-s0.json
    python3 -m bench.bundle_profiles --m7 m7-s0.json m7-s1.json --host host-s0.json host-s1.json \
        --m4 m4-s0.json m4-s1.json --m0plus m0p-s0.json m0p-s1.json \
        --rv32imc rv32-s0.json rv32-s1.json

``--check TARGET FILE ...`` fits nothing: it prints how the built-in profile of ``m7``
(stm32f746), ``m4`` (nrf52840), ``m0plus`` (rp2040), ``rv32imc`` (esp32c3) or ``host`` predicts
the bundles of the files, e.g. those of another supernet than the one it was fitted on::

    python3 -m bench.m7_instructions --supernet ofa-mbv3-w0.35 --sample 40 --out m7-mbv3.json
    python3 -m bench.bundle_profiles --check m7 m7-mbv3.json

Each target's files are fitted together by ``tinytune.hwmodels.fitting.fit_latency`` (a quarter
of the bundles held out, chosen by a hash of their names) and written, with the fit's summary,
to ``tinytune/hwmodels/data/bundle-cortex-m7.json``, ``bundle-cortex-m4.json``,
``bundle-cortex-m0plus.json``, ``bundle-rv32imc.json`` and ``bundle-host.json``, which
:mod:`tinytune.hwmodels.bundle_engine` loads. The held-out error is printed and kept in the
profile (``loo_within_10``, ``loo_median_error``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from bench.m7_instructions import TARGETS

DATA = Path(__file__).resolve().parent.parent / "tinytune" / "hwmodels" / "data"


def fit(files: list[Path], base: object, out: Path) -> None:
    from tinytune.hwmodels.fitting import fit_latency
    from tinytune.hwmodels.measurements import load_measurements, write_json_atomic

    result = fit_latency([load_measurements(f) for f in files], base, held_out=0.25)
    write_json_atomic(out, {"profile": result.profile.to_dict(), "fit": result.fit})
    f, h = result.fit["fit"], result.fit["held_out"]
    print(
        f"{out.name}: fitted on {f['n']} bundles ({result.fit['timed_calls']} with timed calls), "
        f"median |error| {100 * f['median_abs_error']:.1f} %; held out {h['n']}: "
        f"{100 * h['within_10']:.0f} % within ±10 %, median {100 * h['median_abs_error']:.1f} %, "
        f"max {100 * h['max_abs_error']:.1f} %"
    )


CHECK_DEVICES = {
    "m7": TARGETS["cortex-m7"],
    "m4": TARGETS["cortex-m4"],
    "m0plus": TARGETS["cortex-m0plus"],
    "rv32imc": TARGETS["rv32imc"],
    "host": "host",
}


def check(target: str, files: list[Path]) -> None:
    """Print the built-in profile's error on every bundle of ``files``."""
    import statistics

    from tinytune.hwmodels.bundle_engine import bundle_profile
    from tinytune.hwmodels.fitting import _errors, _summary
    from tinytune.hwmodels.measurements import load_measurements

    profile = bundle_profile(CHECK_DEVICES[target])
    measurements = [m for f in files for m in load_measurements(f).measurements]
    errors = _errors(profile, measurements)
    s = _summary(errors)
    print(
        f"{target}: built-in profile on {s['n']} bundles: {100 * s['within_10']:.0f} % within "
        f"±10 %, median |error| {100 * s['median_abs_error']:.1f} %, max "
        f"{100 * s['max_abs_error']:.1f} %, median signed error "
        f"{100 * statistics.median(errors):+.1f} %"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m7", type=Path, nargs="*", default=[])
    parser.add_argument("--host", type=Path, nargs="*", default=[])
    parser.add_argument("--m4", type=Path, nargs="*", default=[])
    parser.add_argument("--m0plus", type=Path, nargs="*", default=[])
    parser.add_argument("--rv32imc", type=Path, nargs="*", default=[])
    parser.add_argument("--check", nargs="+", metavar=("TARGET", "FILE"))
    args = parser.parse_args(argv)
    if args.check:
        target, *files = args.check
        if target not in CHECK_DEVICES or not files:
            parser.error(f"--check TARGET FILE ...: TARGET is one of {sorted(CHECK_DEVICES)}")
        check(target, [Path(f) for f in files])
        return 0

    from tinytune.hwmodels.builtin_devices import builtin_boards, builtin_profiles
    from tinytune.hwmodels.host import host_base

    if args.m7:
        base = dataclasses.replace(builtin_profiles()[CHECK_DEVICES["m7"]], engine="bundle")
        fit(args.m7, base, DATA / "bundle-cortex-m7.json")
    if args.m4:
        base = dataclasses.replace(builtin_profiles()["nrf52840"], engine="bundle")
        fit(args.m4, base, DATA / "bundle-cortex-m4.json")
    if args.m0plus:  # a board's facts, without a published profile
        fit(args.m0plus, builtin_boards()["rp2040"], DATA / "bundle-cortex-m0plus.json")
    if args.rv32imc:
        fit(args.rv32imc, builtin_boards()["esp32c3"], DATA / "bundle-rv32imc.json")
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
