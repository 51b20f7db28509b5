"""The ``tinytune`` command: one module per sub-command, heavy imports deferred.

User errors (any :class:`~tinytune.errors.TinyTuneError`, or a malformed option) print one line
on stderr and exit with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable

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
    app.command(_name, short_help=_summary(_command))(_command)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    from tinytune.errors import CLI, TinyTuneError

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
        raise
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
