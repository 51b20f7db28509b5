"""``tinytune export``: write a device bundle of a trial's (or a stored candidate's) training
step — int8 C with one static arena, an example, a Makefile, a manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tinytune.cli.common import DEFAULT_STORAGE
from tinytune.errors import StorageError
from tinytune.exporting import DEFAULT_DEVICE_LR
from tinytune.options import DEFAULT_DEVICE

__all__ = ["export"]


_Out = Annotated[
    Path,
    typer.Option("--out", "-o", help="Bundle folder to write (an existing one must be a bundle)."),
]
_Target = Annotated[
    str | None,
    typer.Argument(
        help="A trial number of the study, or a candidate key (or prefix); as --trial N "
        "or --candidate KEY.",
    ),
]
_Trial = Annotated[int | None, typer.Option(help="Trial number in the study.")]
_Candidate = Annotated[str | None, typer.Option(help="Stored candidate key (or a unique prefix).")]
_Study = Annotated[str | None, typer.Option(help="Study of the trial (default: the only study).")]
_Device = Annotated[
    str | None,
    typer.Option(help=f"Target device (default: the study's, else {DEFAULT_DEVICE})."),
]
_Storage = Annotated[str, typer.Option(help="SQLAlchemy URL of the database.")]
_Weights = Annotated[
    Path | None,
    typer.Option(help="Supernet weights (default: the study's, else the cached ones)."),
]
_Samples = Annotated[
    int, typer.Option(help="Training samples embedded in the example (and test samples).")
]
_Epochs = Annotated[int, typer.Option(help="Epochs the example trains.")]
_Lr = Annotated[
    float | None,
    typer.Option(
        help="On-device learning rate of the first epoch (SGD, batch 1, QAS); default: the "
        f"rate the device's accuracy was measured at, else {DEFAULT_DEVICE_LR:g}."
    ),
]
_LrSchedule = Annotated[
    str | None,
    typer.Option(
        help="How the example's rate moves: 'halving' (halved after every epoch) or "
        "'constant'; default: as the device's accuracy was measured, else halving."
    ),
]
_Seed = Annotated[int, typer.Option(help="Seed of the new classifier.")]
_MeasureInt8 = Annotated[
    bool,
    typer.Option(
        "--measure-int8/--no-measure-int8",
        help="Measure the accuracy the device's training reaches (int8, batch 1, QAS, the "
        "whole training split; minutes) when the study has none stored, and record it.",
    ),
]
_Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Replace (or remove, where the new bundle has none) the files of an existing "
        "bundle folder that were changed since it was written, and files of yours at paths "
        "the bundle writes (your other files are kept).",
    ),
]


def export(
    out: _Out,
    target: _Target = None,
    trial: _Trial = None,
    candidate: _Candidate = None,
    study: _Study = None,
    device: _Device = None,
    storage: _Storage = DEFAULT_STORAGE,
    weights: _Weights = None,
    samples: _Samples = 32,
    epochs: _Epochs = 3,
    lr: _Lr = None,
    lr_schedule: _LrSchedule = None,
    seed: _Seed = 0,
    measure_int8: _MeasureInt8 = True,
    force: _Force = False,
) -> None:
    """Export a candidate's on-device training step as a C bundle: int8 weights, the sparse
    update as straight-line C over the memory planner's static arena, an example (a smoke test
    on a few samples of the study's data set), a Makefile, CMake, Zephyr and Arduino layouts
    and a manifest.

    The Makefile runs the example with run-host, run-host-asan, run-aarch64, run-cortex-m7,
    run-cortex-m4, run-cortex-m0plus and run-rv32imc (natively, or under QEMU for the Cortex-M7,
    Cortex-M4F, Cortex-M0+ and RV32IMC), builds the step's profiler with profile-host,
    profile-aarch64, profile-cortex-m7, profile-cortex-m4, profile-cortex-m0plus and
    profile-rv32imc, and runs it with run-profile-host, run-profile-aarch64,
    run-profile-cortex-m7, run-profile-cortex-m4, run-profile-cortex-m0plus and
    run-profile-rv32imc (a measurement file for tinytune calibrate). The CMake project
    (CMakeLists.txt, toolchain files for arm-none-eabi and riscv32), the Zephyr module
    (zephyr/module.yml) and the Arduino library (library.properties, src/, examples/train)
    build the same sources."""
    import tinytune
    from tinytune.cli.common import console, measure_bar, pretrain_bar, quiet_logs

    quiet_logs()
    chosen = _target(target, trial, candidate)
    with (
        pretrain_bar("the default supernet") as on_pretrain,
        measure_bar("int8 training at batch 1") as on_measure_progress,
    ):
        done = tinytune.export_bundle(
            chosen,
            out,
            study=study,
            storage=storage,
            device=device,
            weights=weights,
            samples=samples,
            epochs=epochs,
            lr=lr,
            lr_schedule=lr_schedule,
            seed=seed,
            measure_int8=measure_int8,
            force=force,
            on_pretrain=on_pretrain,
            on_measure=lambda: console.print(
                "measuring the accuracy the device's training reaches (int8, batch 1, QAS, the "
                "whole training split; minutes; --no-measure-int8 skips it)",
                soft_wrap=True,
            ),
            on_measure_progress=on_measure_progress,
        )
    _print_exported(done, samples, lr)


def _target(target: str | None, trial: int | None, candidate: str | None) -> int | str:
    """What to export, named once: a TARGET (a trial number or a candidate key), ``--trial``
    or ``--candidate``."""
    from tinytune.cli.common import trial_or_key

    named = [t for t in (target, trial, candidate) if t is not None]
    if len(named) > 1:
        raise StorageError(
            "name what to export once: a TARGET (a trial number or candidate key), --trial N "
            "or --candidate KEY"
        )
    if not named:
        raise StorageError(
            "name what to export: a trial number or candidate key (tinytune export 3 -o DIR), "
            "or --trial N (of --study S) or --candidate KEY"
        )
    return trial_or_key(target) if target is not None else named[0]


def _print_exported(done: Any, samples: int, lr: float | None) -> None:
    """What was written: the bundle's arena, flash and step, the example, and the notes."""
    from tinytune.cli.common import console, size_text
    from tinytune.units import format_bytes

    m = done.manifest
    latency = m["predicted_latency"]["train_step_s"]
    console.print(
        f"wrote {done.path}: candidate {m['candidate_key'][:12]}, SRAM {_sram(m['memory'])} of "
        f"{size_text(m['device']['sram_bytes'])} on {m['device']['name']}, flash "
        f"{_flash(m['memory'])}"
        + (
            f", predicted step {1000 * latency:.1f} ms ({m['predicted_latency']['engine']} engine)"
            if latency is not None
            else ""
        )
        + f"; try: {_try_line(done.path, m['device'].get('core', ''))}",
        soft_wrap=True,
    )
    frontend = (m.get("input") or {}).get("frontend")
    if frontend is not None and "scratch_bytes" in frontend:  # an audio model's front-end
        clip_s = m["predicted_latency"].get("frontend_s")
        console.print(
            f"input: {frontend['function']}() makes it of {frontend['clip_samples']} samples at "
            f"{frontend['sample_rate']} Hz ({frontend['frames']} frames of "
            f"{frontend['bands']} bands), with {format_bytes(frontend['scratch_bytes'])} of "
            f"static SRAM beside the arena and {format_bytes(frontend['tables_bytes'])} of "
            "tables in flash"
            + (f", {1000 * clip_s:.1f} ms a clip predicted" if clip_s is not None else "")
            + " (the front's figures count them)",
            soft_wrap=True,
        )
    elif frontend is not None:
        console.print(
            f"input: {frontend['function']}() makes it of a window's float64 values",
            soft_wrap=True,
        )
    data = m["dataset"]
    data_bytes = m["example"]["flash_bytes"]
    capped = (
        f" (--samples {samples} is more than the training split's {data['train_samples']})"
        if data["train_samples"] < samples
        else ""
    )
    console.print(
        f"example: {data['train_samples']} training and {data['eval_samples']} test samples, "
        f"{format_bytes(data_bytes)} more flash for them{capped}",
        soft_wrap=True,
    )
    example = m.get("example")
    if example is not None:
        console.print(_example_line(example), soft_wrap=True)
    blob = (m.get("params_blob") or {}).get("bytes")
    sram = m["memory"].get("sram_bytes", m["memory"]["arena_bytes"])  # an older manifest's
    beside = "arena, static data and stack" if "stack_bytes" in m["memory"] else "arena"
    if blob is not None and sram + blob > m["device"]["sram_bytes"]:
        console.print(
            f"note: the example keeps the saved parameters ({size_text(blob)}) in RAM beside the "
            f"{beside}, more than the {size_text(m['device']['sram_bytes'])} of SRAM of "
            f"{m['device']['name']} together: on the board, save them to flash instead "
            "(tt_params_save into a flash page)",
            soft_wrap=True,
        )
    _notes(m, data_bytes, lr)


