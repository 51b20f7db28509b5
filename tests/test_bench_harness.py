"""``bench/harness.py``, what the benchmark scripts share, and the rules that keep them on it: no
script builds the common flags, writes or reads JSON, joins a Markdown row or names the project's
defaults by its own code; each runs as a module (``python3 -m bench.NAME``)."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import re
from pathlib import Path

import pytest

from bench import harness
from tinytune.options import DEFAULT_DATASET, DEFAULT_DEVICE
from tinytune.spaces import DEFAULT_SUPERNET, IMAGE_NETWORK

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name not in ("__init__.py", "harness.py"))
SHARED_FLAGS = (
    "--json",
    "--from-json",
    "--write",
    "--dataset",
    "--supernet",
    "--device",
    "--seeds",
)


def _source(path: Path) -> str:
    return path.read_text()


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module and its functions and classes."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _strings(path: Path) -> list[str]:
    """Every string constant of a script's code (the parts of f-strings included), docstrings
    left out."""
    tree = ast.parse(_source(path))
    skip = _docstrings(tree)
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
    ]


# --- the rules, read from the scripts' source ---------------------------------------------------


def test_the_scripts_are_found() -> None:
    names = {p.stem for p in SCRIPTS}
    assert {"readme", "scale", "seeds", "markers", "workers"} <= names
    assert len(SCRIPTS) >= 25


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_no_script_edits_sys_path(path: Path) -> None:
    assert "sys.path.insert" not in _source(path)
    assert "sys.path.append" not in _source(path)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_the_common_flags_come_from_the_harness(path: Path) -> None:
    """No script adds ``--json`` (or another common flag) to its parser itself."""
    built = [
        node.args[0].value
        for node in ast.walk(ast.parse(_source(path)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_argument"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]
    assert not [flag for flag in built if flag in SHARED_FLAGS], path.name


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_json_files_are_the_harness_s(path: Path) -> None:
    source = _source(path)
    assert "json.dump(" not in source
    assert not re.search(r"write(_text)?\(\s*json\.dumps", source), path.name
    assert not re.search(r"json\.loads?\([^)]*read_text", source), path.name


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_no_markdown_row_is_joined_by_hand(path: Path) -> None:
    source = _source(path)
    assert '" | ".join(' not in source and "' | '.join(" not in source
    for text in _strings(path):
        assert "|---" not in text, (path.name, text)
        assert not text.startswith("| ") and not text.endswith(" |"), (path.name, text)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_no_script_names_a_default_of_the_project(path: Path) -> None:
    """The default supernet, device and data set, and the network of image folders, come from
    the project's constants, never typed again."""
    defaults = {DEFAULT_SUPERNET, DEFAULT_DEVICE, DEFAULT_DATASET, IMAGE_NETWORK}
    assert not [text for text in _strings(path) if text in defaults], path.name


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_script_imports_as_a_module_of_the_package(path: Path) -> None:
    module = importlib.import_module(f"bench.{path.stem}")
    assert Path(module.__file__).resolve() == path.resolve()  # type: ignore[arg-type]


def test_the_commands_shown_run_the_scripts_as_modules() -> None:
    """The README, the pages, the tests, the package and the scripts show ``python3 -m
    bench.NAME``, never the script's path after ``python3``."""
    sources = [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "tinytune").rglob("*.py"),
        *BENCH.glob("*.py"),
        *(ROOT / ".ci").glob("*"),
    ]
    shown = re.compile(r"python3\s+bench/")
    assert not [p for p in sources if p.is_file() and shown.search(p.read_text())]
    assert not (BENCH / "_markers.py").exists()


# --- arguments ----------------------------------------------------------------------------------


def test_the_common_flags_default_to_the_project_s_constants() -> None:
    parser = harness.add_arguments(
        argparse.ArgumentParser(),
        dataset=True,
        supernet=True,
        device=True,
        seeds=True,
        json=True,
        from_json="one",
        write="one",
    )
    args = parser.parse_args([])
    assert args.dataset == DEFAULT_DATASET
    assert args.supernet == DEFAULT_SUPERNET
    assert args.device == DEFAULT_DEVICE
    assert args.seeds == [0, 1, 2, 3, 4]
    assert args.json is None and args.from_json is None and args.write is None
    given = parser.parse_args(
        ["--seeds", "3", "--json", "out.json", "--from-json", "a.json", "--write", "p.md"]
    )
    assert given.seeds == [3]
    assert (given.json, given.from_json, given.write) == (
        Path("out.json"),
        Path("a.json"),
        Path("p.md"),
    )


