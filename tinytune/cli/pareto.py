"""``tinytune pareto``: print the latest stored Pareto front of a study."""

from __future__ import annotations

from typing import Annotated

import typer

from tinytune.cli.common import DEFAULT_STORAGE

__all__ = ["pareto"]


def pareto(
    study: Annotated[
        str | None, typer.Option(help="Study name (default: the only study in the database).")
    ] = None,
    storage: Annotated[
        str, typer.Option(help="SQLAlchemy URL of the database.")
    ] = DEFAULT_STORAGE,
) -> None:
    """Print the Pareto front of measured results stored for a study."""
    from tinytune.cli.common import console, front_table, quiet_logs, require_database
    from tinytune.db import open_store
    from tinytune.errors import StorageError

    quiet_logs()
    require_database(storage)
    with open_store(storage) as store:
        names = store.study_names()
        if study is None:
            if len(names) != 1:
                raise StorageError(
                    f"the database holds {len(names)} studies; choose one with --study: "
                    f"{', '.join(names) or '(none)'}"
                )
            study = names[0]
        if study not in names:
            raise StorageError(
                f"no study {study!r} in {storage}; studies: {', '.join(names) or '(none)'}"
            )
        snap = store.latest_pareto(study)
    if snap is None or not snap.points:
        console.print(f"study {study!r} has no measured candidate within its budget yet")
        return
    hv = f", hypervolume {snap.hypervolume:.1f}" if snap.hypervolume is not None else ""
    console.print(
        front_table(snap.points, f"Pareto front of study {study!r} ({snap.n_trials} measured{hv})")
    )
