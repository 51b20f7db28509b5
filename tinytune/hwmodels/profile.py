"""A device's profile: what the hardware models assume about one device (its clock, SRAM,
flash, the precision to plan with, the engine that runs the step, and one
:class:`~tinytune.hwmodels.latency.LatencyCoefficients` entry per (op class, phase), with the
measurements behind them and their leave-one-out error), and its JSON form."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tinytune.errors import ConfigError
from tinytune.hwmodels.latency import FEATURES, LatencyCoefficients
from tinytune.hwmodels.memory import PRECISIONS

__all__ = ["ENGINES", "CalibrationPoint", "DeviceProfile", "check_number", "unnamed_engine"]


@dataclass(frozen=True)
class CalibrationPoint:
    """One anchor as the profile sees it, in seconds at the profile's clock.

    Attributes:
        model: the reference network; ``engine`` and ``board`` of the measurement.
        measured_s: the published latency converted to the profile's clock (its cycles ÷ the
            profile's clock).
        fitted_s: the profile's prediction, equal to ``predict_latency`` of the reference graph.
        loo_predicted_s: the prediction of a fit without this model's anchors (``None`` when
            nothing is left to fit on).
    """

    model: str
    engine: str
    board: str
    measured_s: float
    fitted_s: float
    loo_predicted_s: float | None

    def __post_init__(self) -> None:
        for name in ("model", "engine", "board"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(
                    f"calibration {name} must be a string, got {getattr(self, name)!r}"
                )
        check_number("calibration measured_s", self.measured_s, positive=True)
        check_number("calibration fitted_s", self.fitted_s)
        if self.loo_predicted_s is not None:
            check_number("calibration loo_predicted_s", self.loo_predicted_s)


_FIELDS = (
    "name", "description", "core", "clock_hz", "sram_bytes", "flash_bytes", "precision",
    "coefficients", "source", "calibration", "loo_median_error", "loo_within_10", "notes",
    "engine", "forced",
)  # fmt: skip
# profiles stored before engines were named have no engine; a profile that is not a forced
# calibration has no "forced"
_OPTIONAL = ("engine", "forced")

ENGINES: Mapping[str, str] = {
    "bundle": "tinytune's exported C kernels (int8, QAS), as `tinytune export` writes them",
    "published": "a typical optimised int8 inference engine, fitted on published latencies",
    "pytorch": "PyTorch eager, fp32",
}
"""The engines a profile can describe: what runs the training step."""


def unnamed_engine(name: str) -> str:
    """The engine of a profile stored before profiles named one: what device ``name``'s
    profile then described, PyTorch for ``host``, else the published engine."""
    return "pytorch" if name == "host" else "published"


_POINT_FIELDS = ("model", "engine", "board", "measured_s", "fitted_s", "loo_predicted_s")


@dataclass(frozen=True)
class DeviceProfile:
    """What the hardware models assume about one device.

    Attributes:
        name: the registry name; ``description`` one line for people.
        core: the CPU core; ``clock_hz`` its clock.
        sram_bytes: working memory available to the training step; ``flash_bytes`` storage.
        precision: ``int8`` or ``fp32``, what the latency model and the memory planner assume.
        coefficients: seconds per feature unit of every (op class, phase).
        source: one line of provenance for the calibration data.
        calibration: the anchors the coefficients were fitted on.
        loo_median_error, loo_within_10: leave-one-model-out median |relative error| and share
            within ±10 % (``None`` when not computable).
        notes: what is assumed rather than measured.
        engine: what runs the step (:data:`ENGINES`).
        forced: a calibration stored with ``--force`` although its held-out error missed the
            accuracy a profile needs (``tinytune calibrate``); its predictions are not to be
            trusted as the others'.
    """

    name: str
    description: str
    core: str
    clock_hz: float
    sram_bytes: int
    flash_bytes: int
    precision: str
    coefficients: LatencyCoefficients
    source: str
    # every anchor, left out of the repr (a profile printed is a few lines, not 20 KB)
    calibration: tuple[CalibrationPoint, ...] = field(default=(), repr=False)
    loo_median_error: float | None = None
    loo_within_10: float | None = None
    notes: str = ""
    engine: str = "published"
    forced: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.forced, bool):
            raise ConfigError(f"device forced must be True or False, got {self.forced!r}")
        if self.engine not in ENGINES:
            raise ConfigError(
                f"unknown engine {self.engine!r}; known engines: {', '.join(sorted(ENGINES))}"
            )
        for name in ("name", "description", "core", "source", "notes"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"device {name} must be a string, got {getattr(self, name)!r}")
        if not self.name:
            raise ConfigError("device name must not be empty")
        check_number("device clock_hz", self.clock_hz, positive=True)
        for name in ("sram_bytes", "flash_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"device {name} must be an integer > 0, got {v!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"device precision must be one of {sorted(PRECISIONS)}, got {self.precision!r}"
            )
        if not isinstance(self.coefficients, LatencyCoefficients):
            raise ConfigError(
                f"device coefficients must be LatencyCoefficients, got {self.coefficients!r}"
            )
        if not isinstance(self.calibration, tuple) or not all(
            isinstance(p, CalibrationPoint) for p in self.calibration
        ):
            raise ConfigError("device calibration must be a tuple of CalibrationPoint")
        for name in ("loo_median_error", "loo_within_10"):
            v = getattr(self, name)
            if v is not None:
                check_number(f"device {name}", v)
                if v < 0 or (name == "loo_within_10" and v > 1):
                    raise ConfigError(f"device {name} must be a fraction >= 0, got {v!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` is its exact inverse."""
        return {
            "name": self.name,
            "description": self.description,
            "core": self.core,
            "clock_hz": self.clock_hz,
            "sram_bytes": self.sram_bytes,
            "flash_bytes": self.flash_bytes,
            "precision": self.precision,
            "coefficients": self.coefficients.to_dict(),
            "source": self.source,
            "calibration": [{f: getattr(p, f) for f in _POINT_FIELDS} for p in self.calibration],
            "loo_median_error": self.loo_median_error,
            "loo_within_10": self.loo_within_10,
            "notes": self.notes,
            "engine": self.engine,
        } | ({"forced": True} if self.forced else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceProfile:
        """Parse :meth:`to_dict`'s output.

        Raises:
            ConfigError: not an object, unknown or missing keys, or a value of the wrong type.
        """
        _check_keys("device profile", data, _FIELDS, optional=_OPTIONAL)
        calibration = data["calibration"]
        if not isinstance(calibration, list | tuple):
            raise ConfigError(f"device calibration must be a list of points, got {calibration!r}")
        points = []
        for p in calibration:
            _check_keys("calibration point", p, _POINT_FIELDS)
            points.append(CalibrationPoint(**{f: p[f] for f in _POINT_FIELDS}))
        coefficients = data["coefficients"]
        if not isinstance(coefficients, dict) or not all(
            isinstance(ph, dict) and all(isinstance(v, list | tuple) for v in ph.values())
            for ph in coefficients.values()
        ):
            raise ConfigError(
                "device coefficients must map op class -> phase -> a list of "
                f"{len(FEATURES)} numbers {FEATURES}"
            )
        try:
            coef = LatencyCoefficients.from_dict(coefficients)
        except ConfigError:
            raise
        except (TypeError, ValueError) as e:
            raise ConfigError(f"device coefficients must be numbers {FEATURES}: {e}") from e
        fields = {
            f: data[f] for f in _FIELDS if f not in ("coefficients", "calibration", *_OPTIONAL)
        }
        engine = data.get("engine", unnamed_engine(str(data["name"])))
        forced = data.get("forced", False)
        return cls(
            **fields, coefficients=coef, calibration=tuple(points), engine=engine, forced=forced
        )


def _check_keys(
    what: str, data: Any, allowed: Sequence[str], optional: Sequence[str] = ()
) -> None:
    if not isinstance(data, Mapping):
        raise ConfigError(f"a {what} must be a JSON object, got {data!r}")
    unknown = sorted(set(data) - set(allowed))
    missing = [k for k in allowed if k not in data and k not in optional]
    if unknown:
        raise ConfigError(f"unknown keys {unknown} in a {what}; allowed: {list(allowed)}")
    if missing:
        raise ConfigError(f"missing keys {missing} in a {what}; required: {list(allowed)}")


def check_number(what: str, v: Any, *, positive: bool = False) -> None:
    """Refuse ``v`` unless it is a finite number (``positive``: above 0), naming ``what``."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or (positive and v <= 0):
        raise ConfigError(f"{what} must be a finite number{' > 0' if positive else ''}, got {v!r}")
