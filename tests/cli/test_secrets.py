"""No command shows the password of a database URL: not on stdout or stderr, not in a log record,
not in a traceback, whether the PostgreSQL server answers or not."""

from __future__ import annotations

import logging
import socket
import traceback
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from tinytune.cli.main import main

SECRET = "Hush/s3cret:pw"
"""A password that needs quoting in a URL, so that both of its spellings are looked for."""

SPELLINGS = (SECRET, quote(SECRET, safe=""))

UNREACHABLE = f"postgresql+psycopg://postgres:{quote(SECRET, safe='')}@127.0.0.1:1/nothing"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small host measurement file for ``tinytune calibrate``."""
    path = tmp_path_factory.mktemp("profile") / "host.json"
    argv = ["profile", "-o", str(path), "--candidates", "6", "--rounds", "1", "--repeats", "1"]
    assert main(argv) == 0
    return path


@pytest.fixture(
    params=[pytest.param("reachable", marks=pytest.mark.requires_postgres), "unreachable"]
)
def secret_url(request: pytest.FixtureRequest) -> str:
    """A PostgreSQL URL with a password: the test server (trust authentication accepts any
    password) or a port where nothing listens."""
    if request.param == "unreachable":
        return UNREACHABLE
    url = request.getfixturevalue("postgres_url")
    return sa.make_url(url).set(password=SECRET).render_as_string(hide_password=False)


Command = Callable[[str, Path], list[str]]

COMMANDS: dict[str, Command] = {
    "search": lambda url, _: ["search", "--storage", url, "--sram-budget", "1KB"],
    "pareto": lambda url, _: ["pareto", "--storage", url, "--study", "nope"],
    "pareto-any": lambda url, _: ["pareto", "--storage", url],
    "dashboard": lambda url, _: ["dashboard", "--storage", url, "--port", str(_free_port())],
    "export": lambda url, tmp: [
        "export", "--storage", url, "--study", "nope", "--trial", "0", "-o", str(tmp / "b"),
    ],
    "report": lambda url, tmp: [
        "report", "0", "--study", "nope", "--storage", url, "-o", str(tmp / "r.png"),
    ],
    "devices": lambda url, _: ["devices", "--storage", url],
}  # fmt: skip


def _run_and_collect(
    argv: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> tuple[int | None, str]:
    """Runs the command with every log record also written to a file; returns its exit status
    (None when it raised) and all it showed: stdout, stderr, log records, log file, traceback."""
    log_file = tmp_path / "tinytune.log"
    handler = logging.FileHandler(log_file)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    caplog.set_level(logging.DEBUG)
    code: int | None = None
    shown = ""
    try:
        code = main(argv)
    except Exception:  # a traceback is a failure of its own, but first: does it leak?
        shown += traceback.format_exc()
    finally:
        root.removeHandler(handler)
        handler.close()
    captured = capsys.readouterr()
    records = "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)
    shown += "\n".join((captured.out, captured.err, caplog.text, records))
    shown += log_file.read_text()
    return code, shown


def _assert_no_secret(shown: str) -> None:
    for spelling in SPELLINGS:
        assert spelling not in shown


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_command_shows_the_password(
    command: str,
    secret_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    argv = COMMANDS[command](secret_url, tmp_path)
    code, shown = _run_and_collect(argv, tmp_path, capsys, caplog)
    _assert_no_secret(shown)
    assert code in (0, 2), shown[-2000:]
    if code == 2 and secret_url == UNREACHABLE:
        assert "postgres:***@127.0.0.1:1" in shown


def test_calibrate_does_not_show_the_password(
    measured: Path,
    secret_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    argv = ["calibrate", str(measured), "--device", "host", "--storage", secret_url, "--force"]
    code, shown = _run_and_collect(
        [*argv, "-o", str(tmp_path / "p.json")], tmp_path, capsys, caplog
    )
    _assert_no_secret(shown)
    if secret_url == UNREACHABLE:
        assert code == 2 and "postgres:***@127.0.0.1:1" in shown
    else:
        assert code == 0 and "stored as calibration" in shown and ":***@" in shown


@pytest.mark.slow
@pytest.mark.requires_postgres
def test_search_prints_the_storage_masked(
    postgres_url: str,
    tiny_checkpoint: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = sa.make_url(postgres_url).set(password=SECRET).render_as_string(hide_password=False)
    argv = ["search", "--storage", url, "--trials", "1", "--inline", "--epochs", "1"]
    argv += [
        "--lr",
        "0.05",
        "--batch-size",
        "32",
        "--pretrain-steps",
        "2",
        "--sram-budget",
        "none",
    ]
    code, shown = _run_and_collect(argv, tmp_path, capsys, caplog)
    _assert_no_secret(shown)
    assert code == 0, shown[-2000:]
    assert "storage:" in shown and "postgresql+psycopg://postgres:***@" in shown


def test_a_foreign_error_that_quotes_the_url_is_masked() -> None:
    from tinytune.db.engine import translate_error

    error = sa.exc.ArgumentError(f"bad option in {UNREACHABLE} ({SECRET})")
    text = str(translate_error("cannot open database", UNREACHABLE, error))
    _assert_no_secret(text)
    assert text.startswith("cannot open database 'postgresql+psycopg://postgres:***@127.0.0.1:1/")
