"""``tinytune pareto``: print the latest stored Pareto front of a study; ``--plot`` draws it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tinytune.cli.common import DEFAULT_STORAGE

if TYPE_CHECKING:
    from tinytune.search.study import StudySpace

__all__ = ["pareto"]


def pareto(
    study: Annotated[
        str | None, typer.Option(help="Study name (default: the only study in the database).")
    ] = None,
    storage: Annotated[
        str, typer.Option(help="SQLAlchemy URL of the database.")
    ] = DEFAULT_STORAGE,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="Also write a PNG: the measured front (accuracy vs peak SRAM, latency as "
            "colour) and the hypervolume after each measured evaluation."
        ),
    ] = None,
    wide: Annotated[
        bool,
        typer.Option(
            help="A row per point (schedule twins apart) with its flash, SRAM against full "
            "fine-tuning and whole candidate key."
        ),
    ] = False,
    json: Annotated[
        bool,
        typer.Option("--json", help="Print the front as JSON, every field, and nothing else."),
    ] = False,
) -> None:
    """Print the Pareto front of measured results stored for a study: a row per fine-tune,
    its schedule twins (the same fine-tune at other patch counts) folded in."""
    import json as json_module

    import tinytune
    from tinytune.cli.common import console, png_path, quiet_logs
    from tinytune.cli.front_table import front_json

    quiet_logs()
    if plot is not None:
        png_path(plot, "--plot")
    view = tinytune.load(study, storage)  # one line when there is no such study
    stored = _Stored.read(view, storage)
    if json:
        points = front_json(view.front, view.reference, stored.int8, stored.schedules)
        print(json_module.dumps(points, indent=1))
        return
    _print_front(view, stored, wide)
    _print_facts(view, stored, storage)
    if plot is not None:
        _plot(view, stored, plot)
        console.print(f"wrote {plot}")


@dataclass(frozen=True)
class _Stored:
    """What the command reads of a study besides its view: its latest snapshot and every
    snapshot, its measured evaluations, its low fidelities (count, Kendall τ), the device's
    accuracies of its front and the schedule of every point."""

    snap: Any
    snapshots: list[Any]
    measured: list[Any]
    low: dict[str, tuple[int, Any]]
    int8: dict[str, Any]
    schedules: dict[str, Any]

    @classmethod
    def read(cls, view: Any, storage: str) -> _Stored:
        from tinytune.cli.front_table import schedules_of
        from tinytune.db import open_store
        from tinytune.search.ladder import rank_correlation
        from tinytune.search.run import int8_accuracies

        study = view.name
        with open_store(storage) as store:
            snap = store.latest_pareto(study)
            keys = [p["candidate_key"] for p in snap.points] if snap is not None else []
            stored = cls(
                snap=snap,
                snapshots=store.pareto_snapshots(study),
                measured=store.evaluations(study, fidelity="measured", status="ok"),
                low={
                    fidelity: (
                        len(store.evaluations(study, fidelity=fidelity, status="ok")),
                        rank_correlation(store, study, fidelity),
                    )
                    for fidelity in ("proxy", "short")
                },
                int8=int8_accuracies(store, study, keys),
                schedules={},
            )
        reference = [view.reference.candidate_key] if view.reference is not None else []
        return dataclasses.replace(stored, schedules=schedules_of(storage, [*keys, *reference]))


def _print_front(view: Any, stored: _Stored, wide: bool) -> None:
    """The front's table (every column whole with ``wide``, however narrow the terminal)."""
    from tinytune.cli.common import console
    from tinytune.cli.front_table import (
        augmented_words,
        front_table,
        measured_words,
        study_counts,
    )

    snap = stored.snap
    if snap is None or not snap.points:
        console.print(f"study {view.name!r} has no measured candidate within its budget yet")
        return
    hv = f", hypervolume {snap.hypervolume:.4f}" if snap.hypervolume is not None else ""
    chosen = "chosen on validation accuracy, test accuracy reported"
    counts = measured_words(*study_counts(stored.measured))
    table = front_table(
        view.front,
        f"Pareto front of study {view.name!r} ({counts}{hv}), {chosen}"
        + augmented_words(view.space.finetune.augment if view.space.finetune else None),
        view.reference,
        stored.int8,
        schedules=stored.schedules,
        wide=wide,
        caption=_caption(wide, snap.hypervolume is not None),
        width=None if wide else console.width,
    )
    natural = console.measure(table, options=console.options.update_width(1000)).maximum
    shown = console.width
    console.width = max(shown, natural) if wide else shown
    try:
        console.print(table)
    finally:
        console.width = shown


