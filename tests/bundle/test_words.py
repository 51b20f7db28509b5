"""What is said about a bundle names what it has: every Makefile target that runs the example
or the profiler, and every layout the bundle writes, in ``tinytune export --help`` and in
``docs/commands.md``; the README's CMake commands are the CMakeLists' own."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tinytune.bundle import exported_file_names
from tinytune.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
# each layout the bundle writes, by a file of it, and the name it goes by
LAYOUTS = {
    "CMakeLists.txt": "CMake",
    "zephyr/module.yml": "Zephyr",
    "library.properties": "Arduino",
}


def _packaged(name: str) -> str:
    return (resources.files("tinytune.bundle") / "platform" / name).read_text()


def make_targets() -> list[str]:
    """The Makefile's run-*, profile-* and run-profile-* targets."""
    rules = re.findall(r"^([a-z0-9][a-z0-9-]*):", _packaged("bundle.mk"), re.M)
    return sorted({r for r in rules if r.startswith(("run-", "profile-"))})


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def export_help() -> str:
    done = CliRunner().invoke(
        app, ["export", "--help"], env={"COLUMNS": "400"}, terminal_width=400
    )
    assert done.exit_code == 0, done.output
    return _words(done.output)


@pytest.fixture(scope="module")
def commands_export() -> str:
    page = (ROOT / "docs" / "commands.md").read_text()
    section = re.search(r"^## `tinytune export`\n(.*?)^## ", page, re.M | re.S)
    assert section is not None
    return _words(section[1])


def test_the_makefile_has_every_target_of_every_core() -> None:
    targets = make_targets()
    cores = ["host", "aarch64", "cortex-m7", "cortex-m4", "cortex-m0plus", "rv32imc"]
    for core in cores:
        assert {f"run-{core}", f"profile-{core}", f"run-profile-{core}"} <= set(targets), core
    assert "run-host-asan" in targets and len(targets) == 3 * len(cores) + 1


@pytest.mark.parametrize("where", ["export_help", "commands_export"])
def test_every_target_and_layout_is_named(where: str, request: pytest.FixtureRequest) -> None:
    text = request.getfixturevalue(where)
    named = set(re.findall(r"(?<![\w-])((?:run-)?(?:profile-)?[a-z0-9]+(?:-[a-z0-9]+)*)", text))
    missing = [t for t in make_targets() if t not in named]
    assert not missing, f"{where} does not name {missing}"
    for path, layout in LAYOUTS.items():
        assert path in exported_file_names()
        assert layout in text and path in text, f"{where} does not name {layout} ({path})"


def test_the_readme_builds_cmake_where_the_cmakelists_says() -> None:
    def commands(text: str) -> list[tuple[str, str]]:
        return re.findall(r"cmake -S \. -B (\S+)( -DCMAKE_TOOLCHAIN_FILE=\S+)?", text)

    readme, cmakelists = (
        commands(_packaged("bundle_readme.md")),
        commands(_packaged("bundle.cmake")),
    )
    assert len(readme) == 3 and readme == cmakelists
    native = re.search(r"cmake --build (\S+) && ctest --test-dir (\S+)", _packaged("bundle.cmake"))
    assert native is not None and native[1] == native[2] == readme[0][0] == "build-cmake"
    assert "cmake --build build-cmake && ctest --test-dir build-cmake" in _packaged(
        "bundle_readme.md"
    )
