"""The profiler in every bundle: its measurement file on the host, on aarch64 and on the
Cortex-M7, M4F, M0+ and RV32IMC under QEMU, read by tinytune's own loader, against the bundle's
program and graph; exact and repeatable instruction counts under QEMU."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.bundle.support import make, needs
from tinytune.bundle import Bundle, BundleRequest, build_bundle, write_bundle
from tinytune.evaluators import HardwareConfig, HardwareEvaluator
from tinytune.hwmodels.latency import KERNEL_PHASES
from tinytune.hwmodels.measurements import MeasurementFile, load_measurements
from tinytune.hwmodels.registry import get_device
from tinytune.spaces import Candidate, get_supernet, make_preset

pytestmark = pytest.mark.slow

SPEC = get_supernet("ofa-proxyless-w0.35")


@pytest.fixture(scope="module")
def bundle(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Bundle, Path]:
    candidate = make_preset("mcunetv3", SPEC)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=32))
    built = build_bundle(BundleRequest(candidate, checkpoint, get_device("stm32f746"), samples=4))
    folder = tmp_path_factory.mktemp("profiled") / "mcunetv3"
    write_bundle(folder, built.files, built.manifest)
    return built, folder


def _profile(folder: Path, target: str, steps: int, **variables: str) -> MeasurementFile:
    make(
        folder,
        f"run-profile-{target}",
        build=f"build-{target}-{steps}",
        PROFILE_STEPS=steps,
        **variables,
    )
    out = folder / f"build-{target}-{steps}" / f"profile-{target}.json"
    json.loads(out.read_text())  # plain JSON
    return load_measurements(out)


def _check_against_bundle(measured: MeasurementFile, built: Bundle, steps: int) -> None:
    assert measured.engine == "bundle" and measured.precision == "int8"
    (m,) = measured.measurements
    assert m.name == built.manifest["candidate_key"]
    calls = built.program.calls
    assert [(c.op, c.kernel) for c in m.per_call] == [(c.op, c.kernel) for c in calls]
    assert {c.kernel for c in calls} <= set(KERNEL_PHASES)
    # the graph is the one the search traced and planned
    hw = HardwareEvaluator(SPEC, 10, HardwareConfig(precision="int8"))
    _, graph = hw.cost_with_graph(Candidate.from_dict(built.manifest["candidate"]))
    assert m.graph.to_json() == graph.to_json()
    assert len(m.samples) == steps
    assert m.train_step_s == min(m.samples)
    assert min(m.samples) <= m.train_step_median_s <= max(m.samples)
    # each call's fastest over the steps: their sum is at most the fastest step
    assert 0 < sum(c.seconds for c in m.per_call) <= m.train_step_s
    assert 0 < m.inference_s < m.train_step_s


@needs("host")
def test_host_profile_is_a_measurement_file_of_the_bundle(bundle: tuple[Bundle, Path]) -> None:
    built, folder = bundle
    measured = _profile(folder, "host", 10)
    assert measured.device == "host"
    assert measured.machine["counter"] == "clock_gettime(CLOCK_MONOTONIC)"
    # the manifest says which engine predicted the step: the bundle's own kernels
    predicted = built.manifest["predicted_latency"]
    assert predicted["engine"] == "bundle"
    _check_against_bundle(measured, built, 10)


@needs("aarch64")
def test_aarch64_profile_runs_under_emulation(bundle: tuple[Bundle, Path]) -> None:
    built, folder = bundle
    # wall-clock times under emulation: the fastest of 5, so that a pause of a busy machine
    # does not put a prediction above a training step
    measured = _profile(folder, "aarch64", 5, PROFILE_TARGET="rpi4")
    assert measured.machine["arch"] == "aarch64"
    assert measured.device == "rpi4"  # named for the board, as calibrate --device rpi4 needs
    _check_against_bundle(measured, built, 5)


@needs("cortex-m7")
def test_cortex_m7_profile_counts_instructions_exactly_and_repeatably(
    bundle: tuple[Bundle, Path],
) -> None:
    built, folder = bundle
    first = _profile(folder, "cortex-m7", 3)
    # the DWT is not emulated: the profiler fell back on the board's timer, 40 instructions a
    # tick under -icount shift=0, written at 1 cycle per instruction and 216 MHz
    machine = first.machine
    assert "CMSDK timer 0" in machine["counter"] and machine["arch"] == "armv7e-m"
    assert machine["cycles_per_instruction"] == 1.0 and machine["clock_hz"] == 216e6
    assert machine["seconds_per_tick"] == pytest.approx(40 / 216e6, rel=1e-9)
    assert first.device == "stm32f746"
    _check_against_bundle(first, built, 3)
    (m,) = first.measurements
    ticks = [s / machine["seconds_per_tick"] for s in (m.train_step_s, *m.samples)]
    assert all(abs(t - round(t)) < 1e-3 for t in ticks)  # whole ticks: a count, not a time
    # a second run counts the same instructions, call by call
    (again,) = _profile(folder, "cortex-m7", 3).measurements
    assert again.samples == m.samples
    assert [c.seconds for c in again.per_call] == [c.seconds for c in m.per_call]


@needs("cortex-m4")
def test_cortex_m4_profile_of_an_nrf52840_bundle(
    checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The Cortex-M4F image (MPS2-AN386) of an nRF52840 bundle counts instructions the same
    way, at the nRF52840's 64 MHz; it is what ``tinytune calibrate --device nrf52840`` reads."""
    candidate = make_preset("mcunetv3", SPEC)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=32))
    built = build_bundle(BundleRequest(candidate, checkpoint, get_device("nrf52840"), samples=4))
    folder = tmp_path_factory.mktemp("profiled-m4") / "mcunetv3"
    write_bundle(folder, built.files, built.manifest)
    measured = _profile(folder, "cortex-m4", 2)
    machine = measured.machine
    assert "CMSDK timer 0" in machine["counter"] and machine["arch"] == "armv7e-m"
    assert machine["clock_hz"] == 64e6 and measured.device == "nrf52840"
    _check_against_bundle(measured, built, 2)


