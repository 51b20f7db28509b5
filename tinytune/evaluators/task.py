"""One evaluation, the unit of work a Ray worker runs.

The worker receives a :class:`~tinytune.evaluators.messages.FinetuneTask` (candidate JSON,
checkpoint path, data set, settings) and returns an
:class:`~tinytune.evaluators.messages.EvaluationResult`. It never touches the database, and it
measures accuracy only: the driver priced the candidate's hardware cost before sending it. A
failure inside the evaluation is returned as a result with ``status="failed"`` and the error
text, so that the search stores it instead of losing it.
The loaded supernet and data splits are cached per worker process, keyed by what identifies
them (path and modification time; data set, seed and resolution); so are the data set itself
(an image folder is listed and hashed once per process) and its images on the device a
fine-tune runs on (:class:`~tinytune.evaluators.finetune.DeviceData`: moved there once per
process, data set, resolution and device; on the CPU a view of the memory-mapped decoded
images, shared by every worker). An image folder's frozen-prefix outputs are kept on disk for
every fine-tune, worker and run that shares the prefix
(:class:`~tinytune.evaluators.prefixes.PrefixStore`).
An fp32 fine-tune runs on the GPU that Ray gave its task (``gpus``: the share of a device it
asked for), else on the CPU; the int8 measurement always runs on the CPU, being the
bundle's integer arithmetic.
"""

from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tinytune.data import ImageDataset, Splits, get_dataset, repeated, train_subset
from tinytune.errors import TinyTuneError
from tinytune.evaluators.finetune import DeviceData, finetune
from tinytune.evaluators.messages import EvaluationResult, FinetuneTask, Int8Settings
from tinytune.evaluators.prefixes import PrefixStore
from tinytune.models import GraphNet, build_candidate, load_supernet
from tinytune.quant.schedule import WEIGHT_LR_SCALE
from tinytune.spaces import Candidate, get_supernet
from tinytune.units import MAX_SEED

if TYPE_CHECKING:
    from tinytune.evaluators.device import Int8Progress, TrainingProgress

__all__ = ["CALIBRATION_SAMPLES", "network_on_data", "run_evaluation", "task_device"]

log = logging.getLogger(__name__)

CALIBRATION_SAMPLES = 256
_supernets: dict[tuple[str, float], torch.nn.Module] = {}
_datasets: dict[tuple[str, int], ImageDataset] = {}
_splits: dict[tuple[str, int, int], tuple[Splits, int]] = {}
_on_device = DeviceData()
_prefixes = PrefixStore()


def _supernet(name: str, path: str) -> torch.nn.Module:
    key = (path, Path(path).stat().st_mtime)
    if key not in _supernets:
        _supernets.clear()
        _supernets[key] = load_supernet(get_supernet(name), Path(path))
    return _supernets[key]


def _data(spec: str, seed: int, resolution: int) -> tuple[Splits, int]:
    """The splits and number of classes of a data set, kept per process (an image folder is
    listed and its files hashed once, not once per evaluation)."""
    key = (spec, seed, resolution)
    if key not in _splits:
        dataset = _datasets.get((spec, seed))
        if dataset is None:
            dataset = _datasets.setdefault((spec, seed), get_dataset(spec, seed=seed))
        _splits[key] = dataset.load(resolution), dataset.num_classes
    return _splits[key]


def task_device(gpus: float) -> str:
    """Where a task given ``gpus`` of a GPU fine-tunes: ``cuda`` when it was given a share of
    one and this process sees one (Ray makes its GPU the task's ``cuda:0``), else ``cpu``."""
    return "cuda" if gpus > 0 and torch.cuda.is_available() else "cpu"


def _device_details(device: str) -> dict[str, str]:
    """The device a fine-tune ran on, as stored with its evaluation."""
    if device == "cpu":
        return {"device": "cpu"}
    index = torch.cuda.current_device()
    return {"device": f"cuda:{index}", "gpu": torch.cuda.get_device_name(index)}


def network_on_data(
    candidate: Candidate, supernet: torch.nn.Module, splits: Splits, n_classes: int, seed: int
) -> tuple[GraphNet, tuple[torch.Tensor, ...]]:
    """The candidate's trainable network on its data, as the search, the int8 fidelity and
    the exporter all build it: BatchNorm statistics re-estimated on the first
    :data:`CALIBRATION_SAMPLES` training images (batches of 64) and folded, a new classifier
    seeded by ``seed``. Returns the network and those calibration batches (int8 quantization
    calibrates on the same images)."""
    calib = torch.tensor(splits.train.x[:CALIBRATION_SAMPLES]).split(64)
    return build_candidate(candidate, supernet, n_classes, calib, seed=seed), calib


