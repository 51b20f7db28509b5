"""The device's accuracy of the front's points, measured at the end of a search.

The search ranks candidates by their float32 fine-tune; the bundle trains in int8 at batch 1
with QAS. With ``verify_int8`` a run finishes by training each point of the front as the device
does (:func:`tinytune.evaluators.device.int8_finetune`, through the run's workers), the
per-image rate of the first epoch chosen on validation from :data:`INT8_LRS` and halved after
every epoch (:data:`INT8_SCHEDULE`), and stores the result as an evaluation of fidelity
``int8`` beside the float32 one. A point measured so before (by an earlier run, or another
driver) is not trained again; one measured at a constant rate (before the rate could halve), or
with the weights at the biases' full rate (before
:data:`~tinytune.quant.schedule.WEIGHT_LR_SCALE`), is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinytune.db import EvaluationRecord, Store
from tinytune.evaluators import EvaluationResult, Int8Settings
from tinytune.quant.schedule import WEIGHT_LR_SCALE
from tinytune.spaces import Candidate

if TYPE_CHECKING:
    from tinytune.search.execution.worker_tasks import Tasks
    from tinytune.search.front.recording import FrontPoint

__all__ = [
    "INT8_EPOCHS",
    "INT8_LRS",
    "INT8_SCHEDULE",
    "Int8Accuracy",
    "int8_accuracies",
    "int8_settings",
    "verify_int8",
]

INT8_EPOCHS = 4
"""Epochs of the device's training over the whole training split (batch 1)."""

INT8_SCHEDULE = "halving"
"""The rate halves after every epoch, as the bundle's example does with ``tt_set_lr_halvings``
(the multipliers are constants of its code; only their shifts move). At a constant rate the
last epochs' steps stay as large as the first's: on digits the bias-only update reached 93.9 %
validation at the best constant rate and 97.2 % halving (docs/bench/device-accuracy.md)."""

INT8_LRS = (0.00625, 0.025, 0.1)
"""Per-image learning rates of the first epoch tried, a factor of four apart (the weights learn
at :data:`~tinytune.quant.schedule.WEIGHT_LR_SCALE` times them): EfficientNet-Lite0's sparse
update on an image folder does best at the smallest (on the symbols' best points it diverges
at 0.1, and at 0.025 at three seeds of five: docs/bench/accuracy-limit.md), the glyph
supernet's on digits at 0.025, bias-only and classifier-only at 0.1
(docs/bench/device-accuracy.md)."""


def int8_settings() -> Int8Settings:
    """The ``int8`` settings of an evaluation task that trains as the device does."""
    return Int8Settings(INT8_EPOCHS, INT8_LRS, schedule=INT8_SCHEDULE)


@dataclass(frozen=True)
class Int8Accuracy:
    """A point's accuracy when trained as the device trains it.

    Attributes:
        val_accuracy, test_accuracy: top-1 of the integer network after training.
        lr: the per-image rate (of the first epoch) validation chose.
        schedule: how the rate moved over the epochs
            (:data:`tinytune.quant.schedule.LR_SCHEDULES`).
        epochs: the passes over the training split at batch 1.
        qas: whether the integer updates were scaled by QAS (False: the ablation without).
        weight_lr_scale: the weights' fraction of the rate it trained at (1.0 for a measurement
            stored before the device's weights learned at
            :data:`~tinytune.quant.schedule.WEIGHT_LR_SCALE`).
    """

    val_accuracy: float
    test_accuracy: float
    lr: float
    schedule: str = "constant"
    epochs: int | None = None
    qas: bool = True
    weight_lr_scale: float = 1.0

    @property
    def current(self) -> bool:
        """Whether it trained as the bundle trains now: halving (:data:`INT8_SCHEDULE`), the
        weights at :data:`~tinytune.quant.schedule.WEIGHT_LR_SCALE` of the rate. Export and
        ``verify_int8`` measure again one that is not: a bundle no longer trains as it did."""
        return self.schedule == INT8_SCHEDULE and self.weight_lr_scale == WEIGHT_LR_SCALE

    @classmethod
    def of(
        cls, val_accuracy: float, test_accuracy: float, details: Mapping[str, Any]
    ) -> Int8Accuracy:
        """The accuracy of an ``int8`` evaluation, stored or just measured, with the
        ``details`` of its task (:func:`tinytune.evaluators.task.run_evaluation`): its rate,
        schedule, epochs and QAS."""
        return cls(
            val_accuracy,
            test_accuracy,
            details["lr"],
            details["schedule"],
            details["epochs"],
            details["qas"],
            details.get("weight_lr_scale", 1.0),
        )