@pytest.mark.parametrize(
    ("target", "device", "arch", "counter", "instructions_a_tick"),
    [
        pytest.param(
            "cortex-m0plus", "rp2040", "armv6-m", "CMSDK timer 0", 40, marks=needs("cortex-m0plus")
        ),
        pytest.param("rv32imc", "esp32c3", "rv32", "instret", 1, marks=needs("rv32imc")),
    ],
)
def test_cores_without_a_cycle_counter_under_qemu_count_instructions_exactly(
    checkpoint: Path,
    tmp_path_factory: pytest.TempPathFactory,
    target: str,
    device: str,
    arch: str,
    counter: str,
    instructions_a_tick: int,
) -> None:
    """A bundle of the RP2040 on the Cortex-M0+ image (the MPS2 timer: Armv6-M has no cycle
    counter) and of the ESP32-C3 on the RV32IMC image (the instret counter), at the device's
    clock: whole instruction counts, the same on a second run; what ``tinytune calibrate
    --device rp2040`` or ``esp32c3`` reads."""
    candidate = make_preset("mcunetv3", SPEC)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=32))
    profile = get_device(device)
    built = build_bundle(BundleRequest(candidate, checkpoint, profile, samples=4))
    folder = tmp_path_factory.mktemp(f"profiled-{target}") / "mcunetv3"
    write_bundle(folder, built.files, built.manifest)
    first = _profile(folder, target, 2)
    machine = first.machine
    assert counter in machine["counter"] and machine["arch"] == arch
    assert machine["clock_hz"] == profile.clock_hz and machine["cycles_per_instruction"] == 1.0
    assert machine["seconds_per_tick"] == pytest.approx(
        instructions_a_tick / profile.clock_hz, rel=1e-9
    )
    assert first.device == device
    _check_against_bundle(first, built, 2)
    (m,) = first.measurements
    ticks = [s / machine["seconds_per_tick"] for s in (m.train_step_s, *m.samples)]
    # whole ticks, as far as the file's ten significant digits tell
    assert all(abs(t - round(t)) < max(1e-3, 1e-9 * t) for t in ticks)
    (again,) = _profile(folder, target, 2).measurements
    assert again.samples == m.samples
    assert [c.seconds for c in again.per_call] == [c.seconds for c in m.per_call]
