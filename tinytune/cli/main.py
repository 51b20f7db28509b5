"""The ``tinytune`` command: one module per sub-command, heavy imports deferred.

User errors (any :class:`~tinytune.errors.TinyTuneError`, or a malformed option) print one line
on stderr and exit with status 2.
"""

from __future__ import annotations

import sys

import click
import typer

from tinytune.cli import dashboard, pareto, pretrain, search

__all__ = ["app", "main"]

app = typer.Typer(
    name="tinytune",
    help="Search how to fine-tune a network on a tiny device, and show what was found.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("search")(search.search)
app.command("pareto")(pareto.pareto)
app.command("dashboard")(dashboard.dashboard)
app.command("pretrain")(pretrain.pretrain)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    from tinytune.errors import TinyTuneError

    try:
        app(args=argv, standalone_mode=False)
    except click.exceptions.UsageError as e:
        print(f"tinytune: error: {e.format_message()}", file=sys.stderr)
        return 2
    except click.exceptions.Abort:
        print("tinytune: interrupted", file=sys.stderr)
        return 130
    except click.exceptions.Exit as e:
        return e.exit_code
    except TinyTuneError as e:
        print(f"tinytune: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tinytune: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
