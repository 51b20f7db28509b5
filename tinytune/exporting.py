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

__all__ = ["DEFAULT_DEVICE_LR", "Exported", "check_callbacks", "export_bundle"]

DEFAULT_DEVICE_LR = 0.003125
"""The bundle's learning rate when no device accuracy was measured: the smallest of the rates
that ``--verify-int8`` tries (:data:`tinytune.search.run.verify_int8.INT8_LRS`), the one no network
measured diverges at (EfficientNet-Lite0's sparse update on an image folder does at 0.1 and
trains to a loss of 4.5 at 0.0125; the glyph supernet's on digits reaches 97.8 / 95.5 % at it,
docs/bench/device-accuracy.md). Slower where a larger rate would do: measuring chooses it."""


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
    epochs at learning rate ``lr`` under ``lr_schedule`` (``halving``: halved after every epoch;
    ``constant``) as a smoke test, a Makefile (the host, ASan, aarch64, Cortex-M7, Cortex-M4F,
    Cortex-M0+ and RV32IMC), CMake, Zephyr and Arduino layouts, and a manifest.
    ``lr=None`` and ``lr_schedule=None``: the rate and schedule at which the device's accuracy was
    measured (the rate chosen on validation), so that the bundle trains as measured;
    :data:`DEFAULT_DEVICE_LR` and :data:`tinytune.search.run.verify_int8.INT8_SCHEDULE` when none
    was (the default rate also where ``lr_schedule`` names another schedule than the
    measurement's). The weights are ``weights``, else the study's checkpoint, else the shipped or
    cached one. The manifest records the search's fp32 accuracies and the device's (int8, batch 1,
    QAS): stored by ``tinytune search --verify-int8``, else measured first (minutes) and stored
    with the study; ``measure_int8=False`` skips that, and the manifest then has no device
    accuracy. ``on_measure`` is called before such a measurement starts, and
    ``on_measure_progress`` after each of its training images, with the epochs and images done and
    to do (:class:`tinytune.evaluators.device.TrainingProgress`).

    ``out`` may be a bundle written before: the new one replaces it, and the files of the user's
    in it (``build/`` with the profiler's measurements, notes) are kept. Unless ``force``, a
    file of the bundle changed since it was written, or one of the user's at a path the new
    bundle writes, is refused before any work; with ``force`` they are replaced, and a changed
    file the new bundle does not hold is removed.

    Raises:
        TinyTuneError: bad options, an unknown target or device, a destination that is not
            a bundle, or (without ``force``) one whose user's work would be lost; nothing is
            written then.
    """
    from tinytune.bundle import (
        BundleRequest,
        Provenance,
        build_bundle,
        check_candidate,
        check_destination,
        check_options,
        exported_file_names,
        write_bundle,
    )
    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.data import get_dataset
    from tinytune.db import open_store, require_tinytune
    from tinytune.errors import ConfigError, ModelError, OptionError, flag
    from tinytune.hwmodels.registry import device_engines, get_device
    from tinytune.search import FrontPoint
    from tinytune.search.run import INT8_SCHEDULE
    from tinytune.spaces import get_supernet
    from tinytune.studies import find_candidate
    from tinytune.units import check_seed

    out = File().parse("out", out)
    weights_path = None if weights is None else File().parse("weights", weights)
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
    check_callbacks(
        on_pretrain=on_pretrain, on_measure=on_measure, on_measure_progress=on_measure_progress
    )
    check_seed(seed, flag("seed"))
    if not isinstance(force, bool):
        raise OptionError("force", f"must be True or False, got {force!r:.40}")
    check_destination(out, force=force, files=exported_file_names())
    require_tinytune(storage)
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
        profile = get_device(name, calibration)
    candidate, space = found.candidate, found.space
    dataset = space.dataset
    check_candidate(candidate, profile, get_dataset(dataset).num_classes)  # fails fast
    spec = get_supernet(candidate.supernet)
    if weights_path is not None:
        checkpoint, source = ensure_checkpoint(spec, weights=weights_path), "--weights"
    elif found.checkpoint:
        checkpoint, source = Path(found.checkpoint), "the study"
        if not checkpoint.is_file():
            raise ModelError(
                f"the study's supernet checkpoint {found.checkpoint!r} does not exist; pass the "
                "weights with " + flag("weights") + " FILE"
            )
    else:
        checkpoint = ensure_checkpoint(spec, progress=on_pretrain)
        source = "the shipped or cached default pre-training"
    evaluation = found.evaluation
    measured = _device_accuracy(
        storage,
        found,
        checkpoint,
        dataset,
        space.data_seed,
        seed,
        measure_int8,
        on_measure,
        on_measure_progress,
    )
    int8 = measured[0] if measured is not None else None
    # train as the device's accuracy was measured: its schedule, and its rate where the
    # schedule is the same (a rate chosen under another schedule is no guide)
    if lr_schedule is None:
        lr_schedule = int8.schedule if int8 is not None else INT8_SCHEDULE
    if lr is None:
        rate = int8.lr if int8 is not None and int8.schedule == lr_schedule else None
        lr = float(rate) if rate else DEFAULT_DEVICE_LR
    request = BundleRequest(
        candidate=candidate,
        checkpoint=checkpoint,
        device=profile,
        dataset=dataset,
        data_seed=space.data_seed,
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
    provenance = Provenance(
        study=found.study,
        trial=found.trial,
        measured=(
            {"accuracy": evaluation.accuracy, "val_accuracy": evaluation.val_accuracy}
            if evaluation is not None
            else None
        ),
        int8=measured[1] if measured is not None else None,
        search_memory_bytes=evaluation.memory_bytes if evaluation is not None else None,
        checkpoint_source=source,
    )
    bundle = build_bundle(request, provenance)
    path = write_bundle(out, bundle.files, bundle.manifest, force=force)
    return Exported(path, bundle.manifest, source)


def _device_accuracy(
    storage: str,
    found: Any,
    checkpoint: Path,
    dataset: str,
    data_seed: int,
    seed: int,
    measure: bool,
    on_measure: Callable[[], None] | None,
    on_progress: Int8Progress | None = None,
) -> tuple[Int8Accuracy, dict[str, Any]] | None:
    """The candidate's int8 accuracy stored in its study (read as the search reads it,
    :func:`tinytune.search.run.verify_int8.int8_accuracies`), else (with ``measure``) measured now
    (reporting to ``on_progress``) and stored with the study when it has one; with the
    manifest's entry of it. None when neither."""
    from tinytune.bundle.errors import BundleError
    from tinytune.db import EvaluationRecord, open_store
    from tinytune.evaluators import FinetuneConfig, run_evaluation
    from tinytune.search.run import Int8Accuracy, int8_accuracies, int8_settings

    key = found.candidate.key
    if found.study is not None:
        with open_store(storage) as store:
            stored = int8_accuracies(store, found.study, [key]).get(key)
        if stored is not None:
            return stored, _int8_entry(stored, "the study")
    if not measure:
        return None
    if on_measure is not None:
        on_measure()
    result = run_evaluation(
        {
            "candidate": found.candidate.to_json(),
            "checkpoint": str(checkpoint),
            "dataset": dataset,
            "data_seed": data_seed,
            "finetune": FinetuneConfig(seed=seed).to_dict(),
            "threads": 1,
            "fidelity": "int8",
            "int8": int8_settings(),
            "repeats": _repeats_of(found.evaluation),
        },
        progress=on_progress,
    )
    if result["status"] != "ok":
        raise BundleError(f"the int8 training of {key[:12]} failed: {result['error']}")
    details = dict(result["details"], wall_time_s=round(result["wall_time_s"], 1))
    if found.study is not None:
        with open_store(storage) as store:
            store.add_evaluation(
                EvaluationRecord(
                    study_name=found.study,
                    candidate_key=key,
                    fidelity="int8",
                    status="ok",
                    trial_number=found.trial,
                    accuracy=result["accuracy"],
                    val_accuracy=result["val_accuracy"],
                    wall_time_s=result["wall_time_s"],
                    details=details,
                )
            )
    fresh = Int8Accuracy.of(result["val_accuracy"], result["accuracy"], details)
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
        "lr": accuracy.lr or None,  # 0.0: a measurement stored without its rate
        "schedule": accuracy.schedule,
        "epochs": accuracy.epochs,
        "batch_size": 1,
        "qas": accuracy.qas,
        "source": source,
    }
