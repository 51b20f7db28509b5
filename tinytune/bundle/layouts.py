"""The ways into a bundle besides its Makefile: a CMake project, a Zephyr module and an Arduino
library (PlatformIO reads the same), all over one copy of the sources.

* CMake: ``CMakeLists.txt`` at the bundle's root (the library ``tinytune``: the model and the
  kernels; the example and a test that runs it) and a toolchain file per cross compiler under
  ``cmake/`` (``CMAKE_SYSTEM_NAME Generic``, ``CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY``).
* Zephyr: ``zephyr/module.yml`` (``build: cmake: zephyr``, ``kconfig: zephyr/Kconfig``) and a
  ``zephyr/CMakeLists.txt`` whose ``zephyr_library()`` compiles the root's sources behind
  ``CONFIG_TINYTUNE``.
* Arduino (library format 1.5): ``library.properties`` at the root, ``src/`` and the sketch
  ``examples/train/train.ino``. Arduino compiles ``src/`` alone (recursively, with ``src/``
  on the include path) and copies a sketch's folder before it compiles it, so only ``src/``
  can reach the root's files: each file of ``src/`` is a line or two that includes the root's
  file of the same name (``#include "../tt_model.c"``). The sources are written once (the model
  alone is about a megabyte), where the Makefile, CMake and Zephyr read them. The units also
  say what the Makefile's flags say and a library cannot give Arduino (``src/tt_arduino.h``: no
  fused multiply-adds, the kernels' paths for a microcontroller).
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

from tinytune.lowering import C_SOURCES

__all__ = [
    "ARDUINO_UNITS",
    "LAYOUT_FILES",
    "LIBRARY_PROPERTIES",
    "ArduinoUnit",
    "arduino_sources",
    "render_library_properties",
]

# packaged file → its path in the bundle
LAYOUT_FILES = {
    "bundle.cmake": "CMakeLists.txt",
    "arm-none-eabi.cmake": "cmake/arm-none-eabi.cmake",
    "riscv32-elf.cmake": "cmake/riscv32-elf.cmake",
    "zephyr_module.yml": "zephyr/module.yml",
    "zephyr.cmake": "zephyr/CMakeLists.txt",
    "zephyr.kconfig": "zephyr/Kconfig",
    "arduino_build.h": "src/tt_arduino.h",
    "arduino_train.ino": "examples/train/train.ino",
}
LIBRARY_PROPERTIES = "library.properties"
"""The Arduino library's description: a packaged template, rendered for each bundle."""


@dataclass(frozen=True)
class ArduinoUnit:
    """One file of the Arduino library's ``src/``.

    Attributes:
        source: the bundle's file it includes (a path from the bundle's root).
        defines: macros it defines before, each ``NAME`` or ``NAME VALUE``.
    """

    source: str
    defines: tuple[str, ...] = ()


ARDUINO_UNITS: dict[str, ArduinoUnit] = {
    "src/tt_model.h": ArduinoUnit("tt_model.h"),  # what a sketch includes
    "src/tt_data.h": ArduinoUnit("tt_data.h"),
    "src/tt_int8.h": ArduinoUnit("kernels/tt_int8.h"),  # tt_model.c includes "tt_int8.h"
    "src/tt_logmel.h": ArduinoUnit("kernels/tt_logmel.h"),  # and "tt_logmel.h"
    "src/tt_model.c": ArduinoUnit("tt_model.c"),
    "src/tt_data.c": ArduinoUnit("tt_data.c"),
    **{f"src/{name}": ArduinoUnit(f"kernels/{name}") for name in C_SOURCES},
    # the example as tt_example(), printing through the sketch's tt_example_write()
    "src/tt_example.c": ArduinoUnit(
        "main.c", ("TT_EXAMPLE_NO_MAIN", "TT_EXAMPLE_WRITE tt_example_write")
    ),
}

_HEADER = Template("""\
/* The bundle's $source, on the Arduino library's include path (src/). */
#include "../$source"
""")
_UNIT = Template("""\
/* The bundle's $source, compiled by Arduino as the bundle's Makefile compiles it
 * (tt_arduino.h); the source lives once, outside src/. */
#include "tt_arduino.h"
$defines#include "../$source"
""")


def arduino_sources() -> dict[str, str]:
    """The text of every file of the Arduino library's ``src/`` (:data:`ARDUINO_UNITS`) but
    ``tt_arduino.h`` (a packaged file), by its path in the bundle."""
    files = {}
    for name, unit in ARDUINO_UNITS.items():
        if name.endswith(".h"):
            files[name] = _HEADER.substitute(source=unit.source)
        else:
            defines = "".join(f"#define {d}\n" for d in unit.defines)
            files[name] = _UNIT.substitute(source=unit.source, defines=defines)
    return files


def render_library_properties(
    template: str, *, key: str, title: str, device: str, arena_bytes: int, version: str
) -> str:
    """``library.properties`` from its packaged ``template``: the library is named after the
    candidate's key (two bundles can sit side by side in a sketchbook), at version 1.0.0."""
    return Template(template).substitute(
        short_key=key[:12],
        title=title,
        device=device,
        arena=arena_bytes,
        tinytune_version=version,
    )
