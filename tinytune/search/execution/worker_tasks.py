"""Worker tasks: the task that fine-tunes a candidate as a study measures it, and what a helper
of the run needs to run tasks of its own.

The learning-rate grid (:mod:`tinytune.search.run.lr_grid`), the contribution analysis of the proxy
ladder (:mod:`tinytune.search.ladder.proxy_rung`) and the int8 verification of the front
(:mod:`tinytune.search.run.verify_int8`) each run worker tasks on the run's executor beside its
trials. They take :class:`Tasks`, the four things they use of the run, rather than the run itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tinytune.evaluators import FinetuneTask
from tinytune.search.config.search_config import SearchConfig
from tinytune.search.execution.executor import Executor
from tinytune.spaces import Candidate

__all__ = ["Emit", "MakeTask", "Tasks", "finetune_task"]


def finetune_task(
    config: SearchConfig, repeats: int, candidate: Candidate, lr: float
) -> FinetuneTask:
    """The worker's task that fine-tunes ``candidate`` at rate ``lr`` as the
    study measures it: its weights, data set and fine-tuning settings, on ``repeats``
    train/validation partitions, one thread, and the share of a GPU it asks Ray for. The
    candidate goes on whole images: how the device schedules its frozen prefix (patch by
    patch or not) changes no value it computes, so candidates that differ only there are the
    same fine-tune."""
    finetune = dataclasses.replace(config.finetune, lr=lr)
    return FinetuneTask(
        candidate=candidate.training.to_json(),
        checkpoint=config.checkpoint,
        dataset=config.dataset,
        data_seed=config.data_seed,
        finetune=finetune,
        repeats=repeats,
        threads=1,
        gpus=config.gpus_per_trial,
    )


class MakeTask(Protocol):
    """The task that fine-tunes a candidate as the study measures it, at ``lr`` or, when it
    is None, at the rate of the candidate's family."""

    def __call__(self, candidate: Candidate, lr: float | None = None) -> FinetuneTask: ...


class Emit(Protocol):
    """Emit a progress event of the run: its kind, then its fields (``done``, ``total``, ...;
    :class:`tinytune.search.run.events.SearchEvent`)."""

    def __call__(self, kind: str, /, **data: Any) -> None: ...


@dataclass(frozen=True)
class Tasks:
    """What a helper that runs worker tasks of its own uses of the run.

    Attributes:
        executor: the run's executor (it counts the epochs of every task as the run's compute).
        task: the worker's task that fine-tunes a candidate as the study measures it.
        next_key: a key for a task that is not a trial (negative, unique in the run).
        emit: a progress event of the run.
    """

    executor: Executor
    task: MakeTask
    next_key: Callable[[], int]
    emit: Emit
