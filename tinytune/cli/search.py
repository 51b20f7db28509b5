"""``tinytune search``: run (or continue) a search and print its measured Pareto front."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tinytune.errors import CLI
from tinytune.options import SEARCH_OPTIONS

if TYPE_CHECKING:
    from tinytune.search import Late, SearchEvent, SearchResult, Sizing

__all__ = ["search"]


def search(**options: Any) -> None:
    """Search sub-networks × lite residuals × sparse update schemes; print the Pareto front
    of measured accuracy vs predicted training SRAM and training-step latency."""
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    import tinytune
    from tinytune.cli.common import console, pretrain_bar, quiet_logs
    from tinytune.spaces import default_network

    quiet_logs()
    started = time.monotonic()
    with (
        pretrain_bar(options["supernet"] or default_network(options["dataset"])) as on_pretrain,
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

        progress = _Bars(bar, options["study"], options["proxy"], options["halving"])
        result = tinytune.optimize(**options, progress=progress, on_pretrain=pretraining)
    _print_run(result, options, time.monotonic() - started, bool(pretrained))
    _print_fidelities(result, options)
    _print_front(result, options)


_SIDE_BARS = {
    "calibrating": ("learning rate per scheme family", "fine-tunes (chosen on validation)"),
    "contributions": ("contribution analysis", "fine-tunes (stored for later runs)"),
    "int8": ("device accuracy of the front", "points trained in int8 at batch 1"),
}
"""The bars of the fine-tunes that are not trials, by event kind: title, status."""


class _Bars:
    """The search's progress on the terminal: a bar of the budget's trials, a bar each of the
    other fine-tunes (:data:`_SIDE_BARS`) and of a first decoding of an image folder."""

    def __init__(self, bar: Any, study: str, proxy: bool, halving: bool) -> None:
        self.bar, self.study, self.proxy, self.halving = bar, study, proxy, halving
        self.trials: Any = None
        self.side: dict[str, Any] = {}
        self.best = 0.0

    def __call__(self, event: SearchEvent) -> None:
        from tinytune.cli.common import console

        bar = self.bar
        if event.kind == "decoded":  # an image folder decoded by an earlier run
            console.print(f"decoded images reused from {event.path}", soft_wrap=True)
            return
        if event.kind == "decoding":  # its first run: before the search's bar
            if "decoding" not in self.side:
                self.side["decoding"] = bar.add_task(
                    "decoding images", total=event.total, status=f"into {event.path}"
                )
            bar.update(self.side["decoding"], completed=event.done)
            return
        if event.kind == "late":  # left out for the default run's deadline
            if event.late is not None and event.late.opening:
                console.print(late_words(event.late), soft_wrap=True)
            return
        if self.trials is None:
            self.trials = bar.add_task(
                f"searching {self.study}", total=event.budget, status="of the budget measured"
            )
        if event.kind == "sized":  # the default budget, sized from the grid's fine-tunes
            bar.update(self.trials, total=event.budget)
            return
        if event.kind in _SIDE_BARS:  # the learning-rate grid, the proxy's table
            if event.kind not in self.side:
                title, status = _SIDE_BARS[event.kind]
                self.side[event.kind] = bar.add_task(title, total=event.total, status=status)
            bar.update(self.side[event.kind], completed=event.done)
            return
        if event.accuracy is not None:
            self.best = max(self.best, event.accuracy)
        bar.update(self.trials, completed=event.finished, status=self._status(event))

    def _status(self, event: SearchEvent) -> str:
        c = event.counts
        scored = (
            f", {c.proxy_scored} proxy-scored"
            if self.proxy
            else f", {c.screen_tasks} screened"
            if self.halving
            else ""
        )
        waiting = ", waiting on other drivers" if event.kind == "waiting" else ""
        best = f"{100 * self.best:.1f}% val" if self.best else "-"
        return (
            f"of the budget measured{scored}, {c.pruned} over budget, {c.failed} failed, "
            f"best {best} this run{waiting}"
        )


def _print_run(
    result: SearchResult, options: dict[str, Any], elapsed_s: float, pretrained: bool
) -> None:
    """What the run measured, how its budget was sized, and why it stopped."""
    from tinytune.cli.common import against_recipe, console
    from tinytune.cli.front_table import measured_words

    c = result.counts
    console.print(
        measured_words(c.measured, c.twins)
        + (" (twins: the same fine-tunes at other patch counts)" if c.twins else "")
        + f" in this run, {c.pruned} pruned as over budget, {c.failed} failed, "
        f"{c.reused} reused in {result.wall_time_s:.0f} s "
        f"({elapsed_s:.0f} s in all"
        f"{', pre-training included' if pretrained else ''})"
        + (f"; {c.retried} trials of stopped drivers retried" if c.retried else "")
    )
    bought = [
        _count(n, noun) + rest
        for n, noun, rest in (
            (c.presets, "baseline preset", " on the default sub-network"),
            (c.mutants, "mutant", " of front points"),
            (c.sampled, "proposal", f" of the {options['sampler']} sampler"),
        )
        if n
    ]
    if bought:
        console.print("the measured fine-tunes: " + ", ".join(bought), soft_wrap=True)
    if result.sizing is not None:
        console.print(sized(result.sizing), soft_wrap=True)
    against = against_recipe(result.front, result.recipe)
    if against:
        console.print(against, soft_wrap=True)
    if result.stopped_by is not None:
        console.print(
            _stopped(
                result,
                result.trials,
                options["time_budget"],
                options["epoch_budget"],
                options["proposals"],
            ),
            soft_wrap=True,
        )


def _print_fidelities(result: SearchResult, options: dict[str, Any]) -> None:
    """The low fidelities, the compute, the data's notes, the rates and the device accuracy."""
    from tinytune.cli.common import console
    from tinytune.search.run import INT8_EPOCHS

    _print_low_fidelities(result, options)
    console.print(
        f"compute: {result.train_epochs:.1f} fine-tuning epochs (passes over the training "
        f"split; a measured fine-tune is {options['epochs']}), {result.task_time_s:.0f} s of "
        "workers' time"
    )
    if result.devices:
        console.print(_devices(result.devices, options["gpus_per_trial"]), soft_wrap=True)
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
        subset = result.lr_calibration.train_fraction
        cost = (
            f"{result.lr_fine_tunes} fine-tunes"
            + (f" on {100 * subset:.0f} % of the training images" if subset < 1.0 else "")
            + f", {result.lr_s:.0f} s of workers' time"
            if result.lr_fine_tunes
            else "chosen by an earlier run"
        )
        rates = ", ".join(
            f"{r.family} {r.lr:g}"
            + (f" ({100 * r.val_accuracy:.1f}% val)" if r.val_accuracy is not None else "")
            for r in result.lr_calibration.rates
        )
        console.print(f"learning rate per scheme family, chosen on validation ({cost}): {rates}")
    if options["verify_int8"]:
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
    if result.chance is not None:
        console.print(
            f"note: every candidate is at chance ({100 * result.chance:.1f} % for "
            f"{round(1 / result.chance)} classes, within the noise of {result.val_images} "
            "validation images): the network learned nothing, so this front means nothing; "
            "check that the weights fit the network (--weights: another network's checkpoint, "
            "or BatchNorm statistics that do not fit its layers)",
            soft_wrap=True,
        )


