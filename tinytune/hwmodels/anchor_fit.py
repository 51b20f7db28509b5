"""A device profile's latency coefficients fitted on published whole-model measurements.

A :class:`~tinytune.hwmodels.profile.DeviceProfile` holds one
:class:`~tinytune.hwmodels.latency.LatencyCoefficients` entry per (op class, phase); this module
fits them, with the leave-one-out error of the fit, for the built-in profiles
(:mod:`tinytune.hwmodels.builtin_devices`).

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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tinytune.errors import ConfigError
from tinytune.hwmodels.anchors import Anchor
from tinytune.hwmodels.latency import OP_CLASSES, LatencyCoefficients, op_class
from tinytune.hwmodels.profile import CalibrationPoint, check_number
from tinytune.hwmodels.reference_models import build_reference
from tinytune.ir import Graph

__all__ = [
    "ATOMDB_M7_CYCLES_PER_MAC",
    "PRIOR_CYCLES_PER_MAC",
    "CycleScales",
    "ProfileFit",
    "coefficients_from_scales",
    "cycle_features",
    "fit_profile",
    "fit_scales",
    "leave_one_out",
    "loo_summary",
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
    check_number("clock_hz", clock_hz, positive=True)
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
