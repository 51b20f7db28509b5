"""``tinytune pretrain``: pre-train a supernet by a named recipe and cache (or write) it; or,
with ``--network``, train a small built-in network on a folder of audio clips or sensor windows
and write it as a file that ``tinytune search --supernet`` takes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tinytune.builtin_networks import EPOCHS
from tinytune.spaces import DEFAULT_SUPERNET

if TYPE_CHECKING:
    from tinytune.models.supernet.recipes import PretrainRecipe
    from tinytune.spaces import SupernetSpec

__all__ = ["pretrain"]


_Supernet = Annotated[str, typer.Option(help="ofa-proxyless-w<width> or ofa-mbv3-w<width>.")]
_Recipe = Annotated[
    str,
    typer.Option(
        help="Named recipe: quick, formula-cpu, glyphs-gpu (the shipped one) or glyphs-gpu-xl."
    ),
]
_Steps = Annotated[int | None, typer.Option(help="Training steps, replacing the recipe's.")]
_Device = Annotated[str, typer.Option(help="cpu or cuda.")]
_Threads = Annotated[
    int | None, typer.Option(help="torch intra-op threads (on a shared CPU 1 is often best).")
]
_Out = Annotated[
    str | None,
    typer.Option(
        metavar="FOLDER",
        help="Write <supernet>.pt (float16) and <supernet>.json (recipe, SHA-256, command, "
        "wall time) into this folder instead of the cache, saving a partial run every "
        "--checkpoint-every steps meanwhile; a run stopped early goes on from it when "
        "started again (recipes with per-step draws).",
    ),
]
_CheckpointEvery = Annotated[
    int, typer.Option(help="Steps between partial checkpoints with --out (0: none).")
]
_Workers = Annotated[
    int,
    typer.Option(
        help="Processes drawing batches ahead (recipes with per-step draws, e.g. the -gpu "
        "ones; what is drawn does not depend on their number)."
    ),
]
_Network = Annotated[
    str | None,
    typer.Option(
        help="A built-in network to train on --dataset instead of a supernet: ds-cnn (audio: "
        "log-mel features) or cnn-1d (series: windows); writes <network>.pt2 (and its .json "
        "record) into --out, for tinytune search --supernet.",
    ),
]
_Dataset = Annotated[
    str | None,
    typer.Option(help="With --network: the folder to train it on (audio:PATH or series:PATH)."),
]
_Epochs = Annotated[
    int, typer.Option(help="With --network: epochs; the best on validation is kept.")
]
_Seed = Annotated[int, typer.Option(help="With --network: seeds its splits, weights and order.")]
_Force = Annotated[
    bool,
    typer.Option(
        help="Train again even when cached, replace --out's checkpoint, or start over "
        "instead of going on from its partial run."
    ),
]


def pretrain(
    supernet: _Supernet = DEFAULT_SUPERNET,
    recipe: _Recipe = "quick",
    steps: _Steps = None,
    device: _Device = "cpu",
    threads: _Threads = None,
    out: _Out = None,
    checkpoint_every: _CheckpointEvery = 200,
    workers: _Workers = 0,
    network: _Network = None,
    dataset: _Dataset = None,
    epochs: _Epochs = EPOCHS,
    seed: _Seed = 0,
    force: _Force = False,
) -> None:
    """Pre-train a supernet with the sandwich rule and cache the checkpoint; or train a
    built-in network on your folder (--network)."""
    import dataclasses

    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.cli.common import console, pretrain_bar, quiet_logs
    from tinytune.errors import ConfigError
    from tinytune.models.supernet import get_recipe
    from tinytune.spaces import get_supernet

    quiet_logs()
    _check_machine(device, threads)
    given = {
        "--supernet": supernet != DEFAULT_SUPERNET,
        "--recipe": recipe != "quick",
        "--steps": steps is not None,
        "--device": device != "cpu",
        "--checkpoint-every": checkpoint_every != 200,
        "--workers": workers != 0,
    }
    if network is not None:
        _refuse(given, "--network trains a built-in network on the CPU by its own recipe")
        _pretrain_network(network, dataset, out, epochs, seed, force)
        return
    _refuse(
        {"--dataset": dataset is not None, "--epochs": epochs != EPOCHS, "--seed": seed != 0},
        "it sets how --network trains a built-in network on your folder",
    )
    spec = get_supernet(supernet)
    chosen = get_recipe(recipe)
    if workers < 0:
        raise ConfigError(f"--workers must be >= 0, got {workers}")
    if workers and chosen.stream != "per-step":
        raise ConfigError(
            f"recipe {recipe} draws its batches in one sequence; --workers needs a recipe with "
            "per-step draws (glyphs-gpu)"
        )
    if steps is not None:
        chosen = dataclasses.replace(chosen, steps=steps)
    if checkpoint_every < 0:
        raise ConfigError(
            f"--checkpoint-every must be >= 0 (0: no partial saves), got {checkpoint_every}"
        )
    folder = None if out is None else _out_folder(out)
    if folder is not None:  # before any training
        _check_out(folder, spec.name, force)
    with pretrain_bar(spec.name) as progress:
        if folder is None:
            path = ensure_checkpoint(
                spec, chosen, force=force, progress=progress, device=device, workers=workers
            )
        else:
            path = _pretrain_into_folder(
                spec, chosen, recipe, folder, progress, device, checkpoint_every, workers, force
            )
    console.print(f"{spec.name}: {path}")


def _refuse(given: dict[str, bool], why: str) -> None:
    """Refuse the first option given that belongs to the other kind of pre-training."""
    from tinytune.errors import ConfigError

    for flag, was_given in given.items():
        if was_given:
            raise ConfigError(f"{flag} does not apply here: {why}")


def _pretrain_network(
    name: str, dataset: str | None, out: str | None, epochs: int, seed: int, force: bool
) -> None:
    """Train the built-in network ``name`` on ``dataset`` and write it into ``out``."""
    from tinytune.builtin_networks import check_name, pretrain_network, save_network
    from tinytune.cli.common import console, epochs_bar
    from tinytune.errors import ConfigError

    check_name(name)
    if dataset is None:
        raise ConfigError(
            f"--network {name} trains on a folder of yours: pass --dataset audio:PATH (keyword "
            "clips) or series:PATH (sensor windows)"
        )
    if out is None:
        raise ConfigError(f"--network {name} writes a file: pass --out FOLDER for it")
    folder = _out_folder(out)
    _check_out(folder, name, force, ".pt2")
    with epochs_bar(name) as progress:
        trained = pretrain_network(name, dataset, epochs=epochs, seed=seed, progress=progress)
    path = save_network(trained, folder)
    console.print(
        f"{name}: {path} (epoch {trained.best_epoch} of {trained.epochs}, chosen on validation: "
        f"{100 * trained.val_accuracy:.1f} % validation, {100 * trained.test_accuracy:.1f} % "
        f"test, {trained.seconds:.0f} s); search with it: tinytune search --dataset "
        f"<your folder> --supernet {path}",
        soft_wrap=True,
    )


def _check_machine(device: str, threads: int | None) -> None:
    """Refuse a device torch cannot use or more threads than cores; set the threads."""
    import os

    import torch

    from tinytune.errors import ConfigError

    if device not in ("cpu", "cuda"):
        raise ConfigError(f"--device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda, but torch sees no CUDA device")
    if threads is not None:
        cores = os.cpu_count() or 1
        if not 1 <= threads <= cores:  # more only contend (and torch fails on far more)
            raise ConfigError(
                f"--threads must lie in [1, {cores}] (this machine's cores), got {threads}"
            )
        torch.set_num_threads(threads)


def _pretrain_into_folder(
    spec: SupernetSpec,
    chosen: PretrainRecipe,
    recipe: str,
    folder: Path,
    progress: Callable[[int, int, float], None],
    device: str,
    checkpoint_every: int,
    workers: int,
    force: bool,
) -> Path:
    """Pre-train into ``folder`` (going on from a partial run there unless ``force``) and
    write the checkpoint's record beside it: recipe, SHA-256, command, wall time."""
    import json
    import platform
    import shlex
    import sys
    import time

    import torch

    from tinytune.checkpoints import pretrain_into, sha256_file
    from tinytune.cli.common import console

    path = folder / f"{spec.name}.pt"
    resumed: list[int] = []  # the steps a partial run had done, where one went on

    def going_on(done: int) -> None:
        resumed.append(done)
        console.print(
            f"going on from the partial run in {folder} after step {done} of "
            f"{chosen.steps} (--force starts over)"
        )

    start = time.perf_counter()
    pretrain_into(
        spec,
        chosen,
        path,
        progress=progress,
        device=device,
        checkpoint_every=checkpoint_every,
        half=True,
        workers=workers,
        fresh=force,
        on_resume=going_on,
    )
    record = {
        "supernet": spec.name,
        "recipe_name": recipe,
        "recipe": chosen.to_dict(),
        "sha256": sha256_file(path),
        "command": "tinytune pretrain " + shlex.join(_own_args(sys.argv)),
        "wall_time_s": round(time.perf_counter() - start, 1),
        **({"resumed_after_step": resumed[0]} if resumed else {}),
        "device": device,
        "threads": torch.get_num_threads(),
        "workers": workers,
        "storage": "float16",
        "torch": torch.__version__,
        "machine": platform.machine(),
    }
    path.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    return path


def _out_folder(text: str) -> Path:
    """``--out`` as a folder; a blank one is refused (a path of '' would be the current
    folder, which the user did not name)."""
    from tinytune.errors import ConfigError

    if not text.strip():
        raise ConfigError(f"--out must name a folder for the checkpoint, got {text!r}")
    return Path(text)


def _check_out(out: Path, name: str, force: bool, suffix: str = ".pt") -> None:
    """Refuse ``--out`` where the checkpoint cannot be written, or where one is already (it
    is replaced only with ``--force``), before any training."""
    from tinytune.errors import ConfigError
    from tinytune.paths import writable_folder

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file; name a folder for the checkpoint")
    writable_folder(out, "--out", out)
    if (out / f"{name}{suffix}").exists() and not force:
        raise ConfigError(
            f"--out {str(out)!r} holds a checkpoint of {name} already; pass --force to train "
            "and replace it"
        )


def _own_args(argv: list[str]) -> list[str]:
    """The arguments after ``pretrain`` on the command line (all of them if it is absent)."""
    return argv[argv.index("pretrain") + 1 :] if "pretrain" in argv else argv[1:]
