"""The ``tinytune`` command: one module per sub-command, heavy imports deferred.

User errors (any :class:`~tinytune.errors.TinyTuneError`, or a malformed option) print one line
on stderr and exit with status 2. Anything else is a bug: one line on stderr names it and the
file its traceback went to (exit status 1); ``tinytune --debug ...`` (or ``TINYTUNE_DEBUG=1``)
lets the traceback through instead.
"""

from __future__ import annotations

import inspect
import os
import sys
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from tinytune.cli import (
    calibrate,
    dashboard,
    devices,
    export,
    pareto,
    pretrain,
    profile,
    report,
    search,
)

__all__ = ["app", "main"]

app = typer.Typer(
    name="tinytune",
    help="Search how to fine-tune a network on a tiny device, and show what was found.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _summary(command: Callable[..., None]) -> str:
    """The first paragraph of a command's docstring on one line: the list of commands in
    ``tinytune --help`` keeps a docstring's line breaks, which wrap mid-sentence there."""
    return " ".join(inspect.cleandoc(command.__doc__ or "").split("\n\n")[0].split())


def _help(command: Callable[..., None]) -> str:
    """A command's docstring as its ``--help`` shows it: each paragraph on one line (the help
    wraps it at the terminal's width), double backquotes as plain quotes."""
    paragraphs = inspect.cleandoc(command.__doc__ or "").split("\n\n")
    return "\n\n".join(" ".join(p.split()).replace("``", "'") for p in paragraphs)


DEBUG_FLAG = "--debug"


@app.callback()
def _options(
    debug: Annotated[
        bool,
        typer.Option(
            DEBUG_FLAG,
            help="Let an internal error's traceback through (else: one line, and the "
            "traceback in a file it names).",
        ),
    ] = False,
) -> None:
    """Search how to fine-tune a network on a tiny device, and show what was found."""


for _name, _command in (
    ("search", search.search),
    ("pareto", pareto.pareto),
    ("dashboard", dashboard.dashboard),
    ("pretrain", pretrain.pretrain),
    ("profile", profile.profile),
    ("calibrate", calibrate.calibrate),
    ("devices", devices.devices),
    ("report", report.report),
    ("export", export.export),
):
    app.command(_name, short_help=_summary(_command), help=_help(_command))(_command)


def _debugging(argv: list[str]) -> bool:
    """Whether ``--debug`` stands before the command's name, or ``TINYTUNE_DEBUG`` is set."""
    leading = []
    for arg in argv:
        if not arg.startswith("-"):
            break
        leading.append(arg)
    return DEBUG_FLAG in leading or os.environ.get("TINYTUNE_DEBUG", "") not in ("", "0")


def _crash_file(argv: list[str], error: BaseException) -> Path | None:
    """Write the traceback of an internal error, with the command line and the version, to a
    file of the cache's ``errors/`` folder (else the temporary folder); its path, or None where
    neither can be written."""
    from tempfile import gettempdir

    from tinytune.paths import cache_dir

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    text = (
        f"tinytune {_version()}, Python {sys.version.split()[0]}\n"
        f"command: tinytune {' '.join(map(_masked, argv))}\n\n"
        + "".join(traceback.format_exception(error))
    )
    for folder in (cache_dir() / "errors", Path(gettempdir())):
        path = folder / f"tinytune-error-{stamp}-{os.getpid()}.txt"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError:
            continue
        return path
    return None


def _masked(arg: str) -> str:
    """A command-line argument as a report may show it: a URL's password (``--storage``) as
    ``***``."""
    from tinytune.db.engine import mask_url

    if "://" not in arg:
        return arg
    flag, eq, url = arg.rpartition("=") if arg.startswith("--") else ("", "", arg)
    return f"{flag}{eq}{mask_url(url)}"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tinytune")
    except PackageNotFoundError:
        return "unknown"


def _internal_error(argv: list[str], error: BaseException) -> int:
    """One line for a bug: what was raised, where its traceback went, how to report it."""
    what = " ".join(str(error).split())[:200] or "(no message)"
    path = _crash_file(argv, error)
    where = (
        f"the traceback is in {path}"
        if path is not None
        else "no file could be written for its traceback"
    )
    print(
        f"tinytune: internal error: {type(error).__name__}: {what} ({where}; please report it "
        f"with that file, or run again as 'tinytune {DEBUG_FLAG} ...' to see it)",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    from tinytune.errors import CLI, TinyTuneError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        result = app(args=argv, standalone_mode=False)
    except TinyTuneError as e:
        print(f"tinytune: error: {e.worded(CLI)}", file=sys.stderr)  # options as flags
        return 2
    except KeyboardInterrupt:
        print("tinytune: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        # click's exceptions, or those of the copy of click that typer vendors
        name = type(e).__name__
        if name == "Abort":
            print("tinytune: interrupted", file=sys.stderr)
            return 130
        if name == "Exit":
            return int(getattr(e, "exit_code", 0))
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            print(f"tinytune: error: {e.format_message()}", file=sys.stderr)
            return int(e.exit_code) if name != "ClickException" else 2
        if isinstance(e, OSError) and e.filename is not None:
            # a file the checks let through that the system then refused (a read-only or full
            # file system, a folder removed meanwhile): its name and the system's reason
            other = f" -> {e.filename2!r}" if e.filename2 is not None else ""
            print(
                f"tinytune: error: {e.strerror or type(e).__name__}: {str(e.filename)!r}{other}",
                file=sys.stderr,
            )
            return 1
        if _debugging(argv):
            raise
        return _internal_error(argv, e)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
