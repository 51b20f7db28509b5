"""An internal error (a bug, not a user's mistake) in any command: one line on stderr that
names it and the file holding its traceback, exit status 1; ``--debug`` lets it through."""

from __future__ import annotations

from pathlib import Path

import pytest

import tinytune.cli.common
from tinytune.cli.main import app, main

# each command with the fewest arguments that reach its body
COMMANDS = {
    "search": ["search"],
    "pareto": ["pareto"],
    "dashboard": ["dashboard"],
    "pretrain": ["pretrain"],
    "profile": ["profile"],
    "calibrate": ["calibrate", "m.json", "--device", "stm32f746"],
    "devices": ["devices"],
    "report": ["report", "0"],
    "export": ["export", "0", "-o", "bundle"],
}


class _Bug(RuntimeError):
    pass


def test_every_command_is_covered() -> None:
    assert set(COMMANDS) == {c.name for c in app.registered_commands}


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every command fails inside its body, as a bug would; errors go to a private cache."""

    def fail() -> None:
        raise _Bug("an index out of range\nin two lines")

    monkeypatch.setattr(tinytune.cli.common, "quiet_logs", fail)
    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TINYTUNE_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "cache" / "errors"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_internal_error_is_one_line_and_a_file(
    command: str, broken: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(COMMANDS[command]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    assert captured.err.startswith(
        "tinytune: internal error: _Bug: an index out of range in two lines (the traceback is in "
    )
    (written,) = broken.iterdir()
    assert str(written) in captured.err
    text = written.read_text()
    assert f"command: tinytune {' '.join(COMMANDS[command])}" in text
    assert "Traceback (most recent call last)" in text and "in fail" in text


def test_debug_lets_the_traceback_through(broken: Path) -> None:
    with pytest.raises(_Bug):
        main(["--debug", "devices"])
    assert not broken.exists()


def test_the_environment_variable_does_too(broken: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYTUNE_DEBUG", "1")
    with pytest.raises(_Bug):
        main(["devices"])


def test_an_unwritable_cache_falls_back_to_the_temporary_folder(
    broken: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TINYTUNE_CACHE", str(blocker))  # a file: errors/ cannot be made under it
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    assert main(["devices"]) == 1
    (written,) = (tmp_path / "tmp").iterdir()
    assert str(written) in capsys.readouterr().err


def test_a_user_error_is_still_exit_two(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert main(["report", "0", "--storage", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "internal error" not in capsys.readouterr().err


def test_the_file_keeps_no_password_of_the_command_line(broken: Path) -> None:
    url = "postgresql+psycopg://alice:s3cret@127.0.0.1:5432/test"
    assert main(["pareto", "--storage", url]) == 1
    assert main(["pareto", f"--storage={url}"]) == 1
    for written in broken.iterdir():
        text = written.read_text()
        assert "s3cret" not in text and "alice:***@127.0.0.1" in text