def _sram(memory: dict[str, Any]) -> str:
    """The bundle's SRAM in all, and its parts: "62.1 KB (arena 55.6, static 0.1, stack 5.5)"."""
    if "stack_bytes" not in memory:  # a manifest of before the stack was counted
        return f"{memory['arena_bytes'] / 1024:.1f} KB (arena)"
    parts = ("arena", "static", "stack")
    sizes = [memory[f"{p}_bytes"] / 1024 for p in parts]
    inside = ", ".join(f"{p} {v:.1f}" for p, v in zip(parts, sizes, strict=True))
    return f"{memory['sram_bytes'] / 1024:.1f} KB ({inside})"


def _notes(m: dict[str, Any], data_bytes: int, lr: float | None) -> None:
    """The notes under an export: what does not fit the device, and how the rate was set."""
    from tinytune.cli.common import console, size_text

    flash = m["device"]["flash_bytes"]
    if m["memory"]["model_flash_bytes"] + data_bytes > flash:
        console.print(
            f"note: the model's constants and the example's samples take "
            f"{size_text(m['memory']['model_flash_bytes'] + data_bytes)}, more than the "
            f"{size_text(flash)} of flash of {m['device']['name']}: pass fewer --samples to "
            "flash the example there (host builds are not limited)",
            soft_wrap=True,
        )
    if m.get("trial") is not None and m.get("measured") is None:
        console.print(
            f"note: trial {m['trial']} has no measured accuracy (it was not fine-tuned to the "
            "end: it failed, was screened out, or is still running); the bundle trains its "
            "candidate all the same",
            soft_wrap=True,
        )
    augment = (m.get("measured") or {}).get("augment")
    if augment not in (None, "none"):
        console.print(
            f"note: the front's accuracy comes from fine-tunes on augmented images (--augment "
            f"{augment}); the bundle trains on its samples as given, so the device's may be "
            "lower (the int8 accuracy is measured as the bundle trains, without augmentation)",
            soft_wrap=True,
        )
    searched = m["memory"].get("search_memory_bytes")
    if searched is not None and searched != m["memory"].get(
        "sram_bytes", m["memory"]["arena_bytes"]
    ):
        console.print(
            f"note: the study planned this candidate at {searched / 1024:.1f} KB of SRAM (another "
            "precision or planner than the bundle's); the bundle trains in int8 in the arena "
            "above, and its latency and accuracy are those of int8 too",
            soft_wrap=True,
        )
    device = m.get("measured_int8")
    if device is None and lr is None:
        console.print(
            f"note: no device accuracy was measured, so the example trains at "
            f"{m['training']['lr']:g}, the smallest rate --verify-int8 tries (no network "
            "measured diverges at it; a larger one may train faster): leave out "
            "--no-measure-int8 to choose the rate on validation",
            soft_wrap=True,
        )
    elif device is not None:
        console.print(
            f"accuracy trained as the bundle trains (int8, batch 1, QAS; {device['source']}): "
            f"{100 * device['val_accuracy']:.1f} % validation, {100 * device['accuracy']:.1f} % "
            "test",
            soft_wrap=True,
        )


