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

    from tinytune.cli.common import console, png_path, quiet_logs, trial_or_key
    from tinytune.data import frontend_of, get_dataset
    from tinytune.db import open_store, require_tinytune
    from tinytune.evaluators import HardwareConfig, HardwareEvaluator
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import get_supernet
    from tinytune.stored import find_candidate
    from tinytune.viz import report_figure

    quiet_logs()
    if out is not None:
        png_path(out, "--out")
    require_tinytune(storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with open_store(storage) as store:
        found = find_candidate(
            store,
            study=study,
            target=trial_or_key(target),
        )
        space = found.space
        name = device if device is not None else space.device
        profile = get_device(name, store.latest_device_calibration(name))
    candidate = found.candidate
    if found.trial is not None:
        label = f"trial {found.trial} of study {found.study!r}"
    else:
        label = f"candidate {candidate.key[:12]}"
    spec = get_supernet(candidate.supernet)
    config = HardwareConfig(precision=space.precision, batch_size=space.batch_size)
    data = get_dataset(space.dataset, seed=space.data_seed)
    hw = HardwareEvaluator(spec, data.num_classes, config, profile, frontend=frontend_of(data))
    cost, graph = hw.cost_with_graph(candidate)
    path = out or Path(f"report-{candidate.key[:12]}.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    report_figure(
        graph,
        cost.memory,
        cost.latency,
        path,
        title=f"{label}: {candidate.supernet} r{candidate.subnet.resolution}",
        device=profile.name,
    )
    step_s = cost.latency.train_step_s if cost.latency is not None else 0.0
    frontend = cost.frontend
    console.print(
        f"SRAM {cost.sram_bytes / 1024:.1f} KB (arena {cost.arena_bytes / 1024:.1f} KB, its "
        f"peak {cost.memory.peak_bytes / 1024:.1f} KB; static {cost.static_bytes / 1024:.1f} KB;"
        f" stack {cost.stack_bytes / 1024:.1f} KB), flash {cost.flash_bytes / 1024:.1f} KB, "
        "training step "
        f"{1000 * step_s:.1f} ms on {profile.name}; wrote {path}"
    )
    if frontend is not None:  # a keyword model: what its input costs, beside the step
        made = "" if frontend.seconds is None else f", {1000 * frontend.seconds:.1f} ms a clip"
        console.print(
            f"front-end: {frontend.scratch_bytes / 1024:.1f} KB of static SRAM beside the arena"
            f" and {frontend.flash_bytes / 1024:.1f} KB of tables{made}; the front counts them "
            f"({cost.sram_bytes / 1024:.1f} KB, {1000 * (cost.latency_s or 0):.1f} ms)"
        )