def _print_facts(view: Any, stored: _Stored, storage: str) -> None:
    """The lines under the table: budgets, the recipe, how it was measured, low fidelities."""
    from tinytune.cli.common import against_recipe, console

    snap = stored.snap
    if snap is not None and snap.budgets is not None:
        console.print(_budgets_line(snap.budgets))
    sram = _sram_line(view.space.device)
    if sram:
        console.print(sram, soft_wrap=True)
    against = against_recipe(view.front, view.recipe)
    if against:
        console.print(against, soft_wrap=True)
    repeats = {int((e.details or {}).get("repeats", 1)) for e in stored.measured}
    measured_by = _measured_by(view.space, storage, view.name, repeats)
    if measured_by is not None:
        console.print(measured_by)
    for fidelity, what in (("proxy", "estimates"), ("short", "short fine-tunes")):
        n, tau = stored.low[fidelity]
        if not n:
            continue
        corr = (
            f"Kendall τ {tau.tau:.2f} (p = {tau.p_value:.2g})"
            if tau.tau is not None and tau.p_value is not None
            else "Kendall τ undefined"
        )
        console.print(
            f"{fidelity}: {n} {what} in the study (not on the front); {corr} with measured "
            f"validation accuracy over the {tau.n} candidates measured too"
        )


def _plot(view: Any, stored: _Stored, plot: Path) -> None:
    """The front and its hypervolume history as a PNG."""
    from tinytune.cli.front_table import front_json
    from tinytune.search.front import hypervolume_history
    from tinytune.viz.pareto import pareto_figure

    snap = stored.snap
    plot.parent.mkdir(parents=True, exist_ok=True)
    pareto_figure(
        stored.measured,
        front_json(view.front, None, stored.int8, stored.schedules),
        hypervolume_history(stored.snapshots, stored.measured),
        plot,
        title=f"study {view.name!r}: measured Pareto front",
        sram_budget_bytes=(
            snap.budgets.get("sram_bytes")
            if snap is not None and snap.budgets is not None
            else None
        ),
    )


def _caption(wide: bool, hypervolume: bool) -> str:
    """What the table's columns mean, under it."""
    from tinytune.cli.front_table import ROWS
    from tinytune.search.front import HYPERVOLUME_BOX

    rows = (
        "a row per point; flash: the model's constants and the kernels' code, as the search "
        "estimates them"
        if wide
        else f"{ROWS}; --wide: a row each, with flash and key"
    )
    rows += "; --json: every field"
    return rows + (f". {HYPERVOLUME_BOX}" if hypervolume else "")


def _measured_by(
    space: StudySpace, storage: str, study: str, repeats_seen: set[int]
) -> str | None:
    """How the study measures its candidates, from its search space (None for a study stored
    before its space named it): epochs, batch, rates (each family's, where chosen on
    validation), the weight decay where there is one, the train/validation partitions (given,
    or ``repeats_seen`` in its measured evaluations where chosen by the validation split's
    size) and the weights' SHA-256."""
    import optuna

    from tinytune.search import Attr
    from tinytune.search.run import StudyRates

    finetune = space.finetune
    if finetune is None:
        return None
    if finetune.lr is None:  # chosen per scheme family
        stored = optuna.load_study(study_name=study, storage=storage).user_attrs.get(
            Attr.LR_CALIBRATION
        )
        rates = (
            ": " + ", ".join(f"{r.family} {r.lr:g}" for r in StudyRates.from_json(stored).rates)
            if stored
            else " (not chosen yet)"
        )
        rate = f"the learning rate of each scheme family chosen on validation{rates}"
    else:
        rate = f"learning rate {finetune.lr}"
    if finetune.repeats is None:  # chosen by the validation split's size
        seen = sorted(repeats_seen - {1})
        parts = (
            f", each the mean over {'/'.join(map(str, seen))} train/validation partitions (the "
            "validation split is too small to rank candidates alone)"
            if seen
            else ""
        )
    else:
        parts = f", {finetune.repeats} train/validation partitions each"
    weights = space.weights
    sha = f"; supernet weights {weights[:12]}… (SHA-256)" if weights else ""
    epochs = finetune.epochs
    decay = f", weight decay {finetune.weight_decay:g}" if finetune.weight_decay else ""
    return (
        f"measured by fine-tuning {epochs} epoch{'' if epochs == 1 else 's'} at batch "
        f"{finetune.batch_size}, {rate}{decay}{parts}{sha}"
    )


def _sram_line(device: str) -> str:
    """What a point's SRAM counts on the study's device: "" where it has no bundle stack."""
    from tinytune.errors import ConfigError
    from tinytune.hwmodels.registry import get_device
    from tinytune.hwmodels.stack import stack_bytes
    from tinytune.units import format_bytes

    try:
        core = get_device(device).core
    except ConfigError:  # a device profile no longer there: the figures speak for themselves
        return ""
    stack = stack_bytes(core)
    if not stack:
        return ""
    return (
        f"SRAM: all a point's bundle needs on {device}: its arena, its static data and "
        f"{format_bytes(stack)} of stack on the {core} (tinytune export shows each)"
    )


def _budgets_line(budgets: dict[str, Any]) -> str:
    """The budgets a stored front was chosen under, in a line."""
    from tinytune.cli.common import size_text

    sram, flash, latency = (budgets.get(k) for k in ("sram_bytes", "flash_bytes", "latency_s"))
    return (
        f"the front meets the budgets of the run that stored it: SRAM "
        f"{size_text(int(sram)) if sram else 'none'}, flash "
        f"{size_text(int(flash)) if flash else 'none'}, step latency "
        f"{f'{1000 * float(latency):g} ms' if latency else 'none'}"
    )
