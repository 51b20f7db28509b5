"""``tinytune search``: run (or continue) a search and print its measured Pareto front."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tinytune.cli.common import DEFAULT_STORAGE

__all__ = ["search"]


def search(
    study: Annotated[str, typer.Option(help="Study name (continued if it exists).")] = "tinytune",
    storage: Annotated[
        str, typer.Option(help="SQLAlchemy URL of the database (SQLite or PostgreSQL).")
    ] = DEFAULT_STORAGE,
    supernet: Annotated[
        str, typer.Option(help="ofa-proxyless-w<width>, ofa-mbv3-w<width> or a published OFA id.")
    ] = "ofa-proxyless-w0.35",
    dataset: Annotated[
        str, typer.Option(help="digits, procedural or imagefolder:PATH.")
    ] = "digits",
    preset: Annotated[
        str | None,
        typer.Option(
            help="Fix the scheme to a preset (full, last, bias-only, bn+last, tinytl, "
            "mcunetv3) and search sub-networks only."
        ),
    ] = None,
    trials: Annotated[
        int, typer.Option(help="Budget: measured fine-tunes of the study, over all its runs.")
    ] = 16,
    resume: Annotated[
        bool,
        typer.Option(help="Continue an existing study (after a crash) up to its --trials."),
    ] = False,
    time_budget: Annotated[
        str | None, typer.Option(help="Budget: stop proposing after this long (e.g. 300s, 5m).")
    ] = None,
    device: Annotated[
        str,
        typer.Option(
            help="Target device (see 'tinytune devices'): its latency profile and limits."
        ),
    ] = "stm32f746",
    sram_budget: Annotated[
        str, typer.Option(help="Peak training SRAM allowed on the device (e.g. 256KB; 'none').")
    ] = "256KB",
    flash_budget: Annotated[
        str | None, typer.Option(help="Flash allowed (e.g. 1MB; default: the device's flash).")
    ] = None,
    latency_budget: Annotated[
        str | None,
        typer.Option(help="Predicted training-step latency allowed on the device (e.g. 500ms)."),
    ] = None,
    precision: Annotated[
        str, typer.Option(help="On-device training format: int8 or fp32.")
    ] = "int8",
    workers: Annotated[int, typer.Option(help="Parallel evaluations (Ray tasks).")] = 2,
    ray_address: Annotated[
        str | None, typer.Option(help="Address of an existing Ray cluster (default: local).")
    ] = None,
    inline: Annotated[
        bool, typer.Option(help="Evaluate in this process instead of Ray workers.")
    ] = False,
    max_retries: Annotated[
        int, typer.Option(help="Retries of an evaluation whose Ray worker died.")
    ] = 2,
    weights: Annotated[
        Path | None, typer.Option(help="Supernet weights file (published OFA checkpoint).")
    ] = None,
    epochs: Annotated[int, typer.Option(help="Fine-tuning epochs per candidate.")] = 8,
    lr: Annotated[float, typer.Option(help="Fine-tuning learning rate (SGD).")] = 0.2,
    batch_size: Annotated[int, typer.Option(help="Fine-tuning batch size.")] = 16,
    pretrain_steps: Annotated[
        int, typer.Option(help="Sandwich-rule steps when the supernet must be pre-trained.")
    ] = 300,
    seed: Annotated[int, typer.Option(help="Seed of the sampler and of fine-tuning.")] = 0,
    sampler: Annotated[str, typer.Option(help="Optuna sampler: tpe, random or nsga2.")] = "tpe",
    proxy: Annotated[
        bool,
        typer.Option(
            help="Fidelity ladder: score many candidates by the additive proxy (a contribution "
            "analysis, stored and reused) and fine-tune only the promising ones."
        ),
    ] = False,
    proxy_eta: Annotated[
        int, typer.Option(help="With --proxy: proxy-scored candidates per measured one.")
    ] = 4,
    proposals: Annotated[
        int | None, typer.Option(help="Budget: trials proposed in this run (any fidelity).")
    ] = None,
) -> None:
    """Search sub-networks × lite residuals × sparse update schemes; print the Pareto front
    of measured accuracy vs predicted peak training SRAM and training-step latency."""
    import dataclasses
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from tinytune.cli.common import (
        console,
        ensure_checkpoint,
        front_table,
        quiet_logs,
        require_weights,
    )
    from tinytune.cli.units import parse_bytes, parse_seconds
    from tinytune.data import get_dataset
    from tinytune.db import open_store
    from tinytune.errors import BudgetError, ConfigError
    from tinytune.evaluators import (
        FinetuneConfig,
        HardwareConfig,
        HardwareEvaluator,
        run_evaluation,
    )
    from tinytune.models import PretrainRecipe
    from tinytune.search import (
        InlineExecutor,
        RayExecutor,
        SearchConfig,
        check_budgets,
        check_feasible,
        run_search,
    )
    from tinytune.search.driver import SAMPLERS
    from tinytune.spaces import PRESET_NAMES, get_supernet

    quiet_logs()
    spec = get_supernet(supernet)
    require_weights(spec, weights)
    if preset is not None and preset not in PRESET_NAMES:
        raise BudgetError(f"unknown preset {preset!r}; allowed: {', '.join(PRESET_NAMES)}")
    if workers < 1:
        raise BudgetError(f"--workers must be >= 1, got {workers}")
    if precision not in ("int8", "fp32"):
        raise BudgetError(f"unknown precision {precision!r}; allowed: int8, fp32")
    if sampler not in SAMPLERS:
        raise ConfigError(f"unknown sampler {sampler!r}; allowed: {', '.join(SAMPLERS)}")
    data = get_dataset(dataset)
    budget = None if sram_budget.lower() == "none" else parse_bytes(sram_budget, "--sram-budget")
    config = SearchConfig(
        checkpoint="",
        study_name=study,
        supernet=spec.name,
        dataset=data.name,
        n_classes=data.num_classes,
        preset=preset,
        trials=trials,
        time_budget_s=parse_seconds(time_budget, "--time-budget") if time_budget else None,
        device=device,
        resume=resume,
        sram_budget_bytes=budget,
        flash_budget_bytes=parse_bytes(flash_budget, "--flash-budget") if flash_budget else None,
        latency_budget_s=(
            parse_seconds(latency_budget, "--latency-budget") if latency_budget else None
        ),
        seed=seed,
        sampler=sampler,
        proxy=proxy,
        proxy_eta=proxy_eta,
        max_proposals=proposals,
        finetune=FinetuneConfig(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed),
        hardware=HardwareConfig(precision=precision),
    )
    from tinytune.hwmodels.calibration import resolve_device

    resolve_device(device)  # an unknown device fails here, with the list of known ones
    if max_retries < 0:
        raise BudgetError(f"--max-retries must be >= 0, got {max_retries}")
    if ray_address is not None and not inline:
        from tinytune.search.executor import check_reachable

        check_reachable(ray_address)  # before any pre-training or database work
    store = open_store(storage)
    started = time.monotonic()
    executor = None
    try:
        profile, _ = resolve_device(device, store)
        check_budgets(config, profile)
        check_feasible(config, HardwareEvaluator(spec, config.n_classes, config.hardware, profile))
        checkpoint = ensure_checkpoint(spec, PretrainRecipe(steps=pretrain_steps), weights)
        config = dataclasses.replace(config, checkpoint=str(checkpoint))
        executor = (
            InlineExecutor(run_evaluation)
            if inline
            else RayExecutor(
                run_evaluation, workers=workers, address=ray_address, max_retries=max_retries
            )
        )
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} {task.fields[status]}"),
            TimeElapsedColumn(),
            console=console,
        ) as bar:
            tid = bar.add_task(f"searching {study}", total=trials, status="measured")
            best = [0.0]
            analysis: list = []

            def progress(event: dict) -> None:
                if event["event"] == "contributions":  # fine-tunes of the proxy's table
                    if not analysis:
                        analysis.append(
                            bar.add_task(
                                "contribution analysis",
                                total=event["total"],
                                status="fine-tunes (stored for later runs)",
                            )
                        )
                    bar.update(analysis[0], completed=event["done"])
                    return
                result = event.get("result") or {}
                if result.get("status") == "ok":
                    best[0] = max(best[0], result["accuracy"])
                scored = f", {event['proxy']} proxy-scored" if proxy else ""
                bar.update(
                    tid,
                    completed=event["before"] + event["measured"] + event["failed"],
                    status=(
                        f"measured{scored}, {event['pruned']} over budget, {event['failed']} "
                        f"failed, best {f'{100 * best[0]:.1f}%' if best[0] else '-'}"
                    ),
                )

            result = run_search(config, store, executor, progress=progress)
    finally:
        if executor is not None:
            executor.close()
        store.close()
    console.print(
        f"{result.measured} measured, {result.pruned} pruned as over budget, {result.failed} "
        f"failed, {result.reused} reused in {result.wall_time_s:.0f} s "
        f"({time.monotonic() - started:.0f} s with pre-training)"
    )
    if proxy:
        tau = (
            f"Kendall τ {result.proxy_tau:.2f} over {result.proxy_pairs} candidates measured too"
            if result.proxy_tau is not None
            else f"Kendall τ undefined ({result.proxy_pairs} candidates measured too)"
        )
        table = (
            f"{result.contribution_tasks} fine-tunes of the contribution analysis "
            f"({result.contribution_s:.0f} s, stored for later runs)"
            if result.contribution_tasks
            else "the stored contribution table reused"
        )
        console.print(
            f"proxy: {result.proxy_scored} candidates scored, {result.promoted} promoted; "
            f"{table}; {result.base_tasks} classifier-only fine-tunes of new sub-networks; "
            f"{tau}"
        )
    if not result.front:
        console.print("no measured candidate meets the budget yet")
        return
    hv = f", hypervolume {result.hypervolume:.4f}" if result.hypervolume is not None else ""
    console.print(
        front_table(
            result.front,
            f"Pareto front of study {study!r}: measured accuracy on held-out {data.name} vs "
            f"predicted peak training SRAM ({precision}, batch 1) and training-step latency "
            f"on {device}{hv}",
        )
    )
    console.print(f"storage: {storage} (optuna.load_study(study_name={study!r}, storage=...))")