def int8_accuracies(store: Store, study: str, keys: list[str]) -> dict[str, Int8Accuracy]:
    """The stored ``int8`` accuracies of the candidates ``keys`` that have one."""
    found = {}
    for key in keys:
        e = store.find_evaluation(study, key, "int8")
        if e is not None and e.val_accuracy is not None and e.accuracy is not None and e.details:
            found[key] = Int8Accuracy.of(e.val_accuracy, e.accuracy, e.details)
    return found


def verify_int8(
    tasks: Tasks, store: Store, study: str, points: tuple[FrontPoint, ...]
) -> tuple[int, float]:
    """Measure the device's accuracy of the ``points`` of the study ``study`` that have none
    stored under :data:`INT8_SCHEDULE`, on the run's executor (``tasks``). Schedule twins
    (one candidate under several patch schedules, which train alike) are trained once and
    each stored with the result; one whose twin was trained so before is stored from it.

    Returns:
        The trainings run here and their seconds, summed over workers.
    """
    stored = int8_accuracies(store, study, [p.candidate_key for p in points])
    # one measured otherwise than the bundle now trains (at a constant rate, before the rate
    # could halve; its weights at the full rate) is measured again, so that every point of the
    # front is trained alike
    todo = [
        p for p in points if p.candidate_key not in stored or not stored[p.candidate_key].current
    ]
    groups: dict[str, tuple[Candidate, list[FrontPoint]]] = {}
    for point in todo:
        record = store.get_candidate(point.candidate_key)
        assert record is not None
        candidate = Candidate.from_json(record.payload)
        groups.setdefault(candidate.training.key, (candidate, []))[1].append(point)
    # a twin's latest device accuracy, trained under the schedule (not the point's own)
    todo_keys = {p.candidate_key for p in todo}
    others = {e.candidate_key for e in store.evaluations(study, fidelity="int8", status="ok")}
    for key, measured in int8_accuracies(store, study, sorted(others - todo_keys)).items():
        trained = store.get_candidate(key)
        if trained is None or not measured.current:
            continue
        group = groups.pop(Candidate.from_json(trained.payload).training.key, None)
        e = store.find_evaluation(study, key, "int8")
        assert e is not None
        shared = EvaluationResult(
            "ok", e.accuracy, e.val_accuracy, wall_time_s=0.0, details=dict(e.details or {})
        )
        for point in group[1] if group is not None else ():
            store.add_evaluation(_record(study, point, shared))
    jobs: dict[int, list[FrontPoint]] = {}
    for candidate, group in groups.values():
        # the bundle's integer arithmetic runs on a CPU of any node
        task = tasks.task(candidate).replace(int8=int8_settings(), gpus=0.0)
        key = tasks.next_key()
        jobs[key] = group
        tasks.executor.submit(key, task)
    seconds, done = 0.0, 0
    tasks.emit("int8", done=0, total=len(jobs))
    while done < len(jobs):
        for key, result in tasks.executor.wait(timeout=1.0):
            seconds += result.wall_time_s
            for n, point in enumerate(jobs[key]):  # the twins after the first trained none
                shared = result if n == 0 else result.replace(wall_time_s=0.0)
                store.add_evaluation(_record(study, point, shared))
            done += 1
            tasks.emit("int8", done=done, total=len(jobs))
    return len(jobs), seconds


def _record(study: str, point: FrontPoint, result: EvaluationResult) -> EvaluationRecord:
    """The stored int8 measurement of ``point``."""
    return EvaluationRecord.of(
        study,
        point.candidate_key,
        "int8",
        result,
        trial_number=point.trial,
        memory_bytes=point.memory_bytes,
        latency_ms=1000.0 * point.latency_s if point.latency_s is not None else None,
        details=dict(result.details) if result.ok else None,
    )