def test_a_script_s_own_defaults_and_counts() -> None:
    parser = harness.add_arguments(
        argparse.ArgumentParser(),
        supernet=IMAGE_NETWORK,
        device="host",
        json=Path("kept.json"),
        from_json="many",
        write="many",
        help={"json": "where the figures are kept"},
    )
    args = parser.parse_args([])
    assert (args.supernet, args.device, args.json) == (IMAGE_NETWORK, "host", Path("kept.json"))
    args = parser.parse_args(["--from-json", "a.json", "b.json", "--write"])
    assert args.from_json == [Path("a.json"), Path("b.json")]
    assert args.write == []  # the script's own pages
    assert "where the figures are kept" in parser.format_help()
    with pytest.raises(ValueError, match="from_json"):
        harness.add_arguments(argparse.ArgumentParser(), from_json="two")


def test_only_the_flags_asked_for_are_added() -> None:
    parser = harness.add_arguments(argparse.ArgumentParser(), json=True)
    assert not hasattr(parser.parse_args([]), "dataset")
    with pytest.raises(SystemExit):
        parser.parse_args(["--dataset", "digits"])


# --- JSON ---------------------------------------------------------------------------------------


def test_json_round_trip_and_format(tmp_path: Path) -> None:
    record = {"z": 1, "a": [1.5, None, "x"], "m": {"b": True}}
    path = tmp_path / "r.json"
    harness.write_json(path, record)
    assert harness.read_json(path) == record
    text = path.read_text()
    assert text == json.dumps(record, indent=1) + "\n"  # one space, the record's order
    assert list(harness.read_json(path)) == ["z", "a", "m"]


def test_the_kept_figures_are_in_the_harness_s_format(tmp_path: Path) -> None:
    """``docs/front.json`` (``python3 -m bench.readme``'s figures) reads back, and writes back
    byte for byte."""
    kept = ROOT / "docs" / "front.json"
    figures = harness.read_json(kept)
    assert figures["front"]
    harness.write_json(tmp_path / "again.json", figures)
    assert (tmp_path / "again.json").read_text() == kept.read_text()


def test_json_lines_are_appended(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    harness.append_json_line(path, {"seed": 0})
    harness.append_json_line(path, {"seed": 1, "points": [[0.9, 1.0]]})
    assert path.read_text().count("\n") == 2
    assert harness.read_json_lines(path) == [{"seed": 0}, {"seed": 1, "points": [[0.9, 1.0]]}]


# --- Markdown tables ----------------------------------------------------------------------------


def test_a_table() -> None:
    text = harness.table(["a", "b c", 3], [[1, "x", ""], ["", 2.5, "y z"]])
    assert text.splitlines() == [
        "| a | b c | 3 |",
        "|---|---|---|",
        "| 1 | x | |",
        "| | 2.5 | y z |",
    ]
    assert not text.endswith("\n")


def test_a_table_s_alignment() -> None:
    text = harness.table(["l", "r", "c", "n"], [], align=["left", "right", "center", None])
    assert text.splitlines() == ["| l | r | c | n |", "|:---|---:|:---:|---|"]
    with pytest.raises(ValueError, match="2 alignments for 3 columns"):
        harness.rule(3, ["left", "right"])


def test_a_table_printed_row_by_row_is_the_same_table() -> None:
    headers, rows = (
        ["scheme", "val / test"],
        [["`full`", "99.4 / 97.2"], ["`last`", "95.0 / 93.1"]],
    )
    by_row = "\n".join([harness.head(headers), *(harness.row(r) for r in rows)])
    assert by_row == harness.table(headers, rows)


# --- the machine --------------------------------------------------------------------------------


def test_the_machine_line() -> None:
    line = harness.machine()
    assert line == f"{os.cpu_count()} cores of {harness.cpu_model()}"
    assert re.fullmatch(r"\d+ cores of \S.*", line)


def test_the_cpu_model_is_the_system_s(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Test CPU @ 2.0GHz\nflags\t: x\n")
    real = harness.Path
    monkeypatch.setattr(
        harness, "Path", lambda p: cpuinfo if str(p) == "/proc/cpuinfo" else real(p)
    )
    assert harness.cpu_model() == "Test CPU @ 2.0GHz"
    monkeypatch.setattr(harness, "Path", lambda p: tmp_path / "none")  # no /proc (not Linux)
    monkeypatch.setattr(harness.platform, "processor", lambda: "")
    monkeypatch.setattr(harness.platform, "machine", lambda: "arm64")
    assert harness.cpu_model() == "arm64"
    monkeypatch.setattr(harness.platform, "machine", lambda: "")
    assert harness.cpu_model() == "an unknown CPU"


# --- running a script from another --------------------------------------------------------------


def test_a_script_runs_another_as_a_module() -> None:
    command = harness.module_command("bundle_step", "--json", "out.json")
    assert command[1:] == ["-m", "bench.bundle_step", "--json", "out.json"]
    env = harness.with_root({"PYTHONPATH": "/elsewhere", "X": "1"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/elsewhere"]
    assert env["X"] == "1"
