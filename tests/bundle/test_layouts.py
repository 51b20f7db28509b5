"""The ways into a bundle besides its Makefile, built as their build systems build them: the
CMake project on the host (ctest) and with the toolchain files of the cross compilers (the
example under QEMU prints the host's bytes), the Zephyr module's CMakeLists under stand-ins for
Zephyr's functions, and the Arduino library's ``src/`` compiled as Arduino compiles a library,
for a Cortex-M0+, a Cortex-M4F and RV32IMC, and with its sketch on the host.

Zephyr, the Arduino IDE and PlatformIO themselves are not installed here: their files are
checked against their formats, and their sources compiled as those tools would.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path, PurePosixPath

import pytest
import yaml

from tests.bundle.support import RUN_ENV, needs
from tinytune.bundle import Bundle, exported_file_names
from tinytune.bundle.layouts import (
    ARDUINO_UNITS,
    LAYOUT_FILES,
    LIBRARY_PROPERTIES,
    arduino_sources,
    render_library_properties,
)
from tinytune.lowering import C_SOURCES


def _packaged(name: str) -> str:
    return (resources.files("tinytune.bundle") / "platform" / name).read_text()


def _kernels_named(text: str) -> set[str]:
    return set(re.findall(r"kernels/(tt_\w+\.c)\b", text))


def test_every_build_system_compiles_every_kernel() -> None:
    """The Makefile, CMake, Zephyr and the Arduino library list the kernels' sources alike."""
    kernels = set(C_SOURCES)
    for packaged in ("bundle.mk", "bundle.cmake", "zephyr.cmake"):
        assert _kernels_named(_packaged(packaged)) == kernels, packaged
    assert {u.source for u in ARDUINO_UNITS.values()} >= {f"kernels/{k}" for k in kernels}


def test_every_layout_file_is_a_file_of_every_bundle() -> None:
    names = exported_file_names()
    assert set(LAYOUT_FILES.values()) | set(ARDUINO_UNITS) | {LIBRARY_PROPERTIES} <= names
    assert {"CMakeLists.txt", "zephyr/module.yml", "examples/train/train.ino"} <= names


def test_the_arduino_units_include_the_bundles_files_once() -> None:
    """Each file of ``src/`` includes one file of the bundle by a path from ``src/``; the units
    include ``tt_arduino.h`` first; only ``src/`` is compiled by Arduino, and every source of
    the Makefile's ``SOURCES`` is there once."""
    names = exported_file_names()
    units = arduino_sources()
    assert set(units) == set(ARDUINO_UNITS) and "src/tt_arduino.h" in LAYOUT_FILES.values()
    compiled = []
    for name, text in units.items():
        (included,) = re.findall(r'#include "\.\./([^"]+)"', text)
        assert included == ARDUINO_UNITS[name].source and included in names, name
        assert str(PurePosixPath("src").joinpath("..", included)).startswith("src/..")
        if name.endswith(".c"):
            assert text.index('#include "tt_arduino.h"') < text.index('#include "../')
            compiled.append(included)
    sources = re.search(r"^SOURCES := (.*?)\n\S", _packaged("bundle.mk"), re.M | re.S)
    assert sources is not None
    assert sorted(compiled) == sorted(sources[1].replace("\\", " ").split())


def test_library_properties_follow_the_arduino_library_format() -> None:
    """The fields of the 1.5 format, a name Arduino accepts, and nothing left to fill in."""
    text = render_library_properties(
        _packaged(LIBRARY_PROPERTIES),
        key="4040fc7d78e7ffb5",
        title="candidate 4040fc7d78e7 (ofa-proxyless-w0.35, 32 px)",
        device="rp2040",
        arena_bytes=53352,
        version="0.1.0",
    )
    assert "$" not in text
    fields = dict(line.split("=", 1) for line in text.splitlines())
    required = {"name", "version", "author", "maintainer", "sentence", "paragraph", "category"}
    assert required | {"url", "architectures", "includes"} == set(fields)
    assert fields["name"] == "tinytune-4040fc7d78e7"
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9 _.\-]*[A-Za-z0-9_.\-]", fields["name"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", fields["version"])
    assert fields["architectures"] == "*" and fields["includes"] == "tt_model.h"
    assert fields["category"] == "Data Processing"  # one of Arduino's categories
    assert "rp2040" in fields["sentence"] and "53352" in fields["paragraph"]


def test_the_zephyr_module_names_its_cmake_folder_and_kconfig() -> None:
    module = yaml.safe_load(_packaged("zephyr_module.yml"))
    assert module["build"] == {"cmake": "zephyr", "kconfig": "zephyr/Kconfig"}
    assert "zephyr/CMakeLists.txt" in exported_file_names()
    assert "zephyr/Kconfig" in exported_file_names()
    symbols = set(re.findall(r"^config (\w+)$", _packaged("zephyr.kconfig"), re.M))
    used = set(re.findall(r"CONFIG_(TINYTUNE\w*)", _packaged("zephyr.cmake")))
    assert used == symbols == {"TINYTUNE", "TINYTUNE_EXAMPLE"}
    assert "zephyr_library()" in _packaged("zephyr.cmake")


