"""Exporting a front point as a device bundle (:func:`export_bundle`, re-exported as
``tinytune.export_bundle``): the point, trial or stored candidate looked up, its weights found,
the device's accuracy read from the study or measured and stored with it, and the bundle
written by :mod:`tinytune.bundle`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinytune.options import DEFAULT_STORAGE, File

if TYPE_CHECKING:
    from tinytune.evaluators.device import Int8Progress
    from tinytune.search import FrontPoint
    from tinytune.search.run import Int8Accuracy

__all__ = ["DEFAULT_DEVICE_LR", "Exported", "check_callbacks", "device_task", "export_bundle"]

DEFAULT_DEVICE_LR = 0.00625
"""The bundle's learning rate when no device accuracy was measured: the smallest of the rates
that ``--verify-int8`` tries (:data:`tinytune.search.run.verify_int8.INT8_LRS`), the one no network
measured diverges at (EfficientNet-Lite0's sparse update on the symbols folder does at 0.1, and
at 0.025 at three seeds of five; validation chose this one at all five,
docs/bench/accuracy-limit.md). Slower where a larger rate would do: measuring chooses it."""


def check_callbacks(**callbacks: object) -> None:
    """Refuse a callback that cannot be called, before any work (the front door's functions)."""
    from tinytune.errors import OptionError

    for name, callback in callbacks.items():
        if callback is not None and not callable(callback):
            raise OptionError(name, f"must be a function or None, got {callback!r:.80}")


@dataclass(frozen=True)
class Exported:
    """A written device bundle.

    Attributes:
        path: the bundle's folder.
        manifest: its manifest (candidate, arena, flash, predicted latency, accuracies...).
        checkpoint_source: where the supernet weights came from.
    """

    path: Path
    manifest: dict[str, Any]
    checkpoint_source: str


def export_bundle(
    target: FrontPoint | int | str,
    out: str | Path,
    *,
    study: str | None = None,
    storage: str = DEFAULT_STORAGE,
    device: str | None = None,
    weights: str | Path | None = None,
    samples: int = 32,
    epochs: int = 3,
    lr: float | None = None,
    lr_schedule: str | None = None,
    seed: int = 0,
    measure_int8: bool = True,
    force: bool = False,
    on_pretrain: Callable[[int, int, float], None] | None = None,
    on_measure: Callable[[], None] | None = None,
    on_measure_progress: Int8Progress | None = None,
) -> Exported:
    """Write the device bundle of a front point, a trial number or a stored candidate key.
    A front point is looked up in the study that measured it unless ``study`` names another.

    The bundle holds int8 weights, the training step as C99 over the memory planner's static
    arena, an example that trains on ``samples`` samples of the study's data set for ``epochs``
    epochs as a smoke test, build files (Make, CMake, Zephyr, Arduino) and a manifest.
    ``lr`` and ``lr_schedule`` (``halving`` or ``constant``): None trains as the device's
    accuracy was measured (:func:`_device_rate`). The weights are ``weights``, else the study's
    checkpoint, else the shipped or cached one. The manifest records the search's fp32
    accuracies and the device's (int8, batch 1, QAS): stored by ``tinytune search
    --verify-int8``, else measured first (minutes; ``on_measure`` is called before,
    ``on_measure_progress`` after each training image) and stored with the study;
    ``measure_int8=False`` skips that.

    ``out`` may be a bundle written before: the new one replaces it, and the user's files in
    it (``build/``, notes) are kept. Unless ``force``, a file of the bundle changed since it
    was written, or one of the user's at a path the new bundle writes, is refused before any
    work; with ``force`` they are replaced, and a changed file it does not hold is removed.

    Raises:
        TinyTuneError: bad options, an unknown target or device, a destination that is not
            a bundle, or (without ``force``) one whose user's work would be lost; nothing is
            written then.
    """
    from tinytune.bundle import (
        build_bundle,
        check_candidate,
        check_destination,
        exported_file_names,
        write_bundle,
    )
    from tinytune.data import frontend_of, get_dataset
    from tinytune.db import require_tinytune
    from tinytune.spaces import get_supernet

    out = File().parse("out", out)
    weights_path = None if weights is None else File().parse("weights", weights)
    _check_export_options(
        target, samples, epochs, lr, lr_schedule, seed, force,
        on_pretrain=on_pretrain, on_measure=on_measure, on_measure_progress=on_measure_progress,
    )  # fmt: skip
    check_destination(out, force=force, files=exported_file_names())
    require_tinytune(storage)
    found, profile, calibration = _look_up(target, study, storage, device)
    candidate, space = found.candidate, found.space
    data = get_dataset(space.dataset, seed=space.data_seed)
    check_candidate(candidate, profile, data.num_classes, frontend_of(data))  # fails fast
    checkpoint, source = _checkpoint(
        get_supernet(candidate.supernet), weights_path, found, on_pretrain
    )
    measured = _device_accuracy(
        storage, found, checkpoint, seed, measure_int8, on_measure, on_measure_progress
    )
    lr, lr_schedule = _device_rate(measured[0] if measured is not None else None, lr, lr_schedule)
    request = _request(
        found, profile, calibration, checkpoint, samples, epochs, lr, lr_schedule, seed
    )
    bundle = build_bundle(request, _provenance(found, measured, source))
    path = write_bundle(out, bundle.files, bundle.manifest, force=force)
    return Exported(path, bundle.manifest, source)


def _check_export_options(
    target: object,
    samples: int,
    epochs: int,
    lr: float | None,
    lr_schedule: str | None,
    seed: int,
    force: bool,
    **callbacks: object,
) -> None:
    """:func:`export_bundle`'s checks of its options, before any work (one line each)."""
    from tinytune.bundle import check_options
    from tinytune.errors import ConfigError, OptionError, flag
    from tinytune.search import FrontPoint
    from tinytune.search.run import INT8_SCHEDULE
    from tinytune.units import check_seed

    if isinstance(target, bool) or not isinstance(target, int | str | FrontPoint):
        raise ConfigError(
            f"the target must be a front point, a trial number or a candidate key, got "
            f"{target!r:.80}"
        )
    check_options(
        samples,
        epochs,
        DEFAULT_DEVICE_LR if lr is None else lr,
        INT8_SCHEDULE if lr_schedule is None else lr_schedule,
    )
    check_callbacks(**callbacks)
    check_seed(seed, flag("seed"))
    if not isinstance(force, bool):
        raise OptionError("force", f"must be True or False, got {force!r:.40}")


def _look_up(
    target: FrontPoint | int | str, study: str | None, storage: str, device: str | None
) -> tuple[Any, Any, Any]:
    """The stored candidate of ``target`` (a front point in the study that measured it unless
    ``study`` names another), the device's profile (``device``, else the study's) and the
    stored calibration it was made from (None: the built-in profile)."""
    from tinytune.db import open_store
    from tinytune.hwmodels.registry import device_engines, get_device
    from tinytune.search import FrontPoint
    from tinytune.stored import find_candidate

    key: int | str = target if isinstance(target, int | str) else target.candidate_key
    if isinstance(target, FrontPoint) and study is None:
        study = target.study  # the point's own study, where several measured its candidate
    with open_store(storage) as store:
        found = find_candidate(store, study=study, target=key)
        name = device if device is not None else found.space.device
        # the bundle's step is predicted by a profile of the bundle's kernels, where one exists
        calibration = store.latest_device_calibration(name, "bundle")
        if calibration is None and "bundle" not in device_engines(name):
            calibration = store.latest_device_calibration(name)
        return found, get_device(name, calibration), calibration


def _checkpoint(
    spec: Any,
    weights: Path | None,
    found: Any,
    on_pretrain: Callable[[int, int, float], None] | None,
) -> tuple[Path, str]:
    """The supernet weights and where they came from: ``weights``, else the study's
    checkpoint, else the shipped or cached one (pre-trained now where there is none)."""
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.errors import ModelError, flag

    if weights is not None:
        return ensure_checkpoint(spec, weights=weights), "--weights"
    if found.checkpoint:
        checkpoint = Path(found.checkpoint)
        if not checkpoint.is_file():
            raise ModelError(
                f"the study's supernet checkpoint {found.checkpoint!r} does not exist; pass the "
                "weights with " + flag("weights") + " FILE"
            )
        return checkpoint, "the study"
    return (
        ensure_checkpoint(spec, progress=on_pretrain),
        "the shipped or cached default pre-training",
    )


def _device_rate(
    int8: Int8Accuracy | None, lr: float | None, lr_schedule: str | None
) -> tuple[float, str]:
    """The bundle's rate and schedule: those asked for, else as the device's accuracy was
    measured (its schedule, and its rate where the schedule is the same: a rate chosen under
    another schedule is no guide), else :data:`DEFAULT_DEVICE_LR` and the int8 schedule."""
    from tinytune.search.run import INT8_SCHEDULE

    if lr_schedule is None:
        lr_schedule = int8.schedule if int8 is not None else INT8_SCHEDULE
    if lr is None:
        rate = int8.lr if int8 is not None and int8.schedule == lr_schedule else None
        lr = float(rate) if rate else DEFAULT_DEVICE_LR
    return lr, lr_schedule


def _request(
    found: Any,
    profile: Any,
    calibration: Any,
    checkpoint: Path,
    samples: int,
    epochs: int,
    lr: float,
    lr_schedule: str,
    seed: int,
) -> Any:
    """The bundle's request: the candidate, its weights and device, and how the example
    trains."""
    from tinytune.bundle import BundleRequest

    return BundleRequest(
        candidate=found.candidate,
        checkpoint=checkpoint,
        device=profile,
        dataset=found.space.dataset,
        data_seed=found.space.data_seed,
        samples=samples,
        epochs=epochs,
        lr=lr,
        lr_schedule=lr_schedule,
        seed=seed,
        latency_profile=(
            f"calibration #{calibration.id} in the database"
            + (", FORCED: held-out error above the accuracy required" * calibration.forced)
            if calibration is not None
            else f"built-in profile: {profile.source}"
        ),
    )


def _provenance(found: Any, measured: tuple[Any, dict[str, Any]] | None, source: str) -> Any:
    """What the manifest says the bundle comes from and what was measured of it."""
    from tinytune.bundle import Provenance

    evaluation = found.evaluation
    return Provenance(
        study=found.study,
        trial=found.trial,
        measured=(
            {
                "accuracy": evaluation.accuracy,
                "val_accuracy": evaluation.val_accuracy,
                "augment": found.space.finetune.augment if found.space.finetune else None,
            }
            if evaluation is not None
            else None
        ),
        int8=measured[1] if measured is not None else None,
        search_memory_bytes=evaluation.memory_bytes if evaluation is not None else None,
        checkpoint_source=source,
    )


def device_task(found: Any, checkpoint: str | Path, seed: int = 0) -> Any:
    """The evaluation task that measures a stored candidate's accuracy as its bundle trains
    (int8, batch 1, QAS, :func:`tinytune.search.run.int8_settings`) on its study's data set,
    data seed and train/validation partitions; ``seed`` is export's ``--seed``."""
    from tinytune.evaluators import FinetuneConfig, FinetuneTask
    from tinytune.search.run import int8_settings

    return FinetuneTask(
        candidate=found.candidate.to_json(),
        checkpoint=str(checkpoint),
        dataset=found.space.dataset,
        data_seed=found.space.data_seed,
        finetune=FinetuneConfig(seed=seed),
        repeats=_repeats_of(found.evaluation),
        int8=int8_settings(),
    )


def _device_accuracy(
    storage: str,
    found: Any,
    checkpoint: Path,
    seed: int,
    measure: bool,
    on_measure: Callable[[], None] | None,
    on_progress: Int8Progress | None = None,
) -> tuple[Int8Accuracy, dict[str, Any]] | None:
    """The candidate's int8 accuracy stored in its study (read as the search reads it,
    :func:`tinytune.search.run.verify_int8.int8_accuracies`) where it trained as the bundle
    trains (:attr:`~tinytune.search.run.Int8Accuracy.current`), else (with ``measure``)
    measured now (reporting to ``on_progress``) and stored with the study when it has one; with
    the manifest's entry of it. None when neither."""
    from tinytune.bundle.errors import BundleError
    from tinytune.db import EvaluationRecord, open_store
    from tinytune.evaluators import run_evaluation
    from tinytune.search.run import Int8Accuracy, int8_accuracies

    key = found.candidate.key
    if found.study is not None:
        with open_store(storage) as store:
            stored = int8_accuracies(store, found.study, [key]).get(key)
        if stored is not None and stored.current:  # an older one trained otherwise
            return stored, _int8_entry(stored, "the study")
    if not measure:
        return None
    if on_measure is not None:
        on_measure()
    result = run_evaluation(device_task(found, checkpoint, seed), progress=on_progress)
    if not result.ok:
        raise BundleError(f"the int8 training of {key[:12]} failed: {result.error}")
    assert result.accuracy is not None and result.val_accuracy is not None
    details = dict(result.details, wall_time_s=round(result.wall_time_s, 1))
    if found.study is not None:
        with open_store(storage) as store:
            store.add_evaluation(
                EvaluationRecord.of(
                    found.study,
                    key,
                    "int8",
                    result,
                    trial_number=found.trial,
                    memory_bytes=None,
                    latency_ms=None,
                    details=details,
                )
            )
    fresh = Int8Accuracy.of(result.val_accuracy, result.accuracy, details)
    return fresh, _int8_entry(fresh, "measured by export")


def _repeats_of(evaluation: Any) -> int:
    """The train/validation partitions of a stored fp32 measurement (1 without one)."""
    details = getattr(evaluation, "details", None) or {}
    return int(details.get("repeats", 1))


def _int8_entry(accuracy: Int8Accuracy, source: str) -> dict[str, Any]:
    """The manifest's record of the device's accuracy (``source``: where it came from)."""
    return {
        "accuracy": accuracy.test_accuracy,
        "val_accuracy": accuracy.val_accuracy,
        "lr": accuracy.lr,
        "schedule": accuracy.schedule,
        "epochs": accuracy.epochs,
        "batch_size": 1,
        "qas": accuracy.qas,
        "source": source,
    }
