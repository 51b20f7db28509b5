"""``tinytune report``: a PNG of where a candidate's training step spends SRAM and time."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tinytune.cli.common import DEFAULT_STORAGE

__all__ = ["report"]


def report(
    target: Annotated[
        str, typer.Argument(help="A trial number of the study, or a candidate key (or prefix).")
    ],
    study: Annotated[
        str | None, typer.Option(help="Study of the trial (default: the only study).")
    ] = None,
    storage: Annotated[
        str, typer.Option(help="SQLAlchemy URL of the database.")
    ] = DEFAULT_STORAGE,
    device: Annotated[
        str | None, typer.Option(help="Device to predict latency on (default: the study's).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="PNG to write (default report-KEY.png).")
    ] = None,
) -> None:
    """Write a PNG with the per-step memory breakdown of a candidate's training step and its
    predicted per-op latency on the device."""
    import optuna

    from tinytune.cli.common import console, quiet_logs, require_database
    from tinytune.db import open_store
    from tinytune.errors import StorageError
    from tinytune.evaluators import HardwareConfig, HardwareEvaluator
    from tinytune.hwmodels.calibration import resolve_device
    from tinytune.search.driver import SPACE_ATTR
    from tinytune.spaces import Candidate, get_supernet
    from tinytune.viz import report_figure

    quiet_logs()
    require_database(storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with open_store(storage) as store:
        names = store.study_names()
        space: dict = {}
        budget = None
        if target.isdigit():
            if study is None:
                if len(names) != 1:
                    raise StorageError(
                        f"the database holds {len(names)} studies; choose one with --study: "
                        f"{', '.join(names) or '(none)'}"
                    )
                study = names[0]
            try:
                loaded = optuna.load_study(study_name=study, storage=storage)
            except KeyError as e:
                raise StorageError(
                    f"no study {study!r} in {storage}; studies: {', '.join(names) or '(none)'}"
                ) from e
            trials = {t.number: t for t in loaded.get_trials(deepcopy=False)}
            trial = trials.get(int(target))
            if trial is None or "candidate" not in trial.user_attrs:
                raise StorageError(
                    f"study {study!r} has no trial {target} with a candidate (trials 0–"
                    f"{max(trials, default=-1)})"
                )
            payload = trial.user_attrs["candidate"]
            space = loaded.user_attrs.get(SPACE_ATTR, {})
            budget = trial.user_attrs.get("sram_budget_bytes")
            label = f"trial {target} of study {study!r}"
        else:
            found = store.find_candidates(target.lower())
            if len(found) != 1:
                raise StorageError(
                    f"candidate key {target!r} matches {len(found)} stored candidates; give "
                    "more of the key, or a trial number with --study"
                )
            payload = found[0].payload
            label = f"candidate {found[0].key[:12]}"
        device_name = device or space.get("device", "stm32f746")
        profile, _ = resolve_device(device_name, store)
    candidate = Candidate.from_json(payload)
    spec = get_supernet(candidate.supernet)
    config = HardwareConfig(
        precision=space.get("precision", "int8"), batch_size=space.get("batch_size", 1)
    )
    hw = HardwareEvaluator(spec, _n_classes(space), config, profile)
    cost, graph = hw.cost_with_graph(candidate)
    path = out or Path(f"report-{candidate.key[:12]}.png")
    report_figure(
        graph,
        cost.memory,
        cost.latency,
        path,
        title=f"{label}: {candidate.supernet} r{candidate.subnet.resolution}",
        budget_bytes=budget,
        device=profile.name,
    )
    console.print(
        f"peak SRAM {cost.memory.peak_bytes / 1024:.1f} KB (arena {cost.arena_bytes / 1024:.1f}"
        f" KB), flash {cost.flash_bytes / 1024:.1f} KB, training step "
        f"{1000 * (cost.latency_s or 0):.1f} ms on {profile.name}; wrote {path}"
    )


def _n_classes(space: dict) -> int:
    from tinytune.data import get_dataset

    return get_dataset(space.get("dataset", "digits")).num_classes
