"""Execution: the executors that run fine-tunes inline or on Ray, the files they carry to Ray
nodes that share no file system, and the worker tasks a run submits besides its trials."""

from __future__ import annotations

from tinytune.search.execution.executor import (
    Executor,
    InlineExecutor,
    RayExecutor,
    RayUnavailableError,
    check_reachable,
)

__all__ = [
    "Executor",
    "InlineExecutor",
    "RayExecutor",
    "RayUnavailableError",
    "check_reachable",
]
