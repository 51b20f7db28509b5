"""The most stack a bundle's example takes on the Cortex-M7, M4F and M0+, measured under QEMU.

The bundle of one candidate (default: the ``mcunetv3`` preset on ``ofa-proxyless-w0.35`` at 40
px) is written with its example's ``main`` wrapped: before the example runs, every word of the
stack section below the current frame (``platform/cortex_m7.ld``'s ``__StackLimit`` ..
``__StackTop``) is painted with a pattern; after it has trained and evaluated, the first word
from the bottom that lost the pattern marks the deepest the stack went. The figure is the whole
program's: ``main``, the example's frames, the C library's ``printf`` and the kernels'.

    python3 -m bench.bundle_stack [--preset mcunetv3] [--resolution 40] [--kernels DIR ...]

``--kernels DIR`` replaces the bundle's ``kernels/`` sources with those of DIR (e.g. an older
copy of ``tinytune/lowering/csrc``), as ``bench/m7_instructions.py`` does.
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

from bench.harness import add_arguments, table
from bench.m7_instructions import ARM_TOOLS, TARGETS

ARM_TARGETS = ("cortex-m7", "cortex-m4", "cortex-m0plus")
MAIN = "int main(void) {\n    return tt_example();\n}"
PAINTED = """extern uint32_t __StackLimit, __StackTop;
int main(void) {
    volatile uint32_t *p;
    uint32_t here;
    int r;
    for (p = &__StackLimit; (uintptr_t)p < (uintptr_t)&here - 256; p++) {
        *p = 0xA5A5A5A5u;
    }
    r = tt_example();
    for (p = &__StackLimit; *p == 0xA5A5A5A5u; p++) {
    }
    printf("stack used: %lu bytes\\n", (unsigned long)((uintptr_t)&__StackTop - (uintptr_t)p));
    return r;
}"""


def stack_used(folder: Path, target: str) -> int:
    """The deepest the stack went when the bundle in ``folder`` ran on ``target``, in bytes."""
    main = folder / "main.c"
    source = main.read_text()
    if MAIN not in source:
        raise SystemExit(f"{main}: the example's main is not the one this script wraps")
    main.write_text(source.replace(MAIN, PAINTED))
    done = subprocess.run(
        ["make", "-s", f"run-{target}", "BUILD=build-stack"],
        cwd=folder, check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    main.write_text(source)
    found = re.search(r"stack used: (\d+) bytes", done.stdout)
    if found is None:
        raise SystemExit(f"make run-{target} printed no stack figure:\n{done.stdout[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mcunetv3")
    parser.add_argument("--resolution", type=int, default=40)
    parser.add_argument("--kernels", type=Path, nargs="*", default=[])
    add_arguments(parser, supernet=True)
    args = parser.parse_args(argv)
    for tool in ARM_TOOLS:
        if shutil.which(tool) is None:
            sys.exit(f"bench/bundle_stack.py needs {tool}")

    from tinytune.bundle import BundleRequest, build_bundle, write_bundle
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet(args.supernet)
    candidate = make_preset(args.preset, spec)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=args.resolution))
    device = get_device(TARGETS["cortex-m7"])
    bundle = build_bundle(BundleRequest(candidate, ensure_checkpoint(spec), device, samples=4))
    print(f"{args.preset} on {spec.name} at {args.resolution} px: stack used, in bytes")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tt-stack-") as tmp:
        for i, label in enumerate(["this version", *map(str, args.kernels)]):
            folder = write_bundle(Path(tmp) / f"b{i}", bundle.files, bundle.manifest)
            if i:
                for source in Path(label).glob("*"):
                    if source.suffix in (".c", ".h"):
                        shutil.copy(source, folder / "kernels" / source.name)
            rows.append(
                [f"kernels of {label}", *(f"{stack_used(folder, t):,}" for t in ARM_TARGETS)]
            )
    print(table(["", *ARM_TARGETS], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
