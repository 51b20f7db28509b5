"""Build bundles for tests, run their Makefile targets, and replay their dumps in the simulator.

A bundle built with ``DEFS=-DTT_DUMP`` prints, besides its epoch lines, every training step's
sample, loss and logits (the logits through ``tt_predict`` just before the step, with the same
parameters), the trained parameters at the end and the logits of every evaluation sample, all
as hexadecimal bytes. :func:`replay` runs the same steps in :func:`tinytune.quant.train_step`
and checks every one of those bytes, and the accuracy printed after each epoch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tinytune.bundle import (
    BUNDLE_FORMAT,
    Bundle,
    BundleRequest,
    Samples,
    build_bundle,
    c_sources,
    write_bundle,
)
from tinytune.hwmodels import MemoryReport
from tinytune.lowering.program import StepProgram, lower_step
from tinytune.quant import QConv, QGroupNorm, QLinear, QuantizedNet, forward, train_step
from tinytune.quant.schedule import epoch_lr
from tinytune.spaces import SupernetSpec, get_supernet, make_preset

SPEC = get_supernet("ofa-proxyless-w0.35")
LR = 0.01

TOOLS = {
    "host": ("make", "gcc"),
    "aarch64": ("make", "aarch64-linux-gnu-gcc", "qemu-aarch64"),
    "cortex-m7": (
        "make",
        "arm-none-eabi-gcc",
        "arm-none-eabi-size",
        "arm-none-eabi-nm",
        "qemu-system-arm",
    ),
    "cortex-m4": ("make", "arm-none-eabi-gcc", "qemu-system-arm"),
    "cortex-m0plus": ("make", "arm-none-eabi-gcc", "qemu-system-arm"),
    "rv32imc": ("make", "riscv64-unknown-elf-gcc", "qemu-system-riscv32"),
    "cmake": ("cmake", "gcc"),
}
RUN_ENV = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0"}


# the C library a target links, by a file its compiler finds when the library is installed
LIBRARIES = {"rv32imc": ("riscv64-unknown-elf-gcc", "picolibc.specs", "picolibc")}


def _library_missing(target: str) -> list[str]:
    if target not in LIBRARIES or shutil.which(LIBRARIES[target][0]) is None:
        return []
    compiler, name, library = LIBRARIES[target]
    found = subprocess.run(
        [compiler, f"-print-file-name={name}"], capture_output=True, text=True
    ).stdout.strip()
    return [] if Path(found).is_file() else [library]


def needs(target: str) -> pytest.MarkDecorator:
    """Skip unless the tools of ``target`` (and the C library it links) are installed."""
    missing = [t for t in TOOLS[target] if shutil.which(t) is None] + _library_missing(target)
    return pytest.mark.skipif(
        bool(missing), reason=f"{target} needs {', '.join(missing)}, not installed here"
    )


def make(
    folder: Path, target: str, *, build: str = "build", defs: str = "", **variables: object
) -> str:
    """``make -s TARGET`` in the bundle with warnings as errors (and any other ``variables``,
    e.g. ``PROFILE_STEPS=2``); its stdout."""
    cmd = ["make", "-s", "-C", str(folder), target, f"BUILD={build}", "EXTRA_CFLAGS=-Werror"]
    if defs:
        cmd.append(f"DEFS={defs}")
    cmd += [f"{name}={value}" for name, value in variables.items()]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=RUN_ENV, stdin=subprocess.DEVNULL, timeout=900
    )
    if done.returncode:
        if "asan" in target and re.search(
            r"cannot find -l[a-z]*san|libasan|libubsan", done.stderr
        ):
            pytest.skip(f"gcc cannot build with sanitizers here: {done.stderr.splitlines()[-1]}")
        pytest.fail(f"make {target} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def build_preset(
    preset: str,
    checkpoint: Path,
    out: Path,
    device_name: str = "stm32f746",
    spec: SupernetSpec = SPEC,
) -> Bundle:
    """The bundle of ``preset`` on ``spec``'s default sub-network at 32 px for a device
    (6 samples, 2 epochs, rate :data:`LR`), written to ``out``."""
    from tinytune.hwmodels.registry import get_device

    candidate = make_preset(preset, spec)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=32))
    device = get_device(device_name)
    bundle = build_bundle(BundleRequest(candidate, checkpoint, device, samples=6, epochs=2, lr=LR))
    write_bundle(out, bundle.files, bundle.manifest)
    return bundle


def write_test_bundle(
    folder: Path,
    net: QuantizedNet,
    train_images: torch.Tensor,
    eval_images: torch.Tensor,
    *,
    lr: float = 0.01,
    epochs: int = 2,
    schedule: str = "constant",
    class_names: list[str] | None = None,
    report: MemoryReport | None = None,
) -> tuple[StepProgram, Samples, Samples]:
    """A bundle of ``net`` (a small test network) on float images, labelled round-robin (its
    classes named ``class_names``, else "class 0", "class 1", ...), over the arena of
    ``report`` (default: the whole-image plan)."""
    n_classes = net.graph.n_classes
    program = lower_step(net, lr, report)

    def samples(x: torch.Tensor, split: str) -> Samples:
        images = net.quantize_input(x).numpy().astype(np.int8)
        return Samples(images, np.arange(len(images)) % n_classes, split)

    train, evaluation = samples(train_images, "train"), samples(eval_images, "test")
    files, _, _ = c_sources(
        program,
        net,
        train,
        evaluation,
        epochs=epochs,
        title="a test network",
        data="test",
        class_names=class_names or [f"class {i}" for i in range(n_classes)],
        input_rule="random test images",
        schedule=schedule,
    )
    write_bundle(folder, files, {"format": BUNDLE_FORMAT})
    return program, train, evaluation


@dataclass
class Dump:
    """What a ``TT_DUMP`` run printed."""

    epochs: list[tuple[int, int]] = field(default_factory=list)  # (correct, total) per epoch
    steps: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # sample, loss, logits
    params: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # name → (dtype, bytes)
    evals: list[tuple[int, bytes]] = field(default_factory=list)  # class, logits


_EPOCH = re.compile(
    r"^epoch (\d+) loss \S+ accuracy (\d+)/(\d+) \d+\.\d\d%(?: \(simulator: (\d+)/\3\))?$"
)


def parse_dump(text: str) -> Dump:
    dump = Dump()
    for line in text.splitlines():
        words = line.split()
        if m := _EPOCH.match(line):
            assert int(m[1]) == len(dump.epochs), line
            dump.epochs.append((int(m[2]), int(m[3])))
        elif words[0] == "step":
            assert int(words[1]) == len(dump.steps), line
            dump.steps.append((int(words[3]), bytes.fromhex(words[5]), bytes.fromhex(words[7])))
        elif words[0] == "param":
            dump.params[words[1]] = (words[2], bytes.fromhex(words[3]))
        elif words[0] == "eval":
            assert int(words[1]) == len(dump.evals), line
            dump.evals.append((int(words[3]), bytes.fromhex(words[5])))
    return dump


_SAVED = re.compile(
    r"^saved (\d+) bytes of trained parameters \(tt_params_save: (-?\d+)\), CRC-32 ([0-9a-f]{8})$"
)
_RESET = re.compile(
    r"^after tt_model_init: accuracy (\d+)/(\d+) \S+ \(before training: (\d+)/\2\)$"
)
_RESTORED = re.compile(
    r"^after tt_params_load \((-?\d+)\): accuracy (\d+)/(\d+) \S+ \(before the save: (\d+)/\3\)$"
)


@dataclass(frozen=True)
class Restore:
    """What the example printed of its save, reset and restore."""

    blob_bytes: int
    crc: int
    initial: int  # correct evaluations before training, and again after tt_model_init
    restored: int  # after tt_params_load, as before the save


def check_restore(text: str, params_bytes: int) -> Restore:
    """Assert that the example's output saved ``params_bytes`` bytes, that the reset gave the
    accuracy before training again and the restore the accuracy after the last epoch (its
    counts, as printed before the save), and that it ends with its smoke test passed."""
    lines = text.splitlines()
    epochs = [m for line in lines if (m := _EPOCH.match(line))]
    (saved,) = [m for line in lines if (m := _SAVED.match(line))]
    (reset,) = [m for line in lines if (m := _RESET.match(line))]
    (restored,) = [m for line in lines if (m := _RESTORED.match(line))]
    assert int(saved[1]) == params_bytes and saved[2] == "0"
    assert reset[1] == reset[3] == epochs[0][2], "the reset is not the initial accuracy"
    assert restored[1] == "0" and restored[2] == restored[4] == epochs[-1][2], "not restored"
    assert lines[-1].startswith("smoke test passed") or lines[-1] == "guard bytes intact"
    return Restore(int(saved[1]), int(saved[3], 16), int(reset[1]), int(restored[2]))


def trained_state(net: QuantizedNet, names: list[str]) -> dict[str, bytes]:
    """The simulator's values of the trained parameter tensors ``names`` (as the lowering
    names them), as the bytes the C arena holds."""
    layers = {layer.op.name: layer for layer in net.layers}
    out: dict[str, bytes] = {}
    for name in names:
        op, part = name.rsplit(".", 1)
        layer = layers[op]
        if isinstance(layer, QConv):
            if part == "weight_train":
                value = layer.split_weight()[0].numpy().astype(np.int8)
            else:
                value = layer.bias.numpy().astype(np.int32)
        else:
            assert isinstance(layer, QLinear | QGroupNorm)
            value = getattr(layer, part).astype(np.float32)
        out[name] = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
    return out


def _correct(net: QuantizedNet, evaluation: Samples) -> int:
    logits = forward(net, torch.from_numpy(evaluation.images.astype(np.int64))).logits
    return int((logits.argmax(axis=1) == evaluation.labels).sum())


def replay(
    net: QuantizedNet,
    lr: float,
    train: Samples,
    evaluation: Samples,
    dump: Dump,
    schedule: str = "constant",
) -> int:
    """Replay the dumped steps on a copy of ``net`` in the simulator, each epoch at its rate
    under ``schedule``, and assert that every dumped byte equals it: the logits of every step
    (its forward pass), the loss, the correct evaluation count after every epoch, the trained
    parameters and the final evaluation logits. Returns the number of steps."""
    sim = net.clone()
    xs = torch.from_numpy(train.images.astype(np.int64))
    n = len(train)
    assert len(dump.steps) == n * (len(dump.epochs) - 1) > 0
    assert dump.epochs[0] == (_correct(sim, evaluation), len(evaluation))
    for k, (sample, loss_bits, logits) in enumerate(dump.steps):
        rate = epoch_lr(lr, k // n, schedule)
        record = train_step(sim, xs[sample : sample + 1], int(train.labels[sample]), rate)
        expected = record.forward.logits[0].astype("<f4").tobytes()
        assert logits == expected, f"step {k}: logits differ"
        loss = float(np.frombuffer(loss_bits, "<f4")[0])
        assert loss == pytest.approx(record.loss, rel=1e-5, abs=1e-6), f"step {k}: loss"
        if (k + 1) % n == 0:
            epoch = (k + 1) // n
            assert dump.epochs[epoch] == (_correct(sim, evaluation), len(evaluation)), epoch
    names = list(dump.params)
    state = trained_state(sim, names)
    for name in names:
        assert dump.params[name][1] == state[name], f"trained parameter {name} differs"
    final = forward(sim, torch.from_numpy(evaluation.images.astype(np.int64))).logits
    assert len(dump.evals) == len(evaluation)
    for i, (cls, logits) in enumerate(dump.evals):
        assert logits == final[i].astype("<f4").tobytes(), f"evaluation {i}: logits differ"
        assert cls == int(np.argmax(final[i]))
    return len(dump.steps)
