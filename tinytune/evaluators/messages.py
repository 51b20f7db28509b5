"""The messages between the search and its workers: the task that fine-tunes a candidate and
the result that comes back. A worker gets a :class:`FinetuneTask` and returns an
:class:`EvaluationResult`; both cross to Ray workers as they are (pickled between tinytune's own
processes), and a result's :attr:`~EvaluationResult.details` is what the database stores."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tinytune.evaluators.finetune import FinetuneConfig

__all__ = ["EvaluationResult", "FinetuneTask", "Int8Settings"]


@dataclass(frozen=True)
class Int8Settings:
    """How a task trains as the device does (int8, batch 1, QAS): the epochs, the per-image
    rates of the first epoch tried (the one validation chooses is reported), whether the
    updates are scaled by QAS, and how the rate moves over the epochs
    (:data:`tinytune.quant.schedule.LR_SCHEDULES`)."""

    epochs: int
    lrs: tuple[float, ...]
    qas: bool = True
    schedule: str = "constant"


@dataclass(frozen=True)
class FinetuneTask:
    """One evaluation a worker runs (:func:`tinytune.evaluators.run_evaluation`).

    Attributes:
        candidate: the candidate's JSON (:meth:`tinytune.spaces.Candidate.to_json`).
        checkpoint: the weights' path.
        dataset: the data set's spec (``digits``, ``imagefolder:PATH``, ...).
        data_seed: the seed of its splits.
        finetune: how it is fine-tuned.
        repeats: measured on that many train/val partitions (:func:`tinytune.data.repeated`;
            the test split fixed), the means reported.
        threads: torch's intra-op threads.
        gpus: the share of a GPU the task asks Ray for (0: CPUs).
        train_fraction: trained on that stratified share of the training images
            (:func:`tinytune.data.train_subset`; the validation and test splits whole).
        int8: trained as the device trains it instead of in float32.
    """

    candidate: str
    checkpoint: str | None
    dataset: str
    data_seed: int
    finetune: FinetuneConfig
    repeats: int = 1
    threads: int = 1
    gpus: float = 0.0
    train_fraction: float = 1.0
    int8: Int8Settings | None = None

    def replace(self, **changes: Any) -> FinetuneTask:
        """The same task with ``changes``."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class EvaluationResult:
    """What a worker hands back.

    Attributes:
        status: ``ok`` or ``failed``.
        accuracy: top-1 on the test split (reported, never used to choose).
        val_accuracy: top-1 on the validation split (what the search chooses on).
        wall_time_s: the task's seconds inside its worker.
        error: a failure's first line.
        details: what the database keeps beside the accuracies: the rate, the epochs trained
            (``train_epochs``: passes over the whole training split, summed over the repeats,
            the compute a search counts), where it ran (``device``, ``gpu``), and for a failure
            its short traceback.
    """

    status: str
    accuracy: float | None = None
    val_accuracy: float | None = None
    wall_time_s: float = 0.0
    error: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether it measured both accuracies."""
        return (
            self.status == "ok"
            and isinstance(self.accuracy, float)
            and isinstance(self.val_accuracy, float)
        )

    @property
    def train_epochs(self) -> float:
        """The epochs it trained, in passes over the whole training split."""
        return float(self.details.get("train_epochs") or 0.0)

    @classmethod
    def failed(
        cls, error: str, wall_time_s: float = 0.0, details: Mapping[str, Any] | None = None
    ) -> EvaluationResult:
        """A result that measured nothing, for ``error``."""
        return cls("failed", wall_time_s=wall_time_s, error=error, details=dict(details or {}))

    def replace(self, **changes: Any) -> EvaluationResult:
        """The same result with ``changes``."""
        return dataclasses.replace(self, **changes)

    def error_or(self, default: str = "unknown failure") -> str:
        """The error, or ``default`` where a failure gave none."""
        return str(self.error or default)
