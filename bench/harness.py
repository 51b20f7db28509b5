"""What the benchmark scripts share: their common arguments, the format of the JSON files they
keep, their Markdown tables and the description of the machine they ran on.

Each script runs as a module from the repository's root (``python3 -m bench.NAME``) and imports
what it needs from here::

    from bench.harness import add_arguments, read_json, table, write_json

* :func:`add_arguments` adds the common flags to a script's parser in one call, each with the
  project's own default (:data:`tinytune.options.DEFAULT_DATASET`,
  :data:`tinytune.spaces.DEFAULT_SUPERNET` or :data:`tinytune.spaces.IMAGE_NETWORK`,
  :data:`tinytune.options.DEFAULT_DEVICE`), never a name typed again;
* :func:`write_json` / :func:`read_json` (and :func:`append_json_line` / :func:`read_json_lines`
  for records kept one a line) are the one place of the files' format;
* :func:`table` (and :func:`head` and :func:`row`, for a table printed row by row as its rows
  are measured) writes every Markdown table;
* :func:`machine` is the line that says where figures were measured ("2 cores of <CPU>").

The blocks of Markdown pages that scripts rewrite are :mod:`bench.markers`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tinytune.options import DEFAULT_DATASET, DEFAULT_DEVICE
from tinytune.spaces import DEFAULT_SUPERNET, IMAGE_NETWORK

__all__ = [
    "BY_DATASET",
    "DEFAULT_DATASET",
    "DEFAULT_DEVICE",
    "DEFAULT_SUPERNET",
    "IMAGE_NETWORK",
    "ROOT",
    "SEEDS",
    "add_arguments",
    "append_json_line",
    "cpu_model",
    "head",
    "machine",
    "module_command",
    "read_json",
    "read_json_lines",
    "row",
    "rule",
    "table",
    "with_root",
    "write_json",
]

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root: the folder the scripts run from (``python3 -m bench.NAME``)."""

SEEDS = (0, 1, 2, 3, 4)
"""The seeds of ``--seeds`` unless given."""

ONE, MANY = "one", "many"  # how many files --from-json and --write take


# --- arguments ---------------------------------------------------------------------------------


BY_DATASET = "by-dataset"
"""``add_arguments(supernet=BY_DATASET)``: ``--supernet`` defaults to the data set's network."""


def add_arguments(
    parser: argparse.ArgumentParser,
    *,
    dataset: bool = False,
    supernet: bool | str = False,
    device: bool | str = False,
    seeds: bool = False,
    json: bool | Path = False,
    from_json: str | None = None,
    write: str | None = None,
    help: Mapping[str, str] | None = None,
) -> argparse.ArgumentParser:
    """Add the common flags a script takes to its ``parser``; returns the parser.

    Args:
        dataset: ``--dataset``, default :data:`DEFAULT_DATASET`.
        supernet: ``--supernet``; True: default :data:`DEFAULT_SUPERNET`; a name (e.g.
            :data:`IMAGE_NETWORK`, for a script about image folders): that default;
            :data:`BY_DATASET`: None, for the script to take the network a search of its
            ``--dataset`` uses (:func:`tinytune.spaces.default_network`).
        device: ``--device``; True: default :data:`DEFAULT_DEVICE`; a name: that default (a
            script that measures another device than the search's).
        seeds: ``--seeds N [N ...]``, default :data:`SEEDS`.
        json: ``--json OUT``, where the script keeps its figures; a path: its default.
        from_json: ``--from-json``, earlier figures read instead of measured: ``"one"`` file or
            ``"many"``.
        write: ``--write PAGE``, the Markdown page whose block the script replaces: ``"one"``
            page, or ``"many"`` (none given: the script's own pages).
        help: a flag's help text by its name without dashes (``from_json``), where the
            script's own words say more than the default.
    """
    words = {
        "dataset": "the data set",
        "supernet": "the supernet",
        "device": "the device",
        "seeds": "the seeds, one run each",
        "json": "write the figures here",
        "from_json": "print (or write) earlier figures instead of measuring",
        "write": "the Markdown page whose block to replace",
        **(help or {}),
    }
    if seeds:
        parser.add_argument(
            "--seeds", type=int, nargs="+", default=list(SEEDS), help=words["seeds"]
        )
    if dataset:
        parser.add_argument("--dataset", default=DEFAULT_DATASET, help=words["dataset"])
    if supernet == BY_DATASET:
        words["supernet"] += " (default: the one a search of the data set uses)"
        parser.add_argument("--supernet", default=None, help=words["supernet"])
    elif supernet:
        default = DEFAULT_SUPERNET if supernet is True else supernet
        parser.add_argument("--supernet", default=default, help=words["supernet"])
    if device:
        default = DEFAULT_DEVICE if device is True else device
        parser.add_argument("--device", default=default, help=words["device"])
    if json:
        default = None if json is True else json
        parser.add_argument("--json", type=Path, default=default, help=words["json"])
    if from_json is not None:
        many = {"nargs": "+"} if _count(from_json, "from_json") == MANY else {}
        parser.add_argument("--from-json", type=Path, help=words["from_json"], **many)
    if write is not None:
        many = {"nargs": "*"} if _count(write, "write") == MANY else {}
        parser.add_argument("--write", type=Path, help=words["write"], **many)
    return parser


