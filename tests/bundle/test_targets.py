"""A real candidate's bundle on every target: the host against the simulator bit for bit, the
sanitizers and guard bytes, aarch64, Cortex-M7, Cortex-M4, Cortex-M0+ and RV32IMC under
emulation with the host's output byte for byte, and the Cortex-M7 image's flash and static SRAM
from ``arm-none-eabi-size``.

The candidate: the MCUNetV3-style preset on the smallest ProxylessNAS sub-network at 32 px
(biases of the last half, six expansion convolutions, two of them on 1/8 and 1/4 of their
input channels), with the tiny pre-trained supernet, on the digits data set.
"""

from __future__ import annotations

import re
import struct
import subprocess
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from bench.stack_bound import bundle_bound
from tests.bundle.support import (
    LR,
    build_preset,
    check_restore,
    make,
    needs,
    parse_dump,
    replay,
)
from tinytune.bundle import (
    Bundle,
    BundleRequest,
    build_bundle,
    exported_file_names,
    verify_checksums,
    write_bundle,
)
from tinytune.hwmodels.latency import call_rows
from tinytune.hwmodels.measurements import load_measurements
from tinytune.hwmodels.registry import get_device
from tinytune.hwmodels.stack import stack_table
from tinytune.ir import unrolled
from tinytune.spaces import Candidate, default_subnet, get_supernet, make_preset

pytestmark = pytest.mark.slow

# what the linker script reserves besides .data and .bss
HEAP_BYTES = STACK_BYTES = 8192


def schedule(bundle: Bundle) -> str:
    """The rate's schedule the example trains by (the request's default: halving)."""
    return str(bundle.manifest["training"]["lr_schedule"])


def test_the_bundle_states_the_planned_arena(sparse: tuple[Bundle, Path]) -> None:
    bundle, folder = sparse
    memory = bundle.manifest["memory"]
    assert memory["arena_bytes"] == bundle.program.report.arena_bytes == bundle.model.arena_bytes
    assert memory["patches"] is None  # whole images
    # its constants are the planner's flash, and the search's flash adds the code estimate
    report = bundle.program.report
    assert memory["model_flash_bytes"] == report.flash_bytes == bundle.model.flash_bytes
    assert memory["planner_flash_bytes"] == report.flash_bytes + report.code_bytes
    assert (
        f"#define TT_ARENA_BYTES {memory['arena_bytes']}\n" in (folder / "tt_model.h").read_text()
    )
    assert verify_checksums(folder) == []
    manifest = bundle.manifest
    assert Candidate.from_dict(manifest["candidate"]).key == manifest["candidate_key"]
    assert manifest["device"]["name"] == "stm32f746" and manifest["precision"] == "int8"
    assert manifest["predicted_latency"]["train_step_s"] > 0
    assert manifest["memory"]["predicted_peak_sram_bytes"] <= memory["arena_bytes"]
    assert {"tt_model.c", "kernels/tt_int8.h", "Makefile", "README.md"} <= set(manifest["files"])
    assert set(bundle.files) == set(manifest["files"]) == exported_file_names()  # known early
    assert set(bundle.files) == set(manifest["files"]) == exported_file_names()  # known early


