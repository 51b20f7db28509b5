"""Pieces shared by the commands: the console, the supernet checkpoint, tables."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from tinytune.models import PretrainRecipe
    from tinytune.search import FrontPoint
    from tinytune.spaces import SupernetSpec

__all__ = [
    "DEFAULT_STORAGE",
    "console",
    "ensure_checkpoint",
    "front_table",
    "pretrain_bar",
    "quiet_logs",
    "require_database",
    "require_weights",
]

DEFAULT_STORAGE = "sqlite:///tinytune.db"
console = Console(stderr=False, highlight=False)


def quiet_logs() -> None:
    """Keep third-party chatter (Ray, Optuna, Alembic) out of the command's output."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("ray", "optuna", "alembic", "filelock"):
        logging.getLogger(name).setLevel(logging.ERROR)


def ensure_checkpoint(
    spec: SupernetSpec, recipe: PretrainRecipe, weights: Path | None, force: bool = False
) -> Path:
    """The supernet checkpoint to use: ``weights`` when given, else the cached pre-trained one,
    pre-training it (with a progress bar) when it is missing."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from tinytune.data import SourceTask
    from tinytune.models import checkpoint_path, load_supernet, pretrain_supernet, save_supernet

    if weights is not None:
        load_supernet(spec, weights)  # fails early, with one line, on a bad file
        return weights
    require_weights(spec, weights)
    path = checkpoint_path(spec, recipe)
    if path.is_file() and not force:
        return path
    task = SourceTask(recipe.source_classes, recipe.seed)
    with Progress(
        TextColumn("pre-training {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps, loss {task.fields[loss]:.3f}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        tid = bar.add_task(spec.name, total=recipe.steps, loss=float("nan"))
        net = pretrain_supernet(
            spec, recipe, task.batch, lambda i, n, loss: bar.update(tid, completed=i, loss=loss)
        )
    save_supernet(net, spec, recipe, path)
    console.print(f"supernet checkpoint: {path}")
    return path


def front_table(front: tuple[FrontPoint, ...] | list[dict], title: str):
    """A rich table of Pareto points (FrontPoint objects or their stored dicts)."""
    from rich.table import Table

    table = Table(title=title)
    cols = ("trial", "scheme", "accuracy", "val acc", "peak SRAM", "flash", "step", "candidate")
    for col in cols:
        table.add_column(col, justify="right" if col not in ("scheme", "candidate") else "left")
    for p in front:
        d = p if isinstance(p, dict) else p.__dict__
        flash = d.get("flash_bytes")
        val = d.get("val_accuracy")
        latency = d.get("latency_s")
        table.add_row(
            str(d.get("trial")),
            str(d.get("scheme")),
            f"{100 * d['accuracy']:.1f}%",
            f"{100 * val:.1f}%" if val is not None else "-",
            f"{d['memory_bytes'] / 1024:.1f} KB",
            f"{flash / 1024:.1f} KB" if flash else "-",
            f"{1000 * latency:.0f} ms" if latency is not None else "-",
            str(d.get("candidate_key"))[:12],
        )
    return table


def require_database(url: str) -> None:
    """Reading commands must not create an empty SQLite file where none exists."""
    from tinytune.db.engine import parse_url
    from tinytune.errors import StorageError

    parsed = parse_url(url)  # a one-line error with the password masked
    on_disk = parsed.get_backend_name() == "sqlite" and parsed.database not in (
        None,
        "",
        ":memory:",
    )
    if on_disk and not Path(parsed.database).is_file():
        raise StorageError(f"database file {parsed.database!r} does not exist")


def require_weights(spec: SupernetSpec, weights: Path | None) -> None:
    """A published supernet cannot be pre-trained here: its weights must be given."""
    from tinytune.errors import ModelError
    from tinytune.models.supernet import PUBLISHED_URL

    if spec.published and weights is None:
        raise ModelError(
            f"supernet {spec.name} needs its published ImageNet weights, which tinytune does not "
            f"download: fetch {PUBLISHED_URL.format(name=spec.name)} and pass the file with "
            "--weights FILE"
        )


@contextmanager
def pretrain_bar(name: str) -> Iterator[Callable[[int, int, float], None]]:
    """A progress callback for pre-training that shows a bar once a step is reported."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("pre-training {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps, loss {task.fields[loss]:.3f}"),
        TimeElapsedColumn(),
        console=console,
    )
    tasks: list = []

    def step(i: int, n: int, loss: float) -> None:
        if not tasks:
            bar.start()
            tasks.append(bar.add_task(name, total=n, loss=float("nan")))
        bar.update(tasks[0], completed=i, loss=loss)

    try:
        yield step
    finally:
        if tasks:
            bar.stop()
