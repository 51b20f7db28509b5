"""Where a bundle's training step spends its instructions on the Cortex-M7 (or another core of
``bench.m7_instructions``), kernel by kernel and layer kind by layer kind, with the forward
pass's multiply-accumulates per instruction.

The bundle of ``python3 -m bench.m7_instructions`` (one preset on one network at one resolution) is
profiled under QEMU (``make run-profile-<target>``: exact instruction counts), and each kernel
call is attributed to its op's kind: ``pw`` (1×1), ``dw<k>`` (depthwise), ``k<k>`` (other
convolutions, the stem), or the op's own kind. It ends with the multiply-accumulates per
instruction of the forward pass and of the convolutions' backward kernels (input gradients, and
weight gradients with their update).

    python3 -m bench.m7_kernels [--supernet ofa-proxyless-w0.35] [--preset mcunetv3]
        [--resolution 40] [--kernels DIR] [--target cortex-m7]

``--target host`` times the bundle on this machine instead (``make run-profile-host``, ``gcc
-O3``): each call the fastest of 200 steps, in nanoseconds, and multiply-accumulates per
nanosecond.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench.harness import DEFAULT_DEVICE, add_arguments, head, row
from bench.m7_instructions import TARGETS, instructions, profile

FORWARD = ("conv2d_s8", "conv2d_inplace_s8", "window_s8", "add_s8", "gap_s8", "linear_f32",
           "act_table_s8", "mul_s8", "copy_s8")  # fmt: skip
BACKWARD = ("conv2d_grad_input", "conv2d_update_weight")


def kind(op: object) -> str:
    """An op's kind for the breakdown."""
    if op.kind != "conv":  # type: ignore[attr-defined]
        return str(op.kind)  # type: ignore[attr-defined]
    groups, k = op.attrs["groups"], op.attrs["kernel"]  # type: ignore[attr-defined]
    if groups > 1:
        return f"dw{k}"
    return "pw" if k == 1 else f"k{k}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, supernet=True)
    parser.add_argument("--preset", default="mcunetv3")
    parser.add_argument("--resolution", type=int, default=40)
    parser.add_argument("--kernels", type=Path, help="another kernels/ folder, as m7_instructions")
    parser.add_argument("--target", choices=[*sorted(TARGETS), "host"], default="cortex-m7")
    args = parser.parse_args(argv)

    from tinytune.bundle import BundleRequest, build_bundle, write_bundle
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet(args.supernet)
    candidate = make_preset(args.preset, spec)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=args.resolution))
    bundle = build_bundle(
        BundleRequest(
            candidate,
            ensure_checkpoint(spec),
            get_device(TARGETS.get(args.target, DEFAULT_DEVICE)),
            samples=4,
        )
    )
    with tempfile.TemporaryDirectory(prefix="tt-m7-") as tmp:
        folder = write_bundle(Path(tmp) / "b", bundle.files, bundle.manifest)
        if args.kernels is not None:
            for source in args.kernels.glob("*"):
                if source.suffix in (".c", ".h"):
                    shutil.copy(source, folder / "kernels" / source.name)
        timed = args.target == "host"  # each call the fastest of 200 steps
        measured = profile(folder, 200 if timed else 1, args.target)
    m = measured.measurements[0]
    unit = "ns" if timed else "instructions"

    def cost(seconds: float) -> int:
        return round(1e9 * seconds) if timed else instructions(seconds, measured.machine)

    ops = {op.name: op for op in bundle.net.graph.ops}
    rows: dict[tuple[str, str], int] = {}
    for call in m.per_call:
        key = (call.kernel, kind(ops[call.op]) if call.op in ops else "?")
        rows[key] = rows.get(key, 0) + cost(call.seconds)
    print(f"{args.preset} on {spec.name} at {args.resolution} px: "
          f"{cost(m.train_step_s):,} {unit} per step on the {args.target}")  # fmt: skip
    print(head(["kernel", "layers", unit]))
    for (kernel, layers), n in sorted(rows.items(), key=lambda kv: -kv[1]):
        print(row([f"`{kernel}`", layers, f"{n:,}"]))
    macs: dict[str, int] = {}
    for op in bundle.net.graph.ops:
        macs[kind(op)] = macs.get(kind(op), 0) + op.macs
    forward, total = sum(n for (k, _), n in rows.items() if k in FORWARD), sum(macs.values())
    per = "per ns" if timed else "per instruction"
    print(f"forward: {total:,} multiply-accumulates in {forward:,} {unit}, "
          f"{total / forward:.3f} {per}; by layer kind: {macs}")  # fmt: skip
    # the convolutions' backward: each input gradient as many multiply-accumulates as its
    # forward; each weight gradient one per trained weight and output pixel
    back_macs = back = 0
    for call in m.per_call:
        op = ops.get(call.op)
        if op is None or call.kernel not in BACKWARD:
            continue
        back += cost(call.seconds)
        if call.kernel == "conv2d_grad_input":
            back_macs += op.macs
        else:
            out = bundle.net.graph.tensors[op.output].shape
            back_macs += op.params.trained_weight * out[-1] * out[-2]
    print(f"convolutions' backward: {back_macs:,} multiply-accumulates in {back:,} {unit}, "
          f"{back_macs / back:.3f} {per}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
