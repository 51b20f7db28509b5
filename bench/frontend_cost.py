"""Instructions of the keyword front-end per clip on each core, counted by QEMU, and the fit
that a search prices its time with (``tinytune/hwmodels/data/frontend.json``).

The built-in DS-CNN is trained for one epoch on a small synthesised keyword folder (its weights
do not move the front-end's work) and exported at each of the front-ends a search tries (its
frames: 49, 32 and 24, the bands in proportion). Each bundle's profiler
(``make run-profile-<target>``, QEMU ``-icount shift=0``) times ``tt_input_from_pcm16`` on its
clips; the instructions are fitted, per core, on the two units of
:func:`tinytune.hwmodels.frontend.frontend_units` (non-negative least squares), and each
front-end's count is printed beside the fit's.

    python3 -m bench.frontend_cost [--save]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench.harness import add_arguments, write_json
from bench.m7_instructions import TARGETS, instructions, profile

OUT = Path(__file__).resolve().parent.parent / "tinytune" / "hwmodels" / "data" / "frontend.json"
CORES = {
    "cortex-m7": "Cortex-M7",
    "cortex-m4": "Cortex-M4F",
    "cortex-m0plus": "Cortex-M0+",
    "rv32imc": "RV32IMC",
}


def network(tmp: Path) -> tuple[str, str]:
    """A keyword folder and the built-in DS-CNN trained on it: (data set, network file)."""
    from bench.keywords import make
    from tinytune.builtin_networks import pretrain_network, save_network

    make(tmp / "words", speakers=8, takes=1, keywords=3)
    dataset = f"audio:{tmp / 'words'}"
    trained = pretrain_network("ds-cnn", dataset, epochs=1, seed=0)
    return dataset, str(save_network(trained, tmp))


def count(tmp: Path, dataset: str, path: str, target: str) -> dict[int, int]:
    """Instructions of one clip's input, per front-end's frames, on ``target``."""
    from tinytune.bundle import BundleRequest, build_bundle, write_bundle
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet(path)
    device = get_device(TARGETS[target], None, "bundle")
    counts = {}
    for frames in spec.resolutions:
        candidate = make_preset("last", spec)
        candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=frames))
        request = BundleRequest(
            candidate, ensure_checkpoint(spec), device, dataset=dataset, samples=2, epochs=1
        )
        bundle = build_bundle(request)
        folder = write_bundle(tmp / f"{target}-{frames}", bundle.files, bundle.manifest)
        measured = profile(folder, 1, target)
        counts[frames] = instructions(measured.measurements[0].frontend_s, measured.machine)
        print(f"{target}, {frames} frames: {counts[frames]:,} instructions a clip", flush=True)
    return counts


def fit(counts: dict[int, int]) -> dict[str, object]:
    """The non-negative least-squares fit of ``counts`` on the front-end's units."""
    import numpy as np
    from scipy.optimize import nnls

    from tinytune.data.logmel import LogMelSpec
    from tinytune.hwmodels.frontend import UNITS, frontend_units

    frames = sorted(counts)
    a = np.stack([frontend_units(LogMelSpec().at(f)) for f in frames])
    b = np.array([counts[f] for f in frames], np.float64)
    coef, _ = nnls(a, b)
    points = [
        {"frames": f, "measured": counts[f], "fitted": round(float(a[i] @ coef))}
        for i, f in enumerate(frames)
    ]
    return {"units": list(UNITS), "instructions_per_unit": coef.tolist(), "points": points}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true", help=f"write the fit to {OUT.name}")
    parser.add_argument("--targets", nargs="*", default=list(CORES), choices=list(CORES))
    add_arguments(parser)
    args = parser.parse_args(argv)
    cores = {}
    with tempfile.TemporaryDirectory(prefix="tt-frontend-") as name:
        tmp = Path(name)
        dataset, path = network(tmp)
        for target in args.targets:
            cores[CORES[target]] = fitted = fit(count(tmp, dataset, path, target))
            for p in fitted["points"]:
                error = 100 * (p["fitted"] - p["measured"]) / p["measured"]
                print(f"{CORES[target]}, {p['frames']} frames: fit {error:+.2f} %")
    if args.save:
        note = (
            "Instructions of tt_input_from_pcm16 per one-second clip, counted under QEMU "
            "(-icount shift=0) by each bundle's profiler, -O2, fitted per core on the units: "
            "python3 -m bench.frontend_cost --save"
        )
        write_json(OUT, {"note": note, "cores": cores})
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
