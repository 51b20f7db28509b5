"""Pieces shared by the commands: the console, progress bars, tables."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tinytune.options import DEFAULT_STORAGE
from tinytune.outfiles import json_path, png_path

if TYPE_CHECKING:
    from tinytune.evaluators.device import TrainingProgress

__all__ = [
    "DEFAULT_STORAGE",
    "against_recipe",
    "console",
    "json_path",
    "measure_bar",
    "png_path",
    "pretrain_bar",
    "quiet_logs",
    "size_text",
    "trial_or_key",
]

# A terminal's own width, or COLUMNS where set; written to a file or a pipe (logs, CI), wide
# enough for a front table with every column (rich would otherwise wrap it at 80 columns).
# Without markup: study names, paths and data sets are printed as given ("[/x]" is a name).
console = Console(
    stderr=False,
    highlight=False,
    markup=False,
    width=None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 160,
)


class _FlagWords(logging.Filter):
    """Names the options in a log message of :class:`tinytune.errors.Words` (``mutate=True``
    to a Python caller) as the command line names them (``--mutate``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from tinytune.errors import CLI, Flag, Words

        if isinstance(record.msg, Words | Flag):
            record.msg = record.msg.worded(CLI)
        return True


def quiet_logs() -> None:
    """Keep third-party chatter (Ray, Optuna, Alembic) out of the command's output, and word
    the options that tinytune's log messages name as flags. Logging that the embedding
    process set up already (handlers on the root logger) is left as it is."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        for handler in root.handlers:
            handler.addFilter(_FlagWords())
    for name in ("ray", "optuna", "alembic", "filelock"):
        logging.getLogger(name).setLevel(logging.ERROR)


def trial_or_key(target: str) -> int | str:
    """A command's TARGET: a trial number when it is ASCII digits, else a candidate key (or a
    unique prefix of one)."""
    return int(target) if target.isascii() and target.isdigit() else target


def against_recipe(front: Sequence[Any], recipe: Any) -> str | None:
    """The front's most accurate point on validation weighed against ``recipe``, the best
    hand-written preset within the budgets (``SearchResult.recipe``, ``StudyView.recipe``): what
    the search bought over the papers' recipes run alone. None without either."""
    if recipe is None or not front:
        return None
    best = max(front, key=lambda p: (p.val_accuracy, -p.memory_bytes))

    def shown(p: Any) -> str:
        test = f", {100 * p.test_accuracy:.1f}% test" if p.test_accuracy is not None else ""
        return f"{100 * p.val_accuracy:.1f}% val{test}"

    preset = f"`{recipe.scheme}` on the default sub-network ({shown(recipe)})"
    if best.val_accuracy > recipe.val_accuracy:
        gain = 100 * (best.val_accuracy - recipe.val_accuracy)
        return (
            f"against the papers' recipes: the front's most accurate point, `{best.scheme}` "
            f"({shown(best)}), is {gain:.1f} points above the best hand-written preset, {preset}"
        )
    return (
        "against the papers' recipes: no point more accurate on validation than the best "
        f"hand-written preset, {preset}"
    )


def size_text(n: int) -> str:
    """A capacity or budget of ``n`` bytes in the unit that fits, to three significant digits
    (:func:`tinytune.units.format_bytes`): ``320 KB``, ``1 MB``."""
    from tinytune.units import format_bytes

    return format_bytes(n, rounded=True)


@contextmanager
def _counted_bar(
    label: str, name: str, counted: str, field: str
) -> Iterator[Callable[[int, int, float], None]]:
    """A progress callback ``(done, total, value)`` that shows a bar once it is first called:
    ``label`` and ``name``, then ``counted`` (its text of ``task.completed``, ``task.total``
    and ``task.fields[field]``) and the time elapsed."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn(f"{label} {{task.description}}", markup=False),
        BarColumn(),
        TextColumn(counted),
        TimeElapsedColumn(),
        console=console,
    )
    tasks: list = []

    def report(i: int, n: int, value: float) -> None:
        shown: dict[str, Any] = {field: value}
        if not tasks:
            bar.start()
            tasks.append(bar.add_task(name, total=n, **shown))
        bar.update(tasks[0], completed=i, **shown)

    try:
        yield report
    finally:
        if tasks:
            bar.stop()


def pretrain_bar(name: str) -> AbstractContextManager[Callable[[int, int, float], None]]:
    """A progress callback for pre-training that shows a bar once a step is reported."""
    counted = "{task.completed}/{task.total} steps, loss {task.fields[loss]:.3f}"
    return _counted_bar("pre-training", name, counted, "loss")


def epochs_bar(name: str) -> AbstractContextManager[Callable[[int, int, float], None]]:
    """A progress callback for training a built-in network: its epochs and the latest
    validation accuracy."""
    counted = "{task.completed}/{task.total} epochs, validation {task.fields[val]:.1%}"
    return _counted_bar("training", name, counted, "val")


@contextmanager
def measure_bar(name: str) -> Iterator[Callable[[TrainingProgress], None]]:
    """A progress callback for a measurement of the device's accuracy (int8 training at batch
    1) that shows a bar of its training images, its epochs and the time left once it reports."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TextColumn(
            "{task.fields[epochs_done]}/{task.fields[epochs]} epochs, "
            "{task.completed}/{task.total} images",
            markup=False,
        ),
        TimeRemainingColumn(),
        console=console,
    )
    tasks: list = []

    def report(p: TrainingProgress) -> None:
        if not tasks:
            bar.start()
            tasks.append(bar.add_task(name, total=p.images, epochs_done=0, epochs=p.epochs))
        bar.update(
            tasks[0],
            completed=p.images_done,
            total=p.images,
            epochs_done=p.epochs_done,
            epochs=p.epochs,
        )

    try:
        yield report
    finally:
        if tasks:
            bar.stop()