def _count(value: str, name: str) -> str:
    if value not in (ONE, MANY):
        raise ValueError(f"{name}: {ONE!r} or {MANY!r}, got {value!r}")
    return value


# --- JSON --------------------------------------------------------------------------------------


def write_json(path: Path, record: Any) -> None:
    """Write ``record`` to ``path`` as JSON: indented by one space, keys in the record's own
    order, a newline at the end (the format of ``docs/front.json``)."""
    Path(path).write_text(json.dumps(record, indent=1) + "\n")


def read_json(path: Path) -> Any:
    """The record of a JSON file (one :func:`write_json` wrote, or an earlier script)."""
    return json.loads(Path(path).read_text())


def append_json_line(path: Path, record: Any) -> None:
    """Append ``record`` to ``path`` as one line of JSON, so that an interrupted run keeps
    every record written before."""
    with Path(path).open("a") as f:
        f.write(json.dumps(record) + "\n")


def read_json_lines(path: Path) -> list[Any]:
    """The records of a file of JSON lines (:func:`append_json_line`), blank lines skipped."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


# --- Markdown tables ---------------------------------------------------------------------------


def row(cells: Iterable[object]) -> str:
    """One row of a Markdown table: ``| a | b |``; an empty cell is ``| |``."""
    return "|" + "|".join(f" {cell} " if str(cell) else " " for cell in cells) + "|"


_ALIGN = {None: "---", "left": ":---", "right": "---:", "center": ":---:"}


def rule(columns: int, align: Sequence[str | None] | None = None) -> str:
    """The row under a table's header: ``|---|---|``; ``align`` gives each column's alignment
    (None, ``"left"``, ``"right"`` or ``"center"``), all unmarked when not given."""
    marks = list(align) if align is not None else [None] * columns
    if len(marks) != columns:
        raise ValueError(f"{len(marks)} alignments for {columns} columns")
    return "|" + "".join(f"{_ALIGN[mark]}|" for mark in marks)


def head(headers: Sequence[object], align: Sequence[str | None] | None = None) -> str:
    """A table's header and the rule under it, for a table printed row by row."""
    return row(headers) + "\n" + rule(len(headers), align)


def table(
    headers: Sequence[object],
    rows: Iterable[Sequence[object]],
    align: Sequence[str | None] | None = None,
) -> str:
    """A Markdown table: the header, the rule, then one line per row (no newline at the end)."""
    return "\n".join([head(headers, align), *(row(cells) for cells in rows)])


# --- the machine -------------------------------------------------------------------------------


def cpu_model() -> str:
    """The processor's name as the system reports it (``/proc/cpuinfo`` on Linux, else what
    :mod:`platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "an unknown CPU"


def machine() -> str:
    """Where figures were measured: ``"2 cores of <CPU model>"``."""
    return f"{os.cpu_count()} cores of {cpu_model()}"


# --- running a script from another ---------------------------------------------------------------


def module_command(name: str, *args: str) -> list[str]:
    """The command that runs ``bench.NAME`` with this interpreter (with :func:`with_root`'s
    environment, from any folder)."""
    return [sys.executable, "-m", f"bench.{name}", *args]


def with_root(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (this process's environment unless given) with the repository's root first on
    ``PYTHONPATH``: a child process imports ``bench`` and this checkout's ``tinytune``."""
    env = os.environ if env is None else env
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])}
