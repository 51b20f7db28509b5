"""``tinytune export``: write a device bundle of a trial's (or a stored candidate's) training
step — int8 C with one static arena, an example, a Makefile, a manifest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tinytune.cli.common import DEFAULT_STORAGE

if TYPE_CHECKING:
    from tinytune.db import Store
    from tinytune.spaces import SupernetSpec

__all__ = ["ExportTarget", "export", "resolve_target"]

CHECKPOINT_ATTR = "tinytune.checkpoint"
"""Study user attribute that may name the supernet checkpoint the study searched with."""


@dataclass(frozen=True)
class ExportTarget:
    """The candidate to export and what the database says about it.

    Attributes:
        payload: the candidate's JSON.
        study: the study it comes from (None: a key found in no study).
        trial: its trial number in that study, when known.
        space: the study's search space attribute (data set, seed, device...), or {}.
        study_attrs: the study's user attributes.
        search_memory_bytes: the peak SRAM the search stored for the trial.
    """

    payload: str
    study: str | None
    trial: int | None
    space: dict[str, Any]
    study_attrs: dict[str, Any]
    search_memory_bytes: int | None


def _load_study(store: Store, storage: str, study: str | None) -> Any:
    import optuna

    from tinytune.db.engine import mask_url
    from tinytune.errors import StorageError

    names = store.study_names()
    if study is None:
        if len(names) != 1:
            raise StorageError(
                f"the database holds {len(names)} studies; choose one with --study: "
                f"{', '.join(names) or '(none)'}"
            )
        study = names[0]
    try:
        return optuna.load_study(study_name=study, storage=storage)
    except KeyError as e:
        raise StorageError(
            f"no study {study!r} in {mask_url(storage)!r}; studies: {', '.join(names) or '(none)'}"
        ) from e


def resolve_target(
    store: Store, storage: str, *, study: str | None, trial: int | None, candidate: str | None
) -> ExportTarget:
    """The candidate of ``trial`` in ``study`` (default: the only study), or the stored
    candidate whose key starts with ``candidate`` (with the study that measured it: ``study``,
    else the only one that did)."""
    from tinytune.errors import StorageError
    from tinytune.search.driver import SPACE_ATTR

    if trial is not None and candidate is not None:
        raise StorageError("give either --trial N or --candidate KEY, not both")
    if trial is None and candidate is None:
        raise StorageError("name what to export: --trial N (of --study S) or --candidate KEY")
    if trial is not None:
        loaded = _load_study(store, storage, study)
        trials = {t.number: t for t in loaded.get_trials(deepcopy=False)}
        found = trials.get(trial)
        if found is None or "candidate" not in found.user_attrs:
            raise StorageError(
                f"study {loaded.study_name!r} has no trial {trial} with a candidate (trials 0–"
                f"{max(trials, default=-1)})"
            )
        return ExportTarget(
            payload=found.user_attrs["candidate"],
            study=loaded.study_name,
            trial=trial,
            space=dict(loaded.user_attrs.get(SPACE_ATTR, {})),
            study_attrs=dict(loaded.user_attrs),
            search_memory_bytes=found.user_attrs.get("memory_bytes"),
        )
    assert candidate is not None
    matches = store.find_candidates(candidate.lower())
    if len(matches) != 1:
        raise StorageError(
            f"candidate key {candidate!r} matches {len(matches)} stored candidates; give "
            "more of the key, or a trial number with --study"
        )
    key = matches[0].key
    names = (
        [study]
        if study is not None
        else [n for n in store.study_names() if store.find_evaluation(n, key, "measured")]
    )
    if len(names) > 1:
        raise StorageError(
            f"candidate {key[:12]} was measured in {len(names)} studies; choose one with "
            f"--study: {', '.join(names)}"
        )
    if not names:
        return ExportTarget(matches[0].payload, None, None, {}, {}, None)
    loaded = _load_study(store, storage, names[0])
    evaluation = store.find_evaluation(loaded.study_name, key, "measured")
    return ExportTarget(
        payload=matches[0].payload,
        study=loaded.study_name,
        trial=evaluation.trial_number if evaluation else None,
        space=dict(loaded.user_attrs.get(SPACE_ATTR, {})),
        study_attrs=dict(loaded.user_attrs),
        search_memory_bytes=evaluation.memory_bytes if evaluation else None,
    )


def _checkpoint(
    spec: SupernetSpec, weights: Path | None, study_attrs: dict[str, Any]
) -> tuple[Path, str]:
    """The supernet weights: ``--weights``, else the study's checkpoint, else the cached
    default pre-training (made when missing, as ``tinytune search`` does)."""
    from tinytune.cli.common import ensure_checkpoint, require_weights
    from tinytune.errors import ModelError
    from tinytune.models import PretrainRecipe, load_supernet

    if weights is not None:
        load_supernet(spec, weights)  # fails early, with one line, on a bad file
        return weights, "--weights"
    stored = study_attrs.get(CHECKPOINT_ATTR)
    if stored:
        path = Path(stored)
        if not path.is_file():
            raise ModelError(
                f"the study's supernet checkpoint {stored!r} does not exist; pass the weights "
                "with --weights FILE"
            )
        return path, "the study"
    require_weights(spec, None)
    return ensure_checkpoint(spec, PretrainRecipe(), None), "the cache (default pre-training)"


def export(
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", help="Bundle folder to write (an existing one must be a bundle)."
        ),
    ],
    trial: Annotated[int | None, typer.Option(help="Trial number in the study.")] = None,
    candidate: Annotated[
        str | None, typer.Option(help="Stored candidate key (or a unique prefix).")
    ] = None,
    study: Annotated[
        str | None, typer.Option(help="Study of the trial (default: the only study).")
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(help="Target device (default: the study's, else stm32f746)."),
    ] = None,
    storage: Annotated[
        str, typer.Option(help="SQLAlchemy URL of the database.")
    ] = DEFAULT_STORAGE,
    weights: Annotated[
        Path | None,
        typer.Option(help="Supernet weights (default: the study's, else the cached ones)."),
    ] = None,
    samples: Annotated[
        int, typer.Option(help="Training samples embedded in the example (and test samples).")
    ] = 32,
    epochs: Annotated[int, typer.Option(help="Epochs the example trains.")] = 3,
    lr: Annotated[float, typer.Option(help="On-device learning rate (SGD, batch 1, QAS).")] = 0.01,
    seed: Annotated[int, typer.Option(help="Seed of the new classifier.")] = 0,
) -> None:
    """Export a candidate's on-device training step as a C bundle: int8 weights, the sparse
    update as straight-line C over the memory planner's static arena, an example that trains on
    samples of the study's data set, a Makefile (host, ASan, aarch64, Cortex-M7) and a
    manifest."""
    import optuna

    from tinytune.bundle import (
        BundleRequest,
        Provenance,
        build_bundle,
        check_candidate,
        check_destination,
        check_options,
        write_bundle,
    )
    from tinytune.cli.common import console, quiet_logs, require_database
    from tinytune.data import get_dataset
    from tinytune.db import open_store
    from tinytune.hwmodels.calibration import resolve_device
    from tinytune.spaces import Candidate, get_supernet

    quiet_logs()
    check_options(samples, epochs, lr)
    check_destination(out)
    require_database(storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with open_store(storage) as store:
        target = resolve_target(store, storage, study=study, trial=trial, candidate=candidate)
        profile, calibration = resolve_device(
            device or target.space.get("device", "stm32f746"), store
        )
        evaluation = (
            store.find_evaluation(
                target.study, Candidate.from_json(target.payload).key, "measured"
            )
            if target.study
            else None
        )
    cand = Candidate.from_json(target.payload)
    dataset = target.space.get("dataset", "digits")
    cost = check_candidate(cand, profile, get_dataset(dataset).num_classes)
    checkpoint, source = _checkpoint(get_supernet(cand.supernet), weights, target.study_attrs)
    request = BundleRequest(
        candidate=cand,
        checkpoint=checkpoint,
        device=profile,
        dataset=dataset,
        data_seed=int(target.space.get("data_seed", 0)),
        samples=samples,
        epochs=epochs,
        lr=lr,
        seed=seed,
        latency_profile=(
            f"calibration #{calibration} in the database"
            if calibration is not None
            else f"built-in profile: {profile.source}"
        ),
    )
    measured = (
        {"accuracy": evaluation.accuracy, "val_accuracy": evaluation.val_accuracy}
        if evaluation is not None
        else None
    )
    provenance = Provenance(
        study=target.study,
        trial=target.trial,
        measured=measured,
        search_memory_bytes=target.search_memory_bytes,
        checkpoint_source=source,
    )
    bundle = build_bundle(request, provenance, cost)
    path = write_bundle(out, bundle.files, bundle.manifest)
    latency = bundle.manifest["predicted_latency"]["train_step_s"]
    console.print(
        f"wrote {path}: candidate {cand.key[:12]}, arena {bundle.model.arena_bytes / 1024:.1f} "
        f"KB of {profile.sram_bytes / 1024:.0f} KB SRAM on {profile.name}, constants "
        f"{bundle.model.flash_bytes / 1024:.1f} KB"
        + (f", predicted step {1000 * latency:.1f} ms" if latency is not None else "")
        + f"; try: make -C {path} run-host",
        soft_wrap=True,
    )
