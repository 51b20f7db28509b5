"""``tinytune search``: run (or continue) a search and print its measured Pareto front."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tinytune.api import DEFAULT_SAMPLER
from tinytune.cli.common import DEFAULT_STORAGE

if TYPE_CHECKING:
    from tinytune.search import SearchResult

__all__ = ["search"]


def search(
    study: Annotated[str, typer.Option(help="Study name (continued if it exists).")] = "tinytune",
    storage: Annotated[
        str, typer.Option(help="SQLAlchemy URL of the database (SQLite or PostgreSQL).")
    ] = DEFAULT_STORAGE,
    supernet: Annotated[
        str | None,
        typer.Option(
            help="efficientnet-lite0 (ImageNet weights), ofa-proxyless-w<width>, "
            "ofa-mbv3-w<width> or a published OFA id; default: efficientnet-lite0 for "
            "imagefolder:PATH, ofa-proxyless-w0.35 for the built-in data sets."
        ),
    ] = None,
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
    ] = 12,
    resume: Annotated[
        bool,
        typer.Option(help="Continue an existing study (after a crash) up to its --trials."),
    ] = False,
    time_budget: Annotated[
        str | None, typer.Option(help="Budget: stop proposing after this long (e.g. 300s, 5m).")
    ] = None,
    epoch_budget: Annotated[
        float | None,
        typer.Option(
            help="Budget: fine-tuning epochs of this run, every fine-tune counted (passes over "
            "the training split; a measured fine-tune is --epochs)."
        ),
    ] = None,
    device: Annotated[
        str,
        typer.Option(
            help="Target device (see 'tinytune devices'): its latency profile and limits."
        ),
    ] = "stm32f746",
    engine: Annotated[
        str | None,
        typer.Option(
            help="What the latency objective predicts: bundle (the exported C kernels), "
            "published (a typical int8 inference engine) or pytorch; default: bundle where "
            "the device has a profile of it."
        ),
    ] = None,
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
    workers: Annotated[
        int | None, typer.Option(help="Parallel evaluations (Ray tasks); default 2.")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Address of an existing Ray cluster (default: local).")
    ] = None,
    inline: Annotated[
        bool, typer.Option(help="Evaluate in this process instead of Ray workers.")
    ] = False,
    max_retries: Annotated[
        int, typer.Option(help="Retries of an evaluation whose Ray worker died.")
    ] = 2,
    gpus_per_trial: Annotated[
        float,
        typer.Option(
            help="Share of a GPU each fine-tune's Ray task asks for (e.g. 0.25: four share a "
            "device; above 1 a whole number); 0: CPUs. The int8 training of --verify-int8 "
            "stays on CPUs."
        ),
    ] = 0.0,
    weights: Annotated[
        Path | None,
        typer.Option(
            help="Weights file: a published OFA checkpoint, or the weights of a --supernet "
            "PATH.json config (efficientnet-lite0's come with the package)."
        ),
    ] = None,
    epochs: Annotated[int, typer.Option(help="Fine-tuning epochs per candidate.")] = 8,
    lr: Annotated[
        float | None,
        typer.Option(
            help="Fine-tuning learning rate (SGD) of every candidate; default: chosen per scheme "
            "family on the validation split before the first measurement."
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Fine-tuning batch size.")] = 32,
    pretrain_steps: Annotated[
        int | None,
        typer.Option(
            help="Pre-train by the quick recipe with this many sandwich-rule steps (into the "
            "cache) instead of using the shipped checkpoint; without a shipped checkpoint the "
            "quick recipe's 300."
        ),
    ] = None,
    repeats: Annotated[
        int | None,
        typer.Option(
            help="Measure each candidate on this many train/validation partitions (default: 1, "
            "or up to 5 where the validation split has under 100 images)."
        ),
    ] = None,
    verify_int8: Annotated[
        bool,
        typer.Option(
            help="At the end, train each front point as the device does (int8, batch 1, QAS, "
            "the bundle's integer step) and show the accuracy it reaches (minutes a point)."
        ),
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the sampler and of fine-tuning.")] = 0,
    sampler: Annotated[
        str,
        typer.Option(
            help="Optuna sampler: tpe, tpe-early (models from the 5th trial on), gp (Gaussian "
            "process, from the 5th trial on), random or nsga2."
        ),
    ] = DEFAULT_SAMPLER,
    proxy: Annotated[
        bool,
        typer.Option(
            help="Fidelity ladder: score many candidates by the additive proxy (a contribution "
            "analysis, stored and reused) and fine-tune only the promising ones."
        ),
    ] = False,
    proxy_eta: Annotated[
        int,
        typer.Option(
            help="With --proxy or --halving: candidates scored at the low fidelity per "
            "measured one."
        ),
    ] = 4,
    halving: Annotated[
        bool,
        typer.Option(
            help="Fidelity ladder by successive halving: screen candidates by short "
            "fine-tunes (--screen-epochs on --screen-fraction of the training images) and "
            "fine-tune in full only the most promising of each bracket."
        ),
    ] = False,
    screen_epochs: Annotated[
        int, typer.Option(help="With --halving: epochs of a screening fine-tune.")
    ] = 2,
    screen_fraction: Annotated[
        float,
        typer.Option(help="With --halving: share of the training images a screening sees."),
    ] = 0.5,
    mutate: Annotated[
        bool,
        typer.Option(
            help="Every other fresh proposal a mutant of a front point (its update scheme and "
            "sub-network one or two steps away) or a baseline over the SRAM budget shrunk "
            "into it; the others the sampler's."
        ),
    ] = False,
    proposals: Annotated[
        int | None, typer.Option(help="Budget: trials proposed in this run (any fidelity).")
    ] = None,
) -> None:
    """Search sub-networks × lite residuals × sparse update schemes; print the Pareto front
    of measured accuracy vs predicted peak training SRAM and training-step latency."""
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    import tinytune
    from tinytune.cli.common import console, front_table, pretrain_bar, quiet_logs
    from tinytune.db.engine import mask_url
    from tinytune.search import SearchEvent
    from tinytune.search.ladder import HYPERVOLUME_BOX
    from tinytune.search.verify import INT8_EPOCHS
    from tinytune.spaces import default_network

    quiet_logs()
    started = time.monotonic()
    with (
        pretrain_bar(supernet or default_network(dataset)) as on_pretrain,
        Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} {task.fields[status]}", markup=False),
            TimeElapsedColumn(),
            console=console,
        ) as bar,
    ):
        pretrained: list[bool] = []

        def pretraining(step: int, steps: int, loss: float) -> None:
            pretrained[:] = [True]
            on_pretrain(step, steps, loss)

        tid: list = []
        side: dict = {}  # bars of the fine-tunes that are not trials, by event kind
        side_bars = {
            "calibrating": (
                "learning rate per scheme family",
                "fine-tunes (chosen on validation)",
            ),
            "contributions": ("contribution analysis", "fine-tunes (stored for later runs)"),
            "int8": ("device accuracy of the front", "points trained in int8 at batch 1"),
        }
        best = [0.0]

        def progress(event: SearchEvent) -> None:
            if event.kind == "decoded":  # an image folder decoded by an earlier run
                console.print(f"decoded images reused from {event.path}", soft_wrap=True)
                return
            if event.kind == "decoding":  # its first run: before the search's bar
                if "decoding" not in side:
                    side["decoding"] = bar.add_task(
                        "decoding images", total=event.total, status=f"into {event.path}"
                    )
                bar.update(side["decoding"], completed=event.done)
                return
            if not tid:
                tid.append(bar.add_task(f"searching {study}", total=trials, status="measured"))
            if event.kind in side_bars:  # the learning-rate grid, the proxy's table
                if event.kind not in side:
                    title, status = side_bars[event.kind]
                    side[event.kind] = bar.add_task(title, total=event.total, status=status)
                bar.update(side[event.kind], completed=event.done)
                return
            if event.accuracy is not None:
                best[0] = max(best[0], event.accuracy)
            c = event.counts
            scored = (
                f", {c.proxy_scored} proxy-scored"
                if proxy
                else f", {c.screen_tasks} screened"
                if halving
                else ""
            )
            waiting = ", waiting on other drivers" if event.kind == "waiting" else ""
            bar.update(
                tid[0],
                completed=event.finished,
                status=(
                    f"measured{scored}, {c.pruned} over budget, {c.failed} failed, best "
                    f"{f'{100 * best[0]:.1f}% val' if best[0] else '-'} this run{waiting}"
                ),
            )

        result = tinytune.optimize(
            dataset,
            trials=trials,
            device=device,
            engine=engine,
            sram_budget=sram_budget,
            flash_budget=flash_budget,
            latency_budget=latency_budget,
            time_budget=time_budget,
            epoch_budget=epoch_budget,
            study=study,
            storage=storage,
            supernet=supernet,
            weights=weights,
            preset=preset,
            precision=precision,
            sampler=sampler,
            seed=seed,
            epochs=epochs,
            lr=lr,
            batch_size=batch_size,
            workers=workers,
            inline=inline,
            ray_address=ray_address,
            max_retries=max_retries,
            gpus_per_trial=gpus_per_trial,
            proposals=proposals,
            proxy=proxy,
            proxy_eta=proxy_eta,
            halving=halving,
            screen_epochs=screen_epochs,
            screen_fraction=screen_fraction,
            mutate=mutate,
            resume=resume,
            pretrain_steps=pretrain_steps,
            repeats=repeats,
            verify_int8=verify_int8,
            progress=progress,
            on_pretrain=pretraining,
        )
    c = result.counts
    console.print(
        f"{c.measured} measured, {c.pruned} pruned as over budget, {c.failed} failed, "
        f"{c.reused} reused in {result.wall_time_s:.0f} s "
        f"({time.monotonic() - started:.0f} s in all"
        f"{', pre-training included' if pretrained else ''})"
        + (f"; {c.retried} trials of stopped drivers retried" if c.retried else "")
    )
    if result.stopped_by is not None:
        console.print(
            _stopped(result, trials, time_budget, epoch_budget, proposals), soft_wrap=True
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
            f"proxy: {_count(c.proxy_scored, 'candidate')} scored in this run, {c.promoted} "
            "promoted; "
            f"{table}; {c.base_tasks} classifier-only fine-tunes of new sub-networks; "
            f"in the study: {tau}"
        )
    if halving:
        tau = (
            f"Kendall τ {result.proxy_tau:.2f} over {result.proxy_pairs} candidates measured too"
            if result.proxy_tau is not None
            else f"Kendall τ undefined ({result.proxy_pairs} candidates measured too)"
        )
        console.print(
            f"successive halving: {c.screen_tasks} short fine-tunes ({screen_epochs} epochs on "
            f"{screen_fraction:g} of the training images), {_count(c.proxy_scored, 'candidate')} "
            f"screened in this run, {c.promoted} promoted; short vs measured validation accuracy "
            f"in the study: {tau}"
        )
    console.print(
        f"compute: {result.train_epochs:.1f} fine-tuning epochs (passes over the training "
        f"split; a measured fine-tune is {epochs}), {result.task_time_s:.0f} s of workers' time"
    )
    if result.devices:
        console.print(_devices(result.devices, gpus_per_trial), soft_wrap=True)
    if result.copies:
        console.print(
            f"the image folder holds {result.copies} cop{'y' if result.copies == 1 else 'ies'} "
            "of other images (the same bytes), left out so that no image is both trained and "
            "tested on"
        )
    if result.repeats > 1:
        console.print(
            f"the validation split has {result.val_images} images, too few to rank candidates: "
            f"every accuracy is the mean over {result.repeats} train/validation partitions "
            "(stratified, the test split fixed)"
        )
    if result.lr_calibration is not None:
        cost = (
            f"{result.lr_fine_tunes} fine-tunes, {result.lr_s:.0f} s of workers' time"
            if result.lr_fine_tunes
            else "chosen by an earlier run"
        )
        rates = ", ".join(
            f"{r.family} {r.lr:g}"
            + (f" ({100 * r.val_accuracy:.1f}% val)" if r.val_accuracy is not None else "")
            for r in result.lr_calibration.rates
        )
        console.print(f"learning rate per scheme family, chosen on validation ({cost}): {rates}")
    if verify_int8:
        console.print(
            f"device accuracy (int8, batch 1, QAS, {INT8_EPOCHS} epochs, the rate halved after "
            f"each, its start per point chosen on validation): {result.int8_runs} front points "
            f"trained here, "
            f"{result.int8_epochs:g} epochs (every rate tried), {result.int8_s:.0f} s of "
            f"workers' time; {len(result.int8)} of the "
            f"{len(result.front)} points have one"
        )
    for error in result.errors:
        console.print(f"failed evaluation: {error}", soft_wrap=True)
    if not result.front:
        console.print("no measured candidate meets the budget yet")
        return
    hv = f", hypervolume {result.hypervolume:.4f}" if result.hypervolume is not None else ""
    console.print(
        front_table(
            result.front,
            f"Pareto front of study {study!r}: measured accuracy on {dataset} (chosen on the "
            f"validation split, test split reported) vs predicted peak training SRAM "
            f"({precision}, batch 1) and training-step latency on "
            f"{result.latency_profile or device}{hv}",
            result.reference,
            result.int8,
            caption=HYPERVOLUME_BOX if result.hypervolume is not None else None,
        )
    )
    console.print(
        f"storage: {mask_url(storage)} (optuna.load_study(study_name={study!r}, storage=...))"
    )


def _devices(devices: dict[str, int], gpus_per_trial: float) -> str:
    """Which devices the workers trained on, and why not a GPU where one was asked for."""
    where = ", ".join(f"{d} ({_count(n, 'task')})" for d, n in sorted(devices.items()))
    line = f"workers trained on: {where}"
    if gpus_per_trial and all(d == "cpu" for d in devices):
        line += (
            f"; --gpus-per-trial {gpus_per_trial:g} reserved GPUs, but no worker saw one "
            "through CUDA, so they fine-tuned on CPUs"
        )
    return line


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _stopped(
    result: SearchResult,
    trials: int,
    time_budget: str | None,
    epoch_budget: float | None,
    proposals: int | None,
) -> str:
    """Which of the run's limits ended it before the study's budget was spent, and what to do."""
    done = (
        f"with {result.finished} of the study's {trials} measured fine-tunes done (the reference "
        "not counted)"
    )
    if result.stopped_by == "idle":
        return (
            f"the run stopped after a long row of proposals over the budgets or already "
            f"measured, {done}; a looser SRAM, flash or latency budget may let it go on"
        )
    if result.stopped_by == "time":
        limit = f"--time-budget {time_budget}"
    elif result.stopped_by == "epochs":
        limit = f"--epoch-budget {epoch_budget:g}"
    else:
        limit = f"--proposals {proposals}"
    return f"the run stopped at {limit}, {done}; the same command goes on with the study"
