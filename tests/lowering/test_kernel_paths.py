"""Every target's paths through the convolution kernels give the host's bytes.

``csrc/kernel_fuzz.c`` runs the forward, in-place, input-gradient and weight-update kernels on
400 random geometries (1x1, depthwise and dense convolutions of every kernel size, stride,
padding and trained/frozen split the kernels distinguish) and prints a hash of every output.
The host's Linux build (vectorised loops, checked against the simulator by
``test_kernels.py``; on x86-64 its AVX2 versions where the processor has them) is the
reference; the same program built with the baseline x86-64 kernels only, with
``-DTT_CORTEX_M=1`` (the register-blocked paths), with the sanitizers, for the Cortex-M7 and
M4 (the DSP paths), the Cortex-M0+ and RV32IMC (under QEMU) must print the same lines."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

from tests.bundle.support import needs
from tests.lowering.harness import HERE, RUN_ENV, SANITIZE, needs_gcc
from tinytune.lowering import csrc_dir

pytestmark = needs_gcc

DRIVER = HERE / "kernel_fuzz.c"
# the bundle's startup code and linker script of the MPS2 boards
PLATFORM = Path(__file__).resolve().parents[2] / "tinytune" / "bundle" / "platform"
SOURCES = ("tt_forward.c", "tt_backward.c")
CFLAGS = ("-std=c99", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror")
ARM = ("--specs=rdimon.specs", "-mthumb", "-ffunction-sections", "-fdata-sections")
QEMU_ARM = ("-nographic", "-monitor", "none", "-serial", "none",
            "-semihosting-config", "enable=on,target=native")  # fmt: skip
TARGETS = {
    "cortex-m7": (("-mcpu=cortex-m7", "-mfloat-abi=hard", "-mfpu=fpv5-sp-d16"), "mps2-an500"),
    "cortex-m4": (("-mcpu=cortex-m4", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"), "mps2-an386"),
    "cortex-m0plus": (
        ("-mcpu=cortex-m0plus", "-mfloat-abi=soft", "-DTT_CORTEX_M=1"),
        "mps2-an385",
    ),
}


def compile_run(compiler: str, flags: tuple[str, ...], out: Path, run: list[str]) -> str:
    src = csrc_dir()
    cmd = [compiler, *CFLAGS, *flags, f"-I{src}", str(DRIVER), *(str(src / s) for s in SOURCES),
           "-o", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.fail(f"{compiler} failed:\n{done.stderr[-4000:]}")
    ran = subprocess.run(
        [*run, str(out)],
        capture_output=True,
        text=True,
        env=RUN_ENV,
        stdin=subprocess.DEVNULL,
        timeout=600,
        check=False,
    )
    if ran.returncode:
        pytest.fail(f"{out.name} exited with {ran.returncode}:\n{ran.stderr[-2000:]}")
    return ran.stdout


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = compile_run("gcc", ("-O3",), tmp_path_factory.mktemp("fuzz") / "host", [])
    assert out.count("\n") == 400
    assert len({line.rsplit(": ", 1)[1] for line in out.splitlines()}) == 400
    return out


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64's kernel versions")
def test_baseline_x86_paths_match_the_host(host: str, tmp_path: Path) -> None:
    """On x86-64 the host's kernels are chosen at load time (AVX2 where the processor has it);
    the baseline x86-64 ones alone print the same lines."""
    assert compile_run("gcc", ("-O3", "-DTT_NO_CLONES"), tmp_path / "base", []) == host
    symbols = subprocess.run(["nm", str(tmp_path / "base")], capture_output=True, text=True)
    assert ".avx2" not in symbols.stdout  # the reference's, then, are not these


def test_register_blocked_paths_match_the_host(host: str, tmp_path: Path) -> None:
    assert compile_run("gcc", ("-O2", "-DTT_CORTEX_M=1"), tmp_path / "m", []) == host


def test_sanitized_builds_match_the_host(host: str, tmp_path: Path) -> None:
    for name, extra in (("linux", ()), ("m", ("-DTT_CORTEX_M=1",))):
        try:
            out = compile_run("gcc", (*SANITIZE, *extra), tmp_path / name, [])
        except pytest.fail.Exception as e:
            if "san" in str(e) and "cannot find" in str(e):
                pytest.skip(f"gcc cannot build with sanitizers here: {e}")
            raise
        assert out == host


@pytest.mark.parametrize("target", [pytest.param(t, marks=needs(t)) for t in TARGETS])
def test_cortex_m_paths_match_the_host(host: str, target: str, tmp_path: Path) -> None:
    """The Cortex-M7 and M4 take the DSP paths (SMLAD), the Cortex-M0+ the register-blocked
    ones without it, each under QEMU."""
    flags, machine = TARGETS[target]
    platform = ("-T", str(PLATFORM / "cortex_m7.ld"), str(PLATFORM / "cortex_m7_startup.c"))
    out = compile_run("arm-none-eabi-gcc", ("-O2", *flags, *ARM, *platform), tmp_path / "f.elf",
                      ["qemu-system-arm", "-M", machine, *QEMU_ARM, "-kernel"])  # fmt: skip
    assert out == host


@needs("rv32imc")
def test_rv32imc_paths_match_the_host(host: str, tmp_path: Path) -> None:
    flags = ("-O2", "-march=rv32imc", "-mabi=ilp32", "--specs=picolibc.specs", "-DTT_CORTEX_M=1",
             "--oslib=semihost", "--crt0=semihost", "-Wl,--defsym=__flash=0x80000000",
             "-Wl,--defsym=__flash_size=0x400000", "-Wl,--defsym=__ram=0x80400000",
             "-Wl,--defsym=__ram_size=0x400000", "-Wl,--defsym=__stack_size=0x2000")  # fmt: skip
    run = ["qemu-system-riscv32", "-M", "virt", "-bios", "none", "-nographic", "-monitor", "none",
           "-serial", "none", "-chardev", "stdio,id=tt",
           "-semihosting-config", "enable=on,target=native,chardev=tt", "-kernel"]  # fmt: skip
    assert compile_run("riscv64-unknown-elf-gcc", flags, tmp_path / "f.elf", run) == host