def _flash(memory: dict[str, Any]) -> str:
    """The bundle's flash in the words every command uses: the model's constants, and the
    search's figure (the constants and its estimate of the kernels' code) beside them."""
    from tinytune.units import format_bytes

    shown = f"{format_bytes(memory['model_flash_bytes'])} of model constants (TT_FLASH_BYTES)"
    predicted = memory.get("planner_flash_bytes")
    if predicted:
        shown += (
            f", {format_bytes(predicted)} with the kernels' code as the search estimated it "
            "(pareto --wide's flash)"
        )
    return shown


def _example_line(example: dict[str, Any]) -> str:
    """What the bundle's example shows: a smoke test, and the counts the simulator expects."""
    counts = example.get("expected_correct")
    epochs = example["epochs"]
    shown = (
        f"make run-host is a smoke test of {example['train_samples']} training samples over "
        f"{epochs} epoch{'s' * (epochs != 1)}, not the search's accuracy: "
    )
    if counts:
        return shown + (
            f"it should print {counts[-1]}/{example['eval_samples']} test samples right at the "
            "end, as tinytune's integer simulator computed, then save, reset and restore the "
            "parameters"
        )
    return shown + (
        f"it prints its accuracy on {example['eval_samples']} test samples (too many steps to "
        "simulate at export), then saves, resets and restores the parameters"
    )


def _try_line(path: object, core: str) -> str:
    """The make commands that run a bundle's example: natively, then on the device's core under
    emulation where the Makefile has a target for it."""
    from tinytune.bundle.manifest import emulated_target

    target = emulated_target(core)
    host = f"make -C {path} run-host (run-profile-host: measure the step)"
    if target is None:
        return host
    measure = "time" if target == "aarch64" else "instructions"
    return (
        f"make -C {path} run-host, then run-{target} (the example on the {core} under "
        f"emulation; run-profile-{target}: its step's {measure})"
    )