def _run(cmd: list[str], cwd: Path | None = None, timeout: int = 600) -> str:
    done = subprocess.run(
        cmd,
        cwd=cwd,
        capture_output=True,
        text=True,
        env=RUN_ENV,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    if done.returncode:
        pytest.fail(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


QEMU = {
    "cortex-m7": ["qemu-system-arm", "-M", "mps2-an500"],
    "cortex-m0plus": ["qemu-system-arm", "-M", "mps2-an385"],
}
QEMU_TAIL = ["-nographic", "-monitor", "none", "-serial", "none"]
ARM_SEMIHOSTING = ["-semihosting-config", "enable=on,target=native"]
RV32_SEMIHOSTING = [
    "-chardev",
    "stdio,id=tt",
    "-semihosting-config",
    "enable=on,target=native,chardev=tt",
]


def _under_qemu(target: str, elf: Path) -> list[str]:
    if target == "rv32imc":
        return [
            "qemu-system-riscv32",
            "-M",
            "virt",
            "-bios",
            "none",
            *QEMU_TAIL,
            *RV32_SEMIHOSTING,
            "-kernel",
            str(elf),
        ]
    return [*QEMU[target], *QEMU_TAIL, *ARM_SEMIHOSTING, "-kernel", str(elf)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "toolchain"),
    [
        pytest.param("host", [], marks=needs("cmake")),
        pytest.param(
            "cortex-m7",
            ["-DCMAKE_TOOLCHAIN_FILE=cmake/arm-none-eabi.cmake"],
            marks=[needs("cmake"), needs("cortex-m7")],
        ),
        pytest.param(
            "cortex-m0plus",
            ["-DCMAKE_TOOLCHAIN_FILE=cmake/arm-none-eabi.cmake", "-DTT_ARM_CPU=cortex-m0plus"],
            marks=[needs("cmake"), needs("cortex-m0plus")],
        ),
        pytest.param(
            "rv32imc",
            ["-DCMAKE_TOOLCHAIN_FILE=cmake/riscv32-elf.cmake"],
            marks=[needs("cmake"), needs("rv32imc")],
        ),
    ],
)
def test_cmake_builds_the_library_and_ctest_runs_the_example(
    sparse: tuple[Bundle, Path],
    host_outputs: dict[str, str],
    tmp_path: Path,
    target: str,
    toolchain: list[str],
) -> None:
    """``cmake -S bundle -B build && cmake --build build && ctest --test-dir build``, natively
    and with a toolchain file (ctest runs the image under QEMU); the example prints the host's
    bytes."""
    _, folder = sparse
    build = tmp_path / "build"
    _run(["cmake", "-S", str(folder), "-B", str(build), *toolchain], cwd=folder)
    _run(["cmake", "--build", str(build), "-j", "2"])
    assert "100% tests passed" in _run(["ctest", "--test-dir", str(build)])
    assert (build / "libtinytune.a").is_file()
    if target == "host":
        printed = _run([str(build / "tinytune_example")])
    else:
        printed = _run(_under_qemu(target, build / "tinytune_example.elf"))
    assert printed == host_outputs["plain"]


ZEPHYR_STAND_INS = """\
cmake_minimum_required(VERSION 3.20)
project(zephyr_stand_in C)
# Zephyr's extension functions, as far as the module's CMakeLists uses them
set(CONFIG_TINYTUNE y)
set(CONFIG_TINYTUNE_EXAMPLE y)
macro(zephyr_library)
  add_library(module STATIC)
endmacro()
function(zephyr_library_sources)
  target_sources(module PRIVATE ${ARGN})
endfunction()
function(zephyr_include_directories)
  target_include_directories(module PUBLIC ${ARGN})
endfunction()
function(zephyr_library_include_directories)
  target_include_directories(module PRIVATE ${ARGN})
endfunction()
function(zephyr_library_compile_options)
  target_compile_options(module PRIVATE ${ARGN})
endfunction()
function(zephyr_library_compile_definitions)
  target_compile_definitions(module PRIVATE ${ARGN})
endfunction()
add_subdirectory(${BUNDLE}/zephyr module)
add_executable(app app.c)
target_link_libraries(app PRIVATE module m)
"""


@pytest.mark.slow
@needs("cmake")
def test_the_zephyr_modules_cmakelists_builds_the_library_and_the_example(
    sparse: tuple[Bundle, Path], host_outputs: dict[str, str], tmp_path: Path
) -> None:
    """The module's ``zephyr/CMakeLists.txt`` with CONFIG_TINYTUNE and CONFIG_TINYTUNE_EXAMPLE,
    read by a host project that defines ``zephyr_library()`` and its kin as plain CMake: an
    application calling ``tt_example()`` prints what ``make run-host`` prints."""
    _, folder = sparse
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(ZEPHYR_STAND_INS)
    (app / "app.c").write_text("int tt_example(void);\nint main(void) { return tt_example(); }\n")
    build = tmp_path / "build"
    _run(["cmake", "-S", str(app), "-B", str(build), f"-DBUNDLE={folder}"])
    _run(["cmake", "--build", str(build), "-j", "2"])
    assert _run([str(build / "app")]) == host_outputs["plain"]


ARDUINO_FLAGS = [
    "-std=gnu17",
    "-Os",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-ffunction-sections",
    "-fdata-sections",
]


def _compile_src(folder: Path, out: Path, compiler: list[str]) -> list[Path]:
    """Every ``.c`` and ``.cpp`` under the library's ``src/``, compiled with ``-Isrc``, as
    Arduino compiles a library (its objects)."""
    out.mkdir(parents=True, exist_ok=True)
    objects = []
    src = folder / "src"
    for unit in sorted([*src.rglob("*.c"), *src.rglob("*.cpp")]):
        obj = out / f"{unit.name}.o"
        _run([*compiler, *ARDUINO_FLAGS, f"-I{src}", "-c", str(unit), "-o", str(obj)])
        objects.append(obj)
    return objects


@pytest.mark.slow
@pytest.mark.parametrize(
    ("core", "compiler"),
    [
        pytest.param(
            "cortex-m0plus",
            ["arm-none-eabi-gcc", "-mcpu=cortex-m0plus", "-mthumb"],
            marks=needs("cortex-m0plus"),
        ),
        pytest.param(
            "cortex-m4f",
            [
                "arm-none-eabi-gcc",
                "-mcpu=cortex-m4",
                "-mthumb",
                "-mfloat-abi=hard",
                "-mfpu=fpv4-sp-d16",
            ],
            marks=needs("cortex-m4"),
        ),
        pytest.param(
            "rv32imc",
            ["riscv64-unknown-elf-gcc", "-march=rv32imc", "-mabi=ilp32", "--specs=picolibc.specs"],
            marks=needs("rv32imc"),
        ),
    ],
)
def test_the_arduino_library_compiles_as_arduino_compiles_it(
    sparse: tuple[Bundle, Path], tmp_path: Path, core: str, compiler: list[str]
) -> None:
    """Every file under ``src/`` compiles as GNU C with ``-Isrc`` alone (RP2040, Cortex-M4F
    boards, ESP32-C3). GCC fuses multiply-adds in GNU C where the FPU has them: the kernels
    compiled so directly hold such instructions, the library's units none (tt_arduino.h)."""
    _, folder = sparse
    objects = _compile_src(folder, tmp_path / "obj", compiler)
    assert {o.name for o in objects} == {
        f"{PurePosixPath(n).name}.o" for n in ARDUINO_UNITS if n.endswith(".c")
    }
    if core == "cortex-m4f" and shutil.which("arm-none-eabi-objdump"):
        fused = re.compile(r"\bv(fma|fms|fnma|fnms)\.f32\b")

        def disassembly(obj: Path) -> str:
            return _run(["arm-none-eabi-objdump", "-d", str(obj)])

        assert not any(fused.search(disassembly(o)) for o in objects)
        direct = tmp_path / "direct.o"
        _run(
            [
                *compiler,
                *ARDUINO_FLAGS,
                f"-I{folder / 'kernels'}",
                "-c",
                str(folder / "kernels" / "tt_classifier.c"),
                "-o",
                str(direct),
            ]
        )
        assert fused.search(disassembly(direct))


ARDUINO_STAND_IN = """\
/* Arduino.h, as far as the sketch uses it: Serial writes to stdout. */
#include <stdio.h>
struct StandInSerial {
  void begin(long) {}
  void print(const char *text) { fputs(text, stdout); }
  explicit operator bool() const { return true; }
};
static StandInSerial Serial;
"""
SKETCH_MAIN = """\
#include <Arduino.h>
#include "train.ino"
int main() { setup(); loop(); return 0; }
"""


@pytest.mark.slow
@needs("host")
def test_the_arduino_sketch_prints_the_hosts_bytes(
    sparse: tuple[Bundle, Path], host_outputs: dict[str, str], tmp_path: Path
) -> None:
    """The library's units and ``examples/train/train.ino`` (C++) built on the host with a
    stand-in for Arduino.h: the sketch prints, through Serial, what ``make run-host`` prints."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed here")
    _, folder = sparse
    objects = _compile_src(folder, tmp_path / "obj", ["gcc"])
    (tmp_path / "Arduino.h").write_text(ARDUINO_STAND_IN)
    (tmp_path / "sketch.cpp").write_text(SKETCH_MAIN)
    sketch = tmp_path / "sketch"
    _run(
        [
            "g++",
            "-std=gnu++17",
            "-O2",
            f"-I{tmp_path}",
            f"-I{folder / 'src'}",
            f"-I{folder / 'examples' / 'train'}",
            str(tmp_path / "sketch.cpp"),
            *map(str, objects),
            "-o",
            str(sketch),
            "-lm",
        ]
    )
    assert _run([str(sketch)]) == host_outputs["plain"]