def test_the_bundle_says_how_to_feed_it_what_its_classes_are_and_what_its_example_shows(
    sparse: tuple[Bundle, Path],
) -> None:
    import PIL

    bundle, folder = sparse
    manifest = bundle.manifest
    assert manifest["dataset"]["class_names"] == [str(d) for d in range(10)]
    header = (folder / "tt_model.h").read_text()
    names = ", ".join(f'"{d}"' for d in range(10))
    assert f"#define TT_CLASS_NAMES {{ \\\n    {names} \\\n}}" in header
    assert f'#define TT_MODEL_ID "{bundle.model.model_id}"' in header
    assert manifest["params_blob"]["model_id"] == bundle.model.model_id
    assert f"#define TT_PARAMS_BYTES {bundle.model.params_bytes}\n" in header
    feeding = manifest["input"]
    assert feeding["shape"] == [3, 32, 32] and feeding["pillow"] == PIL.__version__
    assert feeding["rule"].startswith("scikit-learn's 8x8 digits: 0..16 per pixel")
    readme = " ".join((folder / "README.md").read_text().split())
    assert f"This model's samples were {feeding['rule']}." in readme
    assert 'the classes, in the order of the labels and the logits: "0", "1"' in readme.lower()
    example = manifest["example"]
    assert example["smoke_test"] and (example["train_samples"], example["epochs"]) == (6, 2)
    correct = example["expected_correct"]
    assert f"expected after 2 epochs: {correct[-1]}/6 (the integer simulator's figure" in readme
    assert "a smoke test, not the search's accuracy" in readme


@needs("host")
def test_host_steps_match_the_simulator(
    sparse: tuple[Bundle, Path], host_outputs: dict[str, str]
) -> None:
    bundle, _ = sparse
    dump = parse_dump(host_outputs["dump"])
    assert set(dump.params) == set(bundle.program.params)
    assert schedule(bundle) == "halving"  # the replay follows the halvings
    assert replay(bundle.net, LR, bundle.train, bundle.evaluation, dump, schedule(bundle)) == 12
    assert host_outputs["dump"].startswith(host_outputs["plain"].split("epoch 1")[0])


@needs("host")
def test_the_host_saves_resets_and_restores_what_it_learned(
    sparse: tuple[Bundle, Path], host_outputs: dict[str, str]
) -> None:
    """The example saves its parameters, re-inits (the initial accuracy again), restores them
    (the accuracy before the save), and its counts are the simulator's, which the manifest
    states; the printed CRC-32 is zlib's of the blob the trained parameters make (the dump
    prints them after the restore, and the replay checked them against the simulator)."""
    bundle, _ = sparse
    restore = check_restore(host_outputs["plain"], bundle.model.params_bytes)
    dump = parse_dump(host_outputs["dump"])
    expected = bundle.manifest["example"]["expected_correct"]
    assert [correct for correct, _ in dump.epochs] == expected == list(bundle.example.correct)
    assert restore.initial == expected[0] and restore.restored == expected[-1]
    payload = b"".join(data for _, data in dump.params.values())  # in tt_param order
    header = b"TTPB" + struct.pack("<H", 1) + b"\xff\xfe" + bytes.fromhex(bundle.model.model_id)
    header += struct.pack("<I", len(payload))
    assert len(header) + 4 + len(payload) == restore.blob_bytes
    assert zlib.crc32(header + payload) == restore.crc
    assert "(simulator: " in host_outputs["plain"]


@needs("host")
def test_sanitized_host_build_runs_clean_with_intact_guards(
    sparse: tuple[Bundle, Path], host_outputs: dict[str, str]
) -> None:
    _, folder = sparse
    out = make(folder, "run-host-asan")
    assert out == host_outputs["plain"] + "guard bytes intact\n"


EMULATED = {
    "aarch64": "qemu-aarch64, the Linux paths",
    "cortex-m4": "an nRF52840's core: the Cortex-M paths with the DSP extension, FPU v4, on "
    "qemu-system-arm's MPS2-AN386",
    "cortex-m0plus": "an RP2040's core: Armv6-M, no FPU (the float32 classifier in software), "
    "on MPS2-AN385, a Cortex-M3 running the same instructions",
    "rv32imc": "an ESP32-C3's instruction set, no FPU, picolibc on qemu-system-riscv32's virt",
}