def run_evaluation(task: FinetuneTask, progress: Int8Progress | None = None) -> EvaluationResult:
    """Fine-tune one candidate and measure its accuracy (with ``task.int8``: as the device
    trains it).

    Args:
        progress: with ``task.int8``, called after each training image with the epochs and
            images done of the whole measurement (every rate and partition); the fp32
            fidelities do not report. A local caller's hook: a task sent to a Ray worker has
            none.
    """
    start = time.perf_counter()
    torch.set_num_threads(task.threads)
    if task.int8 is not None:
        return _int8_evaluation(task, task.int8, start, progress)
    try:
        # what is trained: the device's schedule of the frozen prefix changes no value
        candidate = Candidate.from_json(task.candidate).training
        cfg = task.finetune
        splits, n_classes = _data(task.dataset, task.data_seed, candidate.subnet.resolution)
        supernet = _supernet(candidate.supernet, str(task.checkpoint))
        device = task_device(task.gpus)
        results, passes = [], 0.0
        for r in range(task.repeats):  # repeated train/val partitions for small validation splits
            part = repeated(splits, r, task.data_seed)
            whole = len(part.train)
            part = train_subset(part, task.train_fraction, (cfg.seed + r) % (MAX_SEED + 1))
            net, _ = network_on_data(candidate, supernet, part, n_classes, cfg.seed)
            results.append(finetune(net, part, cfg, device, _on_device, _prefixes))
            passes += cfg.epochs * len(part.train) / whole
    except (TinyTuneError, RuntimeError, ValueError, KeyError) as e:
        return _failed(e, start, "evaluation")
    details: dict[str, Any] = {
        "lr": cfg.lr,
        "epochs": cfg.epochs,
        "train_loss": float(np.mean([r.train_loss for r in results])),
        "finetune_s": sum(r.wall_time_s for r in results),
        "prefix_s": sum(r.prefix_s for r in results),
        "prefix_computed": any(r.prefix_computed for r in results),
        "steps": sum(r.steps for r in results),
        "train_epochs": passes,
        **_device_details(device),
    }
    if task.train_fraction < 1.0:
        details["train_fraction"] = task.train_fraction
    if task.repeats > 1:
        details["repeats"] = task.repeats
        details["val_accuracies"] = [r.val_accuracy for r in results]
        details["test_accuracies"] = [r.accuracy for r in results]
    return EvaluationResult(
        "ok",
        accuracy=float(np.mean([r.accuracy for r in results])),
        val_accuracy=float(np.mean([r.val_accuracy for r in results])),
        wall_time_s=time.perf_counter() - start,
        details=details,
    )


def _failed(e: Exception, start: float, what: str) -> EvaluationResult:
    """The result of an evaluation that raised ``e``: logged, with a short traceback."""
    log.warning("%s failed: %s", what, e)
    return EvaluationResult.failed(
        f"{type(e).__name__}: {e}",
        time.perf_counter() - start,
        {"traceback": traceback.format_exc(limit=5)},
    )


def _int8_evaluation(
    task: FinetuneTask,
    settings: Int8Settings,
    start: float,
    progress: Int8Progress | None = None,
) -> EvaluationResult:
    """The device's accuracy (:func:`tinytune.evaluators.device.int8_finetune`): quantized as
    the exporter quantizes, trained at each rate of ``settings.lrs`` for ``settings.epochs``
    epochs at batch 1, the rate chosen on validation; with ``repeats``, on the same
    train/validation partitions as the fp32 measurement, the means reported. ``progress``
    hears of every image of every run, counted over the whole measurement."""
    from tinytune.evaluators.device import int8_finetune
    from tinytune.quant import quantize

    try:
        candidate = Candidate.from_json(task.candidate).training
        seed = task.finetune.seed
        splits, n_classes = _data(task.dataset, task.data_seed, candidate.subnet.resolution)
        supernet = _supernet(candidate.supernet, str(task.checkpoint))
        runs: dict[float, list[tuple[float, float]]] = {float(lr): [] for lr in settings.lrs}
        n_runs = task.repeats * len(runs)  # each partition keeps the training split's size
        for rep in range(task.repeats):  # the same partitions as the fp32 measurement
            part = repeated(splits, rep, task.data_seed)
            net, calib = network_on_data(candidate, supernet, part, n_classes, seed)
            base = quantize(net, calib)
            for i, lr in enumerate(runs):
                r = int8_finetune(
                    base.clone(),
                    part,
                    epochs=settings.epochs,
                    lr=lr,
                    qas=settings.qas,
                    seed=seed,
                    schedule=settings.schedule,
                    progress=_of_all(progress, rep * len(runs) + i, n_runs),
                )
                runs[lr].append((r.val_accuracy, r.accuracy))
        tried = [
            {
                "lr": lr,
                "val": float(np.mean([v for v, _ in accs])),
                "test": float(np.mean([t for _, t in accs])),
            }
            for lr, accs in runs.items()
        ]
    except (TinyTuneError, RuntimeError, ValueError, KeyError) as e:
        return _failed(e, start, "int8 evaluation")
    best = max(tried, key=lambda t: t["val"])  # the first of equals: the smaller rate
    return EvaluationResult(
        "ok",
        accuracy=best["test"],
        val_accuracy=best["val"],
        wall_time_s=time.perf_counter() - start,
        details={
            "lr": best["lr"],
            "epochs": settings.epochs,
            "batch_size": 1,
            "qas": settings.qas,
            "weight_lr_scale": WEIGHT_LR_SCALE,
            "schedule": settings.schedule,
            "tried": tried,
            "repeats": task.repeats,
            "train_epochs": settings.epochs * len(tried) * task.repeats,
            "device": "cpu",
        },
    )


def _of_all(progress: Int8Progress | None, run: int, runs: int) -> Int8Progress | None:
    """``progress`` told of one run (of ``runs`` of equal length, this the ``run``-th from 0)
    as counts over all of them."""
    if progress is None:
        return None
    from tinytune.evaluators.device import TrainingProgress

    def report(p: TrainingProgress) -> None:
        progress(
            TrainingProgress(
                run * p.epochs + p.epochs_done,
                runs * p.epochs,
                run * p.images + p.images_done,
                runs * p.images,
            )
        )

    return report
