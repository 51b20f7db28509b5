"""Each command's ``--help`` as a person reads it at 80 columns: paragraphs wrapped where the
terminal ends, not where the docstring's lines did; no reStructuredText quotes; the search's
switches without their ``--no-`` twins."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

from tinytune.cli.main import app


def _help(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tinytune.cli.main", *args, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize("command", sorted(c.name for c in app.registered_commands))
def test_a_commands_help_reflows_its_docstring(command: str) -> None:
    text = _help(command)
    assert "``" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    (registered,) = [c for c in app.registered_commands if c.name == command]
    shown = " ".join(text.replace("│", " ").split())
    for paragraph in inspect.cleandoc(registered.callback.__doc__ or "").split("\n\n"):
        words = " ".join(paragraph.split()).replace("``", "'")
        assert words in shown, words


def test_search_help_has_no_twins_of_switches_and_fits_in_180_lines() -> None:
    text = _help("search")
    assert "--no-resume" not in text and "--no-reproducible" not in text
    assert "--resume" in text and "--reproducible" in text
    assert len(text.splitlines()) <= 180
