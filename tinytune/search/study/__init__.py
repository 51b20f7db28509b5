"""The study: the Optuna adapter a driver works on, the names of its trials' attributes, its
storage (which rides out a database restart), the heartbeats of running trials, and the search
space a study stores with the checks of a run's space against it."""

from __future__ import annotations

from typing import Any

from tinytune.search.study.adapter import StudyAdapter, check_stored_space
from tinytune.search.study.attrs import Attr
from tinytune.search.study.study_space import FinetuneSettings, StudySpace

__all__ = [
    "Attr",
    "FinetuneSettings",
    "ReconnectingStorage",
    "StudyAdapter",
    "StudySpace",
    "check_stored_space",
]


def __getattr__(name: str) -> Any:  # the storage imports Optuna: only when it is asked for
    if name == "ReconnectingStorage":
        from tinytune.search.study.storage import ReconnectingStorage

        return ReconnectingStorage
    raise AttributeError(f"module 'tinytune.search.study' has no attribute {name!r}")
