"""What a study stores of the search that made it: :class:`StudySpace` (its user attribute
``tinytune.space``), with how it measures its candidates (:class:`FinetuneSettings`), written
from a :class:`~tinytune.search.config.SearchConfig` and read back typed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tinytune.evaluators import HardwareConfig
from tinytune.options import (
    AUTO_REPEATS,
    DEFAULT_DATASET,
    DEFAULT_DEVICE,
    PER_FAMILY,
    SEARCH_OPTIONS,
    Option,
)
from tinytune.search.config.search_config import OBJECTIVES, SearchConfig

__all__ = [
    "AUTO_REPEATS",
    "PER_FAMILY",
    "FinetuneSettings",
    "StudySpace",
]


class FinetuneSettings:
    """How a study measures its candidates, as its space stores it: the value of every option
    of :data:`~tinytune.options.SEARCH_OPTIONS` marked ``stored`` (epochs, batch size, weight
    decay; the learning rate, None for each scheme family's, stored as :data:`PER_FAMILY`; the
    repeats, None for as many as the validation split needs, stored as :data:`AUTO_REPEATS`),
    by option name. Declaring an option ``stored`` is all it takes to be here.

    Made by keyword (``FinetuneSettings(epochs=8, ...)``, an option not given at its default)
    or from a configuration (:meth:`from_config`); read as attributes."""

    __slots__ = ("_values",)

    def __init__(self, **values: Any) -> None:
        options = _stored_options()
        unknown = sorted(set(values) - {o.name for o in options})
        if unknown:
            raise TypeError(f"FinetuneSettings got unknown settings {unknown}")
        object.__setattr__(
            self,
            "_values",
            tuple((o.name, values.get(o.name, o.parsed_default)) for o in options),
        )

    def __getattr__(self, name: str) -> Any:
        for key, value in object.__getattribute__(self, "_values"):
            if key == name:
                return value
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FinetuneSettings is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FinetuneSettings) and self._values == other._values

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"FinetuneSettings({', '.join(f'{k}={v!r}' for k, v in self._values)})"

    @classmethod
    def from_config(cls, config: SearchConfig) -> FinetuneSettings:
        """The settings a search of ``config`` measures with."""
        return cls(**{o.name: o.stored_value(config) for o in _stored_options()})

    def to_attrs(self) -> dict[str, Any]:
        """The settings as the study stores them (JSON)."""
        return {
            o.name: o.stored_none if value is None and o.stored_none else value
            for o, (_, value) in zip(_stored_options(), self._values, strict=True)
        }

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> FinetuneSettings:
        """The settings a study stored (:meth:`to_attrs`)."""
        values = {}
        for o in _stored_options():
            value = attrs.get(o.name, o.stored_absent)
            values[o.name] = (
                None if o.stored_none is not None and value == o.stored_none else value
            )
        return cls(**values)


def _stored_options() -> tuple[Option, ...]:
    return tuple(o for o in SEARCH_OPTIONS if o.stored)


@dataclass(frozen=True)
class StudySpace:
    """What a study stores of the search that made it (its user attribute ``tinytune.space``):
    what is searched, for which device, and how a candidate's accuracy is measured. A run that
    continues a study must ask for the same space.

    :meth:`from_attrs` reads it back, and a study with no space at all (a candidate found in
    no study) as the defaults of a search with ``supernet`` None.

    Attributes:
        supernet: the network searched; None where no space is stored.
        dataset, data_seed: the data set and the seed of its splits.
        preset: the update scheme fixed by a preset, or None (searched).
        precision, batch_size, update: how the device trains (:class:`HardwareConfig`).
        device: the device the latency and budgets are of.
        engine: what its latency objective predicts (None: not resolved yet).
        objectives: the study's objectives, in Optuna's order.
        weights: the SHA-256 of the supernet weights it searched with (None: not recorded).
        finetune: how candidates are measured (None: not recorded).
    """

    supernet: str | None
    dataset: str = DEFAULT_DATASET
    data_seed: int = 0
    preset: str | None = None
    precision: str = HardwareConfig.precision
    batch_size: int = HardwareConfig.batch_size
    update: str = HardwareConfig.update
    device: str = DEFAULT_DEVICE
    engine: str | None = None
    objectives: tuple[str, ...] = OBJECTIVES
    weights: str | None = None
    finetune: FinetuneSettings | None = None

    @classmethod
    def from_config(cls, config: SearchConfig) -> StudySpace:
        """The space a search of ``config`` stores: what makes two runs the same search space,
        so that the front never ranks fine-tunes of different weights or settings against each
        other (``weights``: the SHA-256 of its checkpoint, where that is a file; ``finetune``:
        epochs, batch size, the learning rate or ``per family``, the repeats or ``auto``)."""
        from pathlib import Path

        from tinytune.hashing import sha256_file

        weights = Path(config.checkpoint) if config.checkpoint else None
        return cls(
            supernet=config.supernet,
            dataset=config.dataset,
            data_seed=config.data_seed,
            preset=config.preset,
            precision=config.hardware.precision,
            batch_size=config.hardware.batch_size,
            update=config.hardware.update,
            device=config.device,
            engine=config.engine,
            objectives=OBJECTIVES,
            weights=sha256_file(weights) if weights and weights.is_file() else None,
            finetune=FinetuneSettings.from_config(config),
        )

    def to_attrs(self) -> dict[str, Any]:
        """The space as the study stores it (JSON); :meth:`from_attrs` reads it back."""
        return {
            "supernet": self.supernet,
            "dataset": self.dataset,
            "data_seed": self.data_seed,
            "preset": self.preset,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "update": self.update,
            "device": self.device,
            "engine": self.engine,
            "objectives": list(self.objectives),
            "weights": self.weights,
            "finetune": None if self.finetune is None else self.finetune.to_attrs(),
        }

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any] | None) -> StudySpace:
        """The space a study stored (None or ``{}``: none, read as the defaults)."""
        attrs = attrs or {}
        finetune = attrs.get("finetune")
        return cls(
            supernet=attrs.get("supernet"),
            dataset=attrs.get("dataset", cls.dataset),
            data_seed=attrs.get("data_seed", cls.data_seed),
            preset=attrs.get("preset"),
            precision=attrs.get("precision", cls.precision),
            batch_size=attrs.get("batch_size", cls.batch_size),
            update=attrs.get("update", cls.update),
            device=attrs.get("device", DEFAULT_DEVICE),
            engine=attrs.get("engine"),
            objectives=tuple(attrs.get("objectives", OBJECTIVES)),
            weights=attrs.get("weights"),
            finetune=FinetuneSettings.from_attrs(finetune) if isinstance(finetune, dict) else None,
        )