@pytest.mark.parametrize(
    "target", [pytest.param(t, marks=needs(t), id=t) for t in EMULATED]
)  # fmt: skip
def test_an_emulated_target_prints_what_the_host_prints(
    sparse: tuple[Bundle, Path], host_outputs: dict[str, str], target: str
) -> None:
    """Each target of :data:`EMULATED` prints the host's bytes, plain and dumped."""
    bundle, folder = sparse
    plain = make(folder, f"run-{target}")
    assert plain == host_outputs["plain"]
    check_restore(plain, bundle.model.params_bytes)  # saved, re-initialised, restored
    dump = make(folder, f"run-{target}", build="build-dump", defs="-DTT_DUMP")
    assert dump == host_outputs["dump"]


def _sections(elf: Path) -> dict[str, int]:
    out = subprocess.run(
        ["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True, check=True
    ).stdout
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\.\S+)\s+(\d+)\s+\d+$", out, re.M)}


def _symbol_sizes(elf: Path) -> dict[str, int]:
    out = subprocess.run(
        ["arm-none-eabi-nm", "-S", "--defined-only", str(elf)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    sizes: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4:
            sizes[parts[3]] = int(parts[1], 16)
    return sizes


@needs("cortex-m7")
def test_cortex_m7_prints_what_the_host_prints_and_fits_the_device(
    sparse: tuple[Bundle, Path], host_outputs: dict[str, str]
) -> None:
    bundle, folder = sparse
    device = get_device("stm32f746")
    plain = make(folder, "run-cortex-m7")
    assert plain == host_outputs["plain"]
    check_restore(plain, bundle.model.params_bytes)  # saved, re-initialised, restored
    dump = make(folder, "run-cortex-m7", build="build-dump", defs="-DTT_DUMP")
    assert dump == host_outputs["dump"]

    elf = folder / "build" / "cortex-m7" / "train.elf"
    berkeley = make(folder, "size").splitlines()[-1].split()
    text, data, bss = (int(v) for v in berkeley[:3])
    sections = _sections(elf)
    symbols = _symbol_sizes(elf)
    model = bundle.model
    # the buffers are exactly what the model states
    assert symbols["tt_arena"] == model.arena_bytes == bundle.manifest["memory"]["arena_bytes"]
    assert symbols["tt_scratch"] == model.scratch_bytes
    assert symbols["tt_exp"] == model.exponent_bytes
    assert symbols["tt_saved"] == model.params_bytes == bundle.manifest["params_blob"]["bytes"]
    # the static data the manifest counts beside the arena: the scratch, the exponents and the
    # rate's two words, every variable of the library's sources (its kernels have none)
    memory = bundle.manifest["memory"]
    library = ("tt_arena", "tt_scratch", "tt_exp", "tt_lr_halvings", "tt_lr_scale")
    assert sum(symbols[s] for s in library) == memory["arena_bytes"] + memory["static_bytes"]
    assert memory["stack_bytes"] == stack_table()["targets"]["cortex-m7"]["stack_bytes"]
    total = memory["arena_bytes"] + memory["static_bytes"] + memory["stack_bytes"]
    assert memory["sram_bytes"] == total
    assert sections[".heap"] == HEAP_BYTES and sections[".stack"] == STACK_BYTES
    # static SRAM = arena + scratch + exponents + the example's saved blob + heap and stack
    # reserves + the C library's data (newlib's reentrancy structures, stdio state): a few KB
    stated = model.arena_bytes + model.scratch_bytes + model.exponent_bytes + model.params_bytes
    library = data + bss - stated - HEAP_BYTES - STACK_BYTES
    assert bss == sections[".bss"] + HEAP_BYTES + STACK_BYTES
    assert 0 < library < 4096, library
    assert data + bss <= device.sram_bytes
    # flash: code + constants + the example's samples + initialised data
    assert text + data <= device.flash_bytes
    assert model.flash_bytes < text


STACK_TARGETS = ("cortex-m7", "cortex-m4", "cortex-m0plus", "rv32imc", "aarch64")
on_stack_targets = pytest.mark.parametrize(
    "target", [pytest.param(t, marks=needs(t), id=t) for t in STACK_TARGETS]
)


def check_stack(folder: Path, target: str) -> tuple[int, int]:
    """On ``target``: the stack painted under the step and the compiler's bound of the bundle
    in ``folder``, each at most the table's figure, which the manifest counts (returned: the
    painted and the bound)."""
    out = make(folder, f"run-{target}", build="build-paint", defs="-DTT_STACK_PAINT")
    found = {name: int(n) for n, name in re.findall(r"(\d+) B in (tt_\w+)", out)}
    assert {"tt_train_step", "tt_predict", "tt_quantize_rgb888"} <= set(found), out
    painted = max(found.values())
    bound, chain = bundle_bound(folder, target)
    table = stack_table()["targets"][target]["stack_bytes"]
    assert 0 < painted <= bound <= table, (target, painted, bound, table, chain)
    # what the run leaves unreached: paths its geometry does not take (a one-channel in-place
    # depthwise's dense path), other bundles' larger frames, bytes a frame holds but not writes
    assert table - painted <= (1024 if target == "aarch64" else 256), (target, painted, table)
    return painted, bound


@on_stack_targets
def test_the_stack_is_at_most_what_the_manifest_counts(
    sparse: tuple[Bundle, Path], target: str
) -> None:
    """Painted under QEMU, and bounded by the compiler: the deepest chain of the bundle's
    calls (its frames from -fstack-usage), within the table the search and the manifest
    count; on the Cortex-M0+ the run reaches the bound to the byte."""
    _, folder = sparse
    painted, bound = check_stack(folder, target)
    if target == "cortex-m0plus":
        assert painted == bound


@pytest.fixture(
    scope="module", params=[("tinytl", "stm32f746"), ("full", "stm32h743")], ids=["tinytl", "full"]
)
def scheme(
    request: pytest.FixtureRequest, checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Bundle, Path]:
    """Lite residual branches (GroupNorm in float32), and every weight trained (no frozen input
    channels): a bundle of each."""
    preset, device = request.param
    folder = tmp_path_factory.mktemp("schemes") / preset
    return build_preset(preset, checkpoint, folder, device), folder


@pytest.fixture(scope="module")
def scheme_host(scheme: tuple[Bundle, Path]) -> str:
    """What ``scheme``'s example prints on the host with -DTT_DUMP."""
    _, folder = scheme
    return make(folder, "run-host", build="build-host", defs="-DTT_DUMP")


@needs("host")
def test_every_scheme_matches_the_simulator_on_the_host(
    scheme: tuple[Bundle, Path], scheme_host: str
) -> None:
    bundle, _ = scheme
    dump = parse_dump(scheme_host)
    assert replay(bundle.net, LR, bundle.train, bundle.evaluation, dump, schedule(bundle)) == 12


@on_stack_targets
def test_every_scheme_keeps_its_stack_within_the_table(
    scheme: tuple[Bundle, Path], target: str
) -> None:
    check_stack(scheme[1], target)


@needs("host")
@needs("cortex-m7")
def test_cortex_m_kernels_match_the_host_on_every_scheme(
    scheme: tuple[Bundle, Path], scheme_host: str
) -> None:
    """The Cortex-M paths of the 1x1 convolution and its input gradient (registers instead of
    vectorised tiles) give the host's bytes."""
    _, folder = scheme
    assert make(folder, "run-cortex-m7", build="build-m7", defs="-DTT_DUMP") == scheme_host


@needs("host")
@needs("cortex-m0plus")
@needs("rv32imc")
def test_cores_without_an_fpu_match_the_host_on_every_scheme(
    scheme: tuple[Bundle, Path], scheme_host: str
) -> None:
    """The Cortex-M0+ and RV32IMC take the same register-blocked paths (-DTT_CORTEX_M=1) and
    compute the classifier and GroupNorm in software floating point: the host's bytes."""
    _, folder = scheme
    assert make(folder, "run-cortex-m0plus", build="build-m0p", defs="-DTT_DUMP") == scheme_host
    assert make(folder, "run-rv32imc", build="build-rv32", defs="-DTT_DUMP") == scheme_host


@pytest.fixture(scope="module")
def mbv3(
    mbv3_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Bundle, Path, str]:
    """The MCUNetV3-style preset on the smallest MobileNetV3 sub-network (h-swish and h-sigmoid
    through their tables, squeeze-and-excitation forward and backward): the bundle, its folder
    and what its example prints on the host with -DTT_DUMP."""
    spec = get_supernet("ofa-mbv3-w0.35")
    folder = tmp_path_factory.mktemp("mbv3") / "mbv3"
    bundle = build_preset("mcunetv3", mbv3_checkpoint, folder, spec=spec)
    return bundle, folder, make(folder, "run-host", build="build-host", defs="-DTT_DUMP")


@needs("host")
@needs("aarch64")
@needs("cortex-m7")
@needs("cortex-m4")
def test_a_mobilenetv3_candidate_matches_the_simulator_on_every_target(
    mbv3: tuple[Bundle, Path, str],
) -> None:
    """The host matches the simulator; aarch64, the Cortex-M7 and the Cortex-M4F print the
    host's bytes."""
    bundle, folder, host = mbv3
    kernels = {call.kernel for call in bundle.program.calls}
    assert {"act_table_s8", "grad_act_table", "mul_s8", "mul_grad_x", "mul_grad_scale"} <= kernels
    assert (
        replay(bundle.net, LR, bundle.train, bundle.evaluation, parse_dump(host), schedule(bundle))
        == 12
    )
    assert make(folder, "run-aarch64", build="build-a64", defs="-DTT_DUMP") == host
    assert make(folder, "run-cortex-m7", build="build-m7", defs="-DTT_DUMP") == host
    assert make(folder, "run-cortex-m4", build="build-m4", defs="-DTT_DUMP") == host


@needs("host")
@needs("cortex-m0plus")
@needs("rv32imc")
def test_a_mobilenetv3_candidate_prints_the_hosts_bytes_without_an_fpu(
    mbv3: tuple[Bundle, Path, str],
) -> None:
    """The tables, the squeeze-and-excitation products and their gradients on the Cortex-M0+
    and RV32IMC."""
    _, folder, host = mbv3
    assert make(folder, "run-cortex-m0plus", build="build-m0p", defs="-DTT_DUMP") == host
    assert make(folder, "run-rv32imc", build="build-rv32", defs="-DTT_DUMP") == host


@needs("host")
@needs("aarch64")
@needs("cortex-m7")
def test_an_efficientnet_lite0_candidate_matches_the_simulator_and_fits_the_stm32f746(
    tmp_path: Path,
) -> None:
    """EfficientNet-Lite0 with its ImageNet weights, cut after its third stage (block 7), at
    48 px, the MCUNetV3-style scheme: the host matches the simulator, aarch64 and the Cortex-M7
    print the host's bytes, the arena is the planner's, and the image fits the device."""
    from tinytune.models.pretrained import pretrained_weights

    spec = get_supernet("efficientnet-lite0")
    subnet = replace(default_subnet(spec), resolution=48)
    candidate = make_preset("mcunetv3", spec, replace(subnet, stages=subnet.stages[:3]))
    device = get_device("stm32f746")
    folder = tmp_path / "lite0"
    bundle = build_bundle(
        BundleRequest(candidate, pretrained_weights(spec), device, samples=6, epochs=2, lr=LR)
    )
    write_bundle(folder, bundle.files, bundle.manifest)
    memory = bundle.manifest["memory"]
    assert memory["arena_bytes"] == bundle.program.report.arena_bytes == bundle.model.arena_bytes
    host = make(folder, "run-host", build="build-host", defs="-DTT_DUMP")
    assert (
        replay(bundle.net, LR, bundle.train, bundle.evaluation, parse_dump(host), schedule(bundle))
        == 12
    )
    assert make(folder, "run-aarch64", build="build-a64", defs="-DTT_DUMP") == host
    assert make(folder, "run-cortex-m7", build="build-m7", defs="-DTT_DUMP") == host
    symbols = _symbol_sizes(folder / "build-m7" / "cortex-m7" / "train.elf")
    assert symbols["tt_arena"] == memory["arena_bytes"] <= 256 * 1024
    text, data = (int(v) for v in make(folder, "size", build="build-m7").split()[-6:-4])
    assert text + data <= device.flash_bytes


@needs("host")
@needs("aarch64")
@needs("cortex-m7")
def test_a_patched_lite0_candidate_at_128_px_matches_the_whole_image_on_every_target(
    tmp_path: Path,
) -> None:
    """EfficientNet-Lite0 cut after block 7 at 128 px, the MCUNetV3-style scheme: 496 KB on
    whole images, so the search runs its frozen prefix patch by patch within 256 KB. The
    host's step replays against the simulator, which computes whole images (so the patched
    prefix leaves the same bytes); aarch64 and the Cortex-M7 print the host's bytes; the arena
    is the planner's."""
    from tinytune.evaluators.hardware import HardwareConfig, HardwareEvaluator
    from tinytune.models.pretrained import pretrained_weights

    spec = get_supernet("efficientnet-lite0")
    subnet = replace(default_subnet(spec), resolution=128)
    whole = make_preset("mcunetv3", spec, replace(subnet, stages=subnet.stages[:3]))
    device = get_device("stm32f746")
    hw = HardwareEvaluator(spec, 10, HardwareConfig(), device, 256 * 1024)
    candidate = hw.schedule(whole)
    assert candidate.schedule.patched and hw(whole).arena_bytes > 256 * 1024
    folder = tmp_path / "patched"
    bundle = build_bundle(
        BundleRequest(candidate, pretrained_weights(spec), device, samples=2, epochs=2, lr=LR)
    )
    write_bundle(folder, bundle.files, bundle.manifest)
    memory = bundle.manifest["memory"]
    assert memory["arena_bytes"] == hw(candidate).arena_bytes == bundle.model.arena_bytes
    plan = bundle.program.report.patches
    assert plan is not None
    patches = memory["patches"]
    assert (patches["per_side"], patches["blocks"]) == (
        candidate.schedule.patches,
        candidate.schedule.blocks,
    )
    assert patches["stage_macs_patched"] > patches["stage_macs_whole"]
    host = make(folder, "run-host", build="build-host", defs="-DTT_DUMP")
    replayed = replay(
        bundle.net, LR, bundle.train, bundle.evaluation, parse_dump(host), schedule(bundle)
    )
    assert replayed == 4
    assert make(folder, "run-aarch64", build="build-a64", defs="-DTT_DUMP") == host
    assert make(folder, "run-cortex-m7", build="build-m7", defs="-DTT_DUMP") == host
    symbols = _symbol_sizes(folder / "build-m7" / "cortex-m7" / "train.elf")
    assert symbols["tt_arena"] == memory["arena_bytes"] <= 256 * 1024
    # the profile's graph is the unrolled one: every call, each patch's apart, fits its op
    make(folder, "run-profile-host", build="build-profile", PROFILE_STEPS=1)
    (measured,) = load_measurements(folder / "build-profile" / "profile-host.json").measurements
    assert measured.graph.to_json() == unrolled(bundle.net.graph, plan).to_json()
    ops = {op.name for op in measured.graph.ops}
    assert {c.op for c in measured.per_call} <= ops and "stages_.0.ops.stem@0" in ops
    rows, seconds = call_rows(
        measured.graph, [(c.op, c.kernel, c.seconds) for c in measured.per_call]
    )
    assert len(rows) == len(seconds) > len(bundle.net.graph.ops)
