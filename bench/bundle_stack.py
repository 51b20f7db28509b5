"""The stack of a bundle's functions on every target: the compiler's bound and a painted run.

For each sample bundle (the ``mcunetv3`` preset of both supernets, TinyTL and full fine-tuning
at 32 px) and target, two figures:

* **bound**: the most stack a function of ``tt_model.h`` can take, from the compiler
  (``gcc -fstack-usage -fcallgraph-info=su``, the C library's routines from the disassembly;
  :mod:`bench.stack_bound`);
* **painted**: the example built with ``-DTT_STACK_PAINT`` under QEMU: the stack below each of
  ``tt_train_step``, ``tt_predict`` and the input function (``tt_quantize_rgb888`` of a frame
  of twice the input's sides) painted, the deepest word it wrote read back.

``--table`` writes ``tinytune/hwmodels/data/stack.json``, the figure the search and the
manifest count per core: the largest bound over the samples, each computed as if its step
called every kernel.

    python3 -m bench.bundle_stack [--table]
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

from bench.harness import (
    DEFAULT_DEVICE,
    DEFAULT_SUPERNET,
    IMAGE_NETWORK,
    ROOT,
    table,
    write_json,
)
from bench.stack_bound import TOOLS, bundle_bound

TABLE = ROOT / "tinytune" / "hwmodels" / "data" / "stack.json"
SAMPLES = (  # supernet, preset, resolution
    (DEFAULT_SUPERNET, "mcunetv3", 40),
    (IMAGE_NETWORK, "mcunetv3", 64),
    (DEFAULT_SUPERNET, "tinytl", 32),
    (DEFAULT_SUPERNET, "full", 32),
)


def painted(folder: Path, target: str) -> dict[str, int]:
    """The stack painted under each function the example measures on ``target``, in bytes."""
    done = subprocess.run(
        ["make", "-s", f"run-{target}", "BUILD=build-paint", "DEFS=-DTT_STACK_PAINT"],
        cwd=folder, check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    found = {name: int(n) for n, name in re.findall(r"(\d+) B in (tt_\w+)", done.stdout)}
    if "tt_train_step" not in found:
        raise SystemExit(f"make run-{target} printed no stack figure:\n{done.stdout[-2000:]}")
    return found


def _bundles(tmp: Path) -> list[tuple[str, Path]]:
    from tinytune.bundle import BundleRequest, build_bundle, write_bundle
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet, make_preset

    out = []
    for i, (supernet, preset, px) in enumerate(SAMPLES):
        spec = get_supernet(supernet)
        candidate = make_preset(preset, spec)
        candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=px))
        request = BundleRequest(
            candidate, ensure_checkpoint(spec), get_device(DEFAULT_DEVICE), samples=2, epochs=1
        )
        bundle = build_bundle(request)
        out.append(
            (
                f"{preset}, {supernet}, {px} px",
                write_bundle(tmp / f"b{i}", bundle.files, bundle.manifest),
            )
        )
    return out


def _compiler(target: str) -> str:
    done = subprocess.run([TOOLS[target][0], "--version"], capture_output=True, text=True)
    return done.stdout.splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help=f"write {TABLE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    targets = [
        t for t, tools in TOOLS.items() if shutil.which(tools[0]) and shutil.which(tools[1])
    ]
    if len(targets) < len(TOOLS):
        sys.exit(
            f"bench/bundle_stack.py needs the compilers of {sorted(set(TOOLS) - set(targets))}"
        )
    rows, worst = [], {t: (0, ()) for t in targets}
    with tempfile.TemporaryDirectory(prefix="tt-stack-") as tmp:
        for label, folder in _bundles(Path(tmp)):
            for target in targets:
                bound, _ = bundle_bound(folder, target)
                run = painted(folder, target)
                worst[target] = max(worst[target], bundle_bound(folder, target, any_kernel=True))
                inputs = max(v for k, v in run.items() if k not in ("tt_train_step", "tt_predict"))
                shown = [run["tt_train_step"], run["tt_predict"], inputs, max(run.values())]
                rows.append([label, target, f"{bound:,}", *(f"{v:,}" for v in shown)])
    for target in targets:
        rows.append(["table (any kernel)", target, f"{worst[target][0]:,}", "", "", "", ""])
    heads = ["bundle", "target", "bound (B)", "painted: train step", "predict", "input", "most"]
    print(table(heads, rows))
    if args.table:
        write_json(TABLE, _table(worst))
        print(f"wrote {TABLE.relative_to(ROOT)}")
    return 0


def _table(worst: dict[str, tuple[int, tuple[str, ...]]]) -> dict[str, object]:
    return {
        "format": 1,
        "about": (
            "The most stack a bundle's function (tt_train_step, tt_predict, an input function) "
            "takes per build target: the deepest chain of calls gcc's -fstack-usage and "
            "-fcallgraph-info=su allow over the bundles of python3 -m bench.bundle_stack, each "
            "as if its step called every kernel, with the C library's routines sized from the "
            "disassembly."
        ),
        "command": "python3 -m bench.bundle_stack --table",
        "samples": [f"{preset}, {supernet}, {px} px" for supernet, preset, px in SAMPLES],
        "targets": {
            target: {
                "stack_bytes": bytes_,
                "chain": [name.split(":")[-1] for name in chain],
                "compiler": _compiler(target),
            }
            for target, (bytes_, chain) in worst.items()
        },
    }


if __name__ == "__main__":
    sys.exit(main())