def _print_low_fidelities(result: SearchResult, options: dict[str, Any]) -> None:
    """The proxy's or the successive halving's line, where the run used one."""
    from tinytune.cli.common import console

    c, proxy, halving = result.counts, options["proxy"], options["halving"]
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
            f"successive halving: {c.screen_tasks} short fine-tunes ({options['screen_epochs']} "
            f"epochs on {options['screen_fraction']:g} of the training images), "
            f"{_count(c.proxy_scored, 'candidate')} screened in this run, {c.promoted} "
            f"promoted; short vs measured validation accuracy in the study: {tau}"
        )


def _print_front(result: SearchResult, options: dict[str, Any]) -> None:
    """The front's table and where the study is stored."""
    from tinytune.cli.common import console
    from tinytune.cli.front_table import ROWS, augmented_words, front_table, schedules_of
    from tinytune.data.audio import AUDIO_PREFIX
    from tinytune.db.engine import mask_url
    from tinytune.search.front import HYPERVOLUME_BOX

    study, dataset = options["study"], options["dataset"]
    if not result.front:
        console.print("no measured candidate meets the budget yet")
        return
    hv = f", hypervolume {result.hypervolume:.4f}" if result.hypervolume is not None else ""
    keys = [p.candidate_key for p in result.front]
    if result.reference is not None:
        keys.append(result.reference.candidate_key)
    console.print(
        front_table(
            result.front,
            f"Pareto front of study {study!r}: measured accuracy on {dataset} (chosen on the "
            f"validation split, test split reported) vs predicted training SRAM (arena, "
            f"static data and stack; {options['precision']}, batch 1) and training-step "
            f"latency on {result.latency_profile or options['device']}"
            + (
                " (each with the keyword front-end's static SRAM and time for a clip)"
                if dataset.startswith(AUDIO_PREFIX)
                else ""
            )
            + augmented_words(options["augment"])
            + hv,
            result.reference,
            result.int8,
            schedules=schedules_of(options["storage"], keys),
            width=console.width,
            caption=(
                f"{ROWS}; tinytune pareto --wide: a row each"
                + (f". {HYPERVOLUME_BOX}" if result.hypervolume is not None else "")
            ),
        )
    )
    console.print(
        f"storage: {mask_url(options['storage'])} (optuna.load_study(study_name={study!r}, "
        "storage=...))"
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


def sized(sizing: Sizing) -> str:
    """What the default budget of measured fine-tunes holds and why, in one line."""
    from tinytune.search import DEFAULT_TRIALS

    minutes = f"{sizing.time_s / 60:g} min"
    workers = _count(sizing.slots, "worker")
    fit = (
        f"{_count(sizing.fit, 'fine-tune')} of about {sizing.each_s:.0f} s fit in {minutes} on "
        f"{workers}"
        + (f" beside the reference's {sizing.reference_s:.0f} s" if sizing.reference_s else "")
    )
    if sizing.trials >= DEFAULT_TRIALS and sizing.fit >= sizing.trials:
        why = f"the most by default ({fit})"
    elif sizing.trials > sizing.fit:
        why = f"never fewer than the {sizing.least} it measures first ({fit})"
    else:
        why = f"as many as fit: {fit}"
    return (
        f"the study's budget: {_count(sizing.trials, 'measured fine-tune')}, {why}, sized from "
        "the learning-rate grid's fine-tunes and kept with the study; --trials N sets it"
    )


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def late_words(late: Late) -> str:
    """One line on a fine-tune the study measures first (the reference, a baseline preset)
    that the default run left out: predicted to end after its minutes."""
    from tinytune.search import DEFAULT_SEARCH_S

    what = (
        "the reference (full fine-tuning)"
        if late.scheme.startswith("full (reference)")
        else f"the {late.scheme} preset"
    )
    return (
        f"not measured: {what}, about {_minutes(late.seconds)}, would end after the run's "
        f"{DEFAULT_SEARCH_S / 60:g} minutes; --time-budget or --trials measures it whatever the "
        "time"
    )


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
    if result.stopped_by == "screening":
        return (
            f"the run stopped after a long row of short fine-tunes (--halving) that all failed, "
            f"{done}; the warning above names the last error"
        )
    if result.stopped_by == "late":
        from tinytune.search import DEFAULT_SEARCH_S

        last = result.late[-1].seconds if result.late else 0.0
        return (
            f"the run stopped at its {DEFAULT_SEARCH_S / 60:g} minutes: its next fine-tune, "
            f"about {_minutes(last)}, would have ended after them, {done}; --time-budget or "
            "--trials lets it measure more, and the same command goes on with the study"
        )
    if result.stopped_by == "time":
        limit = f"--time-budget {time_budget}"
    elif result.stopped_by == "epochs":
        limit = f"--epoch-budget {epoch_budget:g}"
    else:
        limit = f"--proposals {proposals}"
    return f"the run stopped at {limit}, {done}; the same command goes on with the study"


def _option(o: Any) -> Any:
    """The typer option of ``o``: a switch off by default is its flag alone (no ``--no-`` twin
    to widen the help's column of names)."""
    help_text = o.help_text(CLI)
    if o.kind.cli_type is bool and o.default is False:
        return typer.Option(o.flag, help=help_text, show_default=False)
    return typer.Option(help=help_text)


def _signature() -> inspect.Signature:
    """The options of :data:`tinytune.options.SEARCH_OPTIONS` as typer reads a command's
    parameters: each with its flag's type, its help (options named as flags) and its default."""
    return inspect.Signature(
        [
            inspect.Parameter(
                o.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=o.default,
                annotation=Annotated[o.kind.cli_type, _option(o)],
            )
            for o in SEARCH_OPTIONS
        ],
        return_annotation=None,
    )


search.__signature__ = _signature()  # type: ignore[attr-defined]
