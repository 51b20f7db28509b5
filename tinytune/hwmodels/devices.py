"""Device profiles: latency coefficients calibrated on published measurements.

A :class:`DeviceProfile` holds what the hardware models assume about a device: its clock, SRAM,
flash, the precision to plan with, and one :class:`~tinytune.hwmodels.latency.LatencyCoefficients`
entry per (op class, phase), with the calibration behind them and its leave-one-out error.

Calibration (:func:`fit_profile`). What is published are whole-model inference latencies
(:mod:`.anchors`), so per-op coefficients are fitted across models. The cycles of one inference
are modelled as

    cycles = s_mac · Σ_ops rel[class] · MACs  +  s_elem · Σ_ops output elements  +  s_op · n_ops

where ``rel`` is a prior of relative cycles per MAC of each op class
(:data:`PRIOR_CYCLES_PER_MAC`) and the three scales s ≥ 0 are fitted by non-negative least
squares on relative error (``scipy.optimize.nnls``; rows divided by the measured cycles, so that
small and large networks weigh alike). Working in cycles lets a sibling part of the same core
at another clock contribute: cycles are assumed not to depend on the clock, which ignores flash
wait states and memory-bus ratios that do change with it. The scales become seconds per unit at
the profile's clock; the bytes coefficient is 0.

The prior (``reference/hw-measurements.md`` §1h, §3: per-layer medians of AtomDB,
``AnonymousAtomNet/AtomNet`` @788e2f9, STM32H743 @400 MHz, X-CUBE-AI 7.2.0), in cycles per
``op.macs`` unit:

* pointwise 1.04 and depthwise 4.70 cycles/MAC (medians over 21,785 and 6,689 layers);
* k×k convolution: 1.04, the pointwise figure, *not* AtomDB's 2.24. A k×k convolution runs
  im2col and then the same int8 matrix-multiply loop as a 1×1 one; the im2col copy costs per
  MAC / C_out, little once C_out ≥ 16. The 2.24 median comes from only 177 layers spread over
  0.96–2.90, and every engine's ResNet-8 (97 % 3×3 convolution) runs at 1.0–1.2 cycles/MAC
  whole-model (§1c, §3). With 2.24 the leave-one-model-out median error is 70 % on the F746
  profile and 44 % on the nRF52840 profile, against 8 % and 12 % with 1.04. Because the ResNet-8
  measurements are also calibration data, those leave-one-out figures are slightly optimistic
  for this choice. :data:`ATOMDB_M7_CYCLES_PER_MAC` keeps the published medians;
* linear: 1.57, AtomDB's pointwise median for outputs under 16 pixels (a linear layer is a
  pointwise convolution on one pixel, and it reads each weight once);
* element-wise (add, pooling, …): 35 cycles per ``op.macs`` unit (one per output element of
  an addition, one per element read by pooling), AtomDB's element-wise median per output
  element.

Training. No per-op training measurements of a microcontroller are published, so the backward
phases are assumed, not measured. ``grad_input`` and ``grad_weight`` take the forward
coefficients of the same class, because a transposed or weight-gradient convolution runs the
same inner loop over the same MACs. The update phase costs what an element-wise op costs per
element and per op.

Leave-one-out. Each profile holds out every anchor of one reference model at a time (the same
network measured with several engines would otherwise predict itself), refits, and predicts the
held-out anchors. ``loo_median_error`` is the median |predicted / measured − 1| over the anchors
and ``loo_within_10`` the share within ±10 % (nn-Meter's metric). They are ``None`` when there
is a single model.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinytune.errors import ConfigError
from tinytune.hwmodels.anchors import ANCHORS, MLPERF_TINY_COMMITS, Anchor
from tinytune.hwmodels.latency import FEATURES, OP_CLASSES, LatencyCoefficients, op_class
from tinytune.hwmodels.memory import PRECISIONS
from tinytune.hwmodels.reference_models import build_reference
from tinytune.ir import Graph

__all__ = [
    "ATOMDB_M7_CYCLES_PER_MAC",
    "ENGINES",
    "PRIOR_CYCLES_PER_MAC",
    "CalibrationPoint",
    "CycleScales",
    "DeviceProfile",
    "ProfileFit",
    "builtin_boards",
    "builtin_profiles",
    "coefficients_from_scales",
    "cycle_features",
    "fit_profile",
    "fit_scales",
    "leave_one_out",
    "loo_summary",
    "unnamed_engine",
]

ATOMDB_M7_CYCLES_PER_MAC: Mapping[str, float] = {
    "conv_pw": 1.04,
    "conv_dw": 4.70,
    "conv_kxk": 2.24,
    "linear": 1.57,
    "elementwise": 35.0,
}
PRIOR_CYCLES_PER_MAC: Mapping[str, float] = {**ATOMDB_M7_CYCLES_PER_MAC, "conv_kxk": 1.04}


def _check_prior(prior: Mapping[str, float]) -> None:
    if set(prior) != set(OP_CLASSES):
        raise ConfigError(
            f"a prior needs one value per op class {OP_CLASSES}, got {sorted(prior)}"
        )
    for cls, v in prior.items():
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            raise ConfigError(f"prior cycles per MAC of {cls} must be >= 0, got {v!r}")


def cycle_features(graph: Graph, prior: Mapping[str, float]) -> np.ndarray:
    """The three features of the cycle model: Σ rel[class]·MACs, Σ output elements, op count."""
    weighted = sum(prior[op_class(op)] * op.macs for op in graph.ops)
    elements = sum(graph.tensors[op.output].numel for op in graph.ops)
    return np.array([weighted, elements, len(graph.ops)], dtype=float)


def fit_scales(features: np.ndarray, cycles: np.ndarray) -> np.ndarray:
    """Non-negative scales s minimising Σ_i (features_i · s / cycles_i − 1)².

    Columns are scaled to unit norm before the solve; a column that is zero on every row gets
    scale 0. With no rows the scales are NaN.
    """
    from scipy.optimize import nnls

    features = np.asarray(features, dtype=float)
    cycles = np.asarray(cycles, dtype=float)
    scales = np.zeros(features.shape[1])
    if len(cycles) == 0:
        return np.full(features.shape[1], np.nan)
    a = features / cycles[:, None]
    norms = np.linalg.norm(a, axis=0)
    used = norms > 0
    if used.any():
        sol = nnls(a[:, used] / norms[used], np.ones(len(cycles)), maxiter=100 * a.shape[1])[0]
        scales[used] = sol / norms[used]
    return scales


def leave_one_out(
    features: np.ndarray, cycles: np.ndarray, groups: Sequence[str] | None = None
) -> np.ndarray:
    """Predicted cycles of every row from a fit without its group (default: without the row).

    Rows whose group is the only one get NaN (nothing is left to fit on).
    """
    features = np.asarray(features, dtype=float)
    cycles = np.asarray(cycles, dtype=float)
    labels = list(range(len(cycles))) if groups is None else list(groups)
    if len(labels) != len(cycles):
        raise ConfigError(f"need one group per row, got {len(labels)} for {len(cycles)} rows")
    predicted = np.full(len(cycles), np.nan)
    for g in dict.fromkeys(labels):
        held = np.array([lab == g for lab in labels])
        if held.all():
            continue
        predicted[held] = features[held] @ fit_scales(features[~held], cycles[~held])
    return predicted


def loo_summary(predicted: np.ndarray, measured: np.ndarray) -> tuple[float | None, float | None]:
    """Median |predicted / measured − 1| and the share within ±10 %, over the finite rows
    (``None`` when there is none)."""
    err = np.abs(np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float) - 1.0)
    err = err[np.isfinite(err)]
    if err.size == 0:
        return None, None
    return float(np.median(err)), float(np.mean(err <= 0.10 + 1e-12))


@dataclass(frozen=True)
class CycleScales:
    """The fitted scales: cycles per prior-weighted MAC, per output element, and per op."""

    mac: float
    element: float
    op: float

    def as_array(self) -> np.ndarray:
        return np.array([self.mac, self.element, self.op])


def coefficients_from_scales(
    scales: CycleScales, prior: Mapping[str, float], clock_hz: float
) -> LatencyCoefficients:
    """Seconds per feature unit at ``clock_hz``. Forward: (s_mac·rel[class], 0, s_elem, s_op)
    / clock. ``grad_input`` and ``grad_weight`` are the same as forward. ``update``: the
    element-wise cost per element, (0, 0, s_mac·rel[elementwise] + s_elem, s_op) / clock."""
    _check_prior(prior)
    f = float(clock_hz)
    per_elem_update = (scales.mac * prior["elementwise"] + scales.element) / f
    update = (0.0, 0.0, per_elem_update, scales.op / f)
    values = {}
    for cls in OP_CLASSES:
        fwd = (scales.mac * prior[cls] / f, 0.0, scales.element / f, scales.op / f)
        values[cls] = {"forward": fwd, "grad_input": fwd, "grad_weight": fwd, "update": update}
    return LatencyCoefficients(values)


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
        _check_number("calibration measured_s", self.measured_s, positive=True)
        _check_number("calibration fitted_s", self.fitted_s)
        if self.loo_predicted_s is not None:
            _check_number("calibration loo_predicted_s", self.loo_predicted_s)


@dataclass(frozen=True)
class ProfileFit:
    """The result of :func:`fit_profile`."""

    scales: CycleScales
    coefficients: LatencyCoefficients
    calibration: tuple[CalibrationPoint, ...]
    loo_median_error: float | None
    loo_within_10: float | None


def fit_profile(
    anchors: Sequence[Anchor],
    prior: Mapping[str, float],
    clock_hz: float,
    *,
    graphs: Callable[[str], Graph] = build_reference,
) -> ProfileFit:
    """Fit the cycle model to whole-model latencies and express it at ``clock_hz``.

    Args:
        anchors: measurements of one precision, on-chip memory only; each is converted to
            cycles at its own clock.
        prior: relative cycles per ``op.macs`` unit of every op class (:data:`OP_CLASSES`).
        clock_hz: the clock of the profile the coefficients are for.
        graphs: builds the network of an anchor's ``model`` id.

    Raises:
        ConfigError: no anchors, mixed precisions, an external-memory anchor, a bad prior or
            clock.
    """
    _check_prior(prior)
    _check_number("clock_hz", clock_hz, positive=True)
    if not anchors:
        raise ConfigError("fitting a profile needs at least one anchor, got none")
    if len(precisions := sorted({a.precision for a in anchors})) > 1:
        raise ConfigError(f"anchors of one fit must share a precision, got {precisions}")
    if external := [a.model for a in anchors if a.external_memory]:
        raise ConfigError(f"anchors that ran from external memory cannot be fitted: {external}")
    features = np.stack([cycle_features(graphs(a.model), prior) for a in anchors])
    cycles = np.array([a.cycles for a in anchors])
    s = fit_scales(features, cycles)
    scales = CycleScales(float(s[0]), float(s[1]), float(s[2]))
    loo = leave_one_out(features, cycles, [a.model for a in anchors])
    median, within = loo_summary(loo, cycles)
    fitted = features @ s
    points = tuple(
        CalibrationPoint(
            a.model,
            a.engine,
            a.board,
            float(c / clock_hz),
            float(fit / clock_hz),
            None if math.isnan(p) else float(p / clock_hz),
        )
        for a, c, fit, p in zip(anchors, cycles, fitted, loo, strict=True)
    )
    return ProfileFit(
        scales, coefficients_from_scales(scales, prior, clock_hz), points, median, within
    )


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
        _check_number("device clock_hz", self.clock_hz, positive=True)
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
                _check_number(f"device {name}", v)
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


def _check_number(what: str, v: Any, *, positive: bool = False) -> None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or (positive and v <= 0):
        raise ConfigError(f"{what} must be a finite number{' > 0' if positive else ''}, got {v!r}")


_TRAINING_NOTE = (
    "Training phases are not measured: grad_input and grad_weight reuse the forward "
    "coefficients of the same op class, and the update costs an element-wise op per element. "
)
_PRIOR_NOTE = (
    "Per-class relative costs are a prior from AtomDB medians (STM32H743, X-CUBE-AI 7.2.0; "
    "k×k set to the pointwise figure), the same for every core; only three scales are fitted. "
)
_MLPERF = "MLPerf Tiny closed"
_SUBMITTED = ", ".join(MLPERF_TINY_COMMITS[r] for r in ("v0.7", "v1.0", "v1.1"))


@dataclass(frozen=True)
class _Spec:
    """How one built-in profile is made: the device, and which anchors calibrate it."""

    name: str
    description: str
    core: str
    clock_hz: float
    sram_bytes: int
    flash_bytes: int
    precision: str
    select: Callable[[Anchor], bool]
    source: str
    notes: str


KB, MB, GIB = 1024, 1024 * 1024, 1024**3
_CMSIS_NN_ENGINES = ("microTVM + CMSIS-NN", "ONNC + CMSIS_5 (mbed)")

_SPECS = (
    _Spec(
        "stm32f746",
        "STM32F746 (Cortex-M7 @216 MHz, 320 KB SRAM, 1 MB flash), e.g. STM32F746G-DISCO",
        "Cortex-M7", 216e6, 320 * KB, 1 * MB, "int8",
        lambda a: a.board == "DISCO-F746NG",
        f"{_MLPERF} v0.7–v1.1 on DISCO-F746NG (Plumerai IE, Bosch HALE 1.0): {_SUBMITTED}",
        "Fitted on the four MLPerf Tiny models measured on this very board with every engine "
        "submitted (Plumerai IE v0.7/v1.0/2023.05, Bosch HALE 1.0), pooled: the profile "
        "predicts a typical optimised int8 engine, not one product (Plumerai 2023.05 runs VWW "
        "in 40 % less time than the others). " + _PRIOR_NOTE + _TRAINING_NOTE,
    ),
    _Spec(
        "stm32h743",
        "STM32H743 (Cortex-M7 @480 MHz, 512 KB SRAM as in the TinyEngine tables, 2 MB flash)",
        "Cortex-M7", 480e6, 512 * KB, 2 * MB, "int8",
        lambda a: (a.board == "NUCLEO-H7A3ZI-Q" and a.engine == "X-CUBE-AI 8.1.0")
        or (a.board == "STM32H747I-DISCO" and not a.external_memory),
        f"{_MLPERF} v1.1 NUCLEO-H7A3ZI-Q X-CUBE-AI 8.1.0 ({MLPERF_TINY_COMMITS['v1.1']}) and "
        "STMicroelectronics/stm32ai-modelzoo @6f10965 STM32H747I-DISCO X-CUBE-AI 10.0.0",
        "No whole-model measurement of an H743 with a buildable network is published; fitted "
        "in cycles on sibling Cortex-M7 parts and converted to 480 MHz: the MLPerf Tiny models "
        "on an STM32H7A3 @280 MHz (X-CUBE-AI 8.1.0) and the ST model-zoo MobileNetV1/V2 on an "
        "STM32H747 @400 MHz (X-CUBE-AI 10.0.0), pooled over those two X-CUBE-AI versions. "
        "Zoo runs whose activations exceed the 512 KiB AXI SRAM or whose weights exceed 2 MiB "
        "flash used external memory and are left out. Flash wait states at 480 MHz are "
        "assumed to cost no more cycles than at 280/400 MHz. " + _PRIOR_NOTE + _TRAINING_NOTE,
    ),
    _Spec(
        "nrf52840",
        "nRF52840 (Cortex-M4F @64 MHz, 256 KB SRAM, 1 MB flash)",
        "Cortex-M4F", 64e6, 256 * KB, 1 * MB, "int8",
        lambda a: a.board == "NUCLEO-L4R5ZI" and a.engine in _CMSIS_NN_ENGINES,
        f"{_MLPERF} v1.0/v1.1 NUCLEO-L4R5ZI (STM32L4R5, Cortex-M4F @120 MHz) microTVM + "
        f"CMSIS-NN and ONNC + CMSIS_5: {MLPERF_TINY_COMMITS['v1.0']}, "
        f"{MLPERF_TINY_COMMITS['v1.1']}",
        "No measured inference latency of an nRF52840 is published; fitted in cycles on the "
        "same core (Cortex-M4F) of an STM32L4R5 @120 MHz and converted to 64 MHz, using the "
        "CMSIS-NN based open engines that also run on an nRF52840 (microTVM + CMSIS-NN, ONNC "
        "+ CMSIS_5; vendor-specific X-CUBE-AI and the commercial engines are left out). "
        "Assumes the same cycles per MAC at 64 MHz; fewer flash wait states may make the "
        "nRF52840 slightly faster per cycle. " + _PRIOR_NOTE + _TRAINING_NOTE,
    ),
    _Spec(
        "rpi4",
        "Raspberry Pi 4B (BCM2711, 4× Cortex-A72 @1.5 GHz); SRAM = 1 GiB of DRAM, flash = 8 GiB "
        "of storage",
        "Cortex-A72", 1.5e9, 1 * GIB, 8 * GIB, "fp32",
        lambda a: a.board == "Raspberry Pi 4B" and a.precision == "fp32",
        f"{_MLPERF} v0.5 LatentAI LEIP 1.9.3 fp32 on Raspberry Pi 4B: "
        f"{MLPERF_TINY_COMMITS['v0.5']}",
        "Fitted on the four MLPerf Tiny models run by LatentAI LEIP 1.9.3 (thread count not "
        "published, probably all four cores). The profile is fp32: LEIP's fp32 runs are as fast "
        "as its int8 ones on these models, and training on a Linux board runs in fp32. The "
        "Cortex-M7 relative costs fit this engine poorly (the fit puts VWW at a third of its "
        "measured time), and with four anchors for three scales the leave-one-out error is large: "
        "treat absolute numbers as rough. Working memory is DRAM, not SRAM. "
        + _PRIOR_NOTE
        + _TRAINING_NOTE,
    ),
)  # fmt: skip


def _make(spec: _Spec) -> DeviceProfile:
    anchors = [a for a in ANCHORS if spec.select(a)]
    assert anchors and all(a.precision == spec.precision for a in anchors), spec.name
    fit = fit_profile(anchors, PRIOR_CYCLES_PER_MAC, spec.clock_hz)
    return DeviceProfile(
        name=spec.name,
        description=spec.description,
        core=spec.core,
        clock_hz=spec.clock_hz,
        sram_bytes=spec.sram_bytes,
        flash_bytes=spec.flash_bytes,
        precision=spec.precision,
        coefficients=fit.coefficients,
        source=spec.source,
        calibration=fit.calibration,
        loo_median_error=fit.loo_median_error,
        loo_within_10=fit.loo_within_10,
        notes=spec.notes,
    )


@functools.cache
def _builtin() -> tuple[DeviceProfile, ...]:
    return tuple(_make(spec) for spec in _SPECS)


def builtin_profiles() -> dict[str, DeviceProfile]:
    """The profiles fitted on published measurements, by name (computed once, on first use).

    Look a device up by name with :func:`tinytune.hwmodels.registry.get_device`, which also
    knows ``host`` and takes a stored calibration."""
    return {p.name: p for p in _builtin()}


_BOARDS = (
    DeviceProfile(
        name="esp32c3",
        description="ESP32-C3 (RV32IMC @160 MHz, 400 KB SRAM, 4 MB flash), e.g. "
        "ESP32-C3-DevKitM-1",
        core="RV32IMC", clock_hz=160e6, sram_bytes=400 * KB, flash_bytes=4 * MB,
        precision="int8", coefficients=LatencyCoefficients(), engine="bundle",
        source="Espressif ESP32-C3 datasheet v1.x: 400 KB SRAM (16 KB of it the flash cache), "
        "160 MHz, RV32IMC without an FPU; 4 MB flash of the ESP32-C3-MINI-1 module",
        notes="No published int8 latency of this core: its only profile is the bundle "
        "engine's. SRAM is the chip's 400 KB; ESP-IDF takes 16 KB of it as the flash cache, "
        "and its own heap and stacks: give the search an SRAM budget of what your firmware "
        "leaves.",
    ),
    DeviceProfile(
        name="rp2040",
        description="RP2040 (dual Cortex-M0+ @133 MHz, 264 KB SRAM, 2 MB flash), e.g. "
        "Raspberry Pi Pico",
        core="Cortex-M0+", clock_hz=133e6, sram_bytes=264 * KB, flash_bytes=2 * MB,
        precision="int8", coefficients=LatencyCoefficients(), engine="bundle",
        source="Raspberry Pi RP2040 datasheet: 264 KB SRAM, two Cortex-M0+ cores at 133 MHz "
        "without an FPU; 2 MB QSPI flash of the Raspberry Pi Pico (Pico datasheet)",
        notes="No published int8 latency of this core: its only profile is the bundle "
        "engine's, on one of the two cores. Flash is external (XIP through a 16 KB cache), "
        "and 2 MB is the Pico's; other boards carry up to 16 MB.",
    ),
)  # fmt: skip


def builtin_boards() -> dict[str, DeviceProfile]:
    """The devices known from their datasheets alone, by name: no latency of them is
    published, so they have no ``published`` profile. Each is its facts (clock, SRAM, flash)
    as a profile of the ``bundle`` engine without coefficients: the base that its bundle
    profile is fitted on (:mod:`tinytune.hwmodels.bundle_engine` holds the fitted ones)."""
    return {p.name: p for p in _BOARDS}
