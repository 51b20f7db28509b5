"""Latency of a training step (and of inference) from per-op cost terms.

Each op contributes up to four phases: ``forward``; ``grad_input`` (back-propagation to its
input, when the input needs a gradient); ``grad_weight`` (the gradient of its trained weights);
``update`` (applying it). Each phase has a feature vector — multiply-accumulates, bytes moved,
elements written, and a constant — and a device profile holds one coefficient per feature for
every (op class, phase), in seconds per unit. The prediction is the sum over ops and phases of
coefficients · features; the form follows the per-layer fits of nn-Meter and of
``reference/hw-measurements.md`` §4 (MACs + output elements + weights + a constant per op type).

:func:`predict_latency` is pure. :func:`fit_coefficients` fits the coefficients from measured
step times by non-negative least squares on relative error, so that small and large networks
weigh alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tinytune.errors import ConfigError
from tinytune.ir import Graph, Op

__all__ = [
    "FEATURES",
    "OP_CLASSES",
    "PHASES",
    "LatencyCoefficients",
    "LatencyReport",
    "fit_coefficients",
    "op_class",
    "phase_features",
    "predict_latency",
]

PHASES = ("forward", "grad_input", "grad_weight", "update")
FEATURES = ("macs", "bytes", "elements", "constant")
OP_CLASSES = ("conv_pw", "conv_dw", "conv_kxk", "linear", "elementwise")


def op_class(op: Op) -> str:
    """The cost class of an op: pointwise, depthwise or k×k convolution, linear, or
    element-wise (add, mul, pooling, upsampling, normalisation)."""
    if op.kind == "conv":
        groups = op.attrs["groups"]
        if groups > 1 and groups == op.params.weight_shape[0]:
            return "conv_dw"
        return "conv_pw" if op.attrs["kernel"] == 1 and groups == 1 else "conv_kxk"
    if op.kind == "linear":
        return "linear"
    return "elementwise"


def phase_features(op: Op, graph: Graph, bytes_per_element: int = 4) -> dict[str, np.ndarray]:
    """Feature vectors (:data:`FEATURES`) of every phase the op runs in a training step."""
    out = graph.tensors[op.output]
    ins = [graph.tensors[t] for t in op.inputs]
    in_elems = sum(t.numel for t in ins)
    weights = op.params.weight
    moved = (in_elems + out.numel) * bytes_per_element + weights * bytes_per_element
    feats = {"forward": np.array([op.macs, moved, out.numel, 1.0])}
    if any(t.requires_grad for t in ins):
        feats["grad_input"] = np.array([op.macs, moved, in_elems, 1.0])
    prm = op.params
    if prm.trained_weight:
        share = prm.trained_weight / max(1, weights)  # the trained input channels' MACs
        feats["grad_weight"] = np.array(
            [op.macs * share, moved, prm.trained_weight, 1.0], dtype=float
        )
    if prm.trained:
        feats["update"] = np.array([0.0, prm.trained * bytes_per_element, prm.trained, 1.0])
    return feats


@dataclass(frozen=True)
class LatencyCoefficients:
    """Seconds per feature unit for every (op class, phase); missing entries cost 0."""

    values: dict[str, dict[str, tuple[float, float, float, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for cls, phases in self.values.items():
            if cls not in OP_CLASSES:
                raise ConfigError(f"unknown op class {cls!r}; allowed: {OP_CLASSES}")
            for phase, coef in phases.items():
                if phase not in PHASES:
                    raise ConfigError(f"unknown phase {phase!r}; allowed: {PHASES}")
                if len(coef) != len(FEATURES) or any(not math.isfinite(c) or c < 0 for c in coef):
                    raise ConfigError(
                        f"coefficients of {cls}/{phase} must be {len(FEATURES)} finite numbers "
                        f">= 0, got {coef!r}"
                    )

    def get(self, cls: str, phase: str) -> np.ndarray:
        return np.asarray(self.values.get(cls, {}).get(phase, (0.0,) * len(FEATURES)))

    def to_dict(self) -> dict[str, dict[str, list[float]]]:
        return {c: {p: list(v) for p, v in ph.items()} for c, ph in self.values.items()}

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, Sequence[float]]]) -> LatencyCoefficients:
        if not isinstance(data, dict):
            raise ConfigError(f"latency coefficients must be a JSON object, got {data!r}")
        return cls({c: {p: tuple(map(float, v)) for p, v in ph.items()} for c, ph in data.items()})


@dataclass(frozen=True)
class LatencyReport:
    """Predicted seconds: one training step, inference, and per op and phase."""

    train_step_s: float
    inference_s: float
    per_op: tuple[tuple[str, dict[str, float]], ...]

    def phase_totals(self) -> dict[str, float]:
        totals = dict.fromkeys(PHASES, 0.0)
        for _, phases in self.per_op:
            for phase, seconds in phases.items():
                totals[phase] += seconds
        return totals


def predict_latency(
    graph: Graph, coefficients: LatencyCoefficients, bytes_per_element: int = 4
) -> LatencyReport:
    """Predict the latency of one training step of ``graph`` (and of its forward pass)."""
    per_op = []
    train = infer = 0.0
    for op in graph.ops:
        cls = op_class(op)
        phases = {
            phase: float(coefficients.get(cls, phase) @ f)
            for phase, f in phase_features(op, graph, bytes_per_element).items()
        }
        per_op.append((op.name, phases))
        train += sum(phases.values())
        infer += phases["forward"]
    return LatencyReport(train, infer, tuple(per_op))


def _design_row(graph: Graph, bytes_per_element: int) -> np.ndarray:
    row = np.zeros(len(OP_CLASSES) * len(PHASES) * len(FEATURES))
    for op in graph.ops:
        c = OP_CLASSES.index(op_class(op))
        for phase, f in phase_features(op, graph, bytes_per_element).items():
            start = (c * len(PHASES) + PHASES.index(phase)) * len(FEATURES)
            row[start : start + len(FEATURES)] += f
    return row


def fit_coefficients(
    graphs: Sequence[Graph],
    seconds: Sequence[float],
    bytes_per_element: int = 4,
    extra: tuple[np.ndarray, np.ndarray] | None = None,
) -> LatencyCoefficients:
    """Fit coefficients to measured training-step times by non-negative least squares.

    Rows are divided by the measured time, so the fit minimises relative error. Columns are
    scaled to unit norm before the solve. ``extra`` adds rows (design rows, seconds) such as
    per-op measurements.

    Raises:
        ConfigError: fewer measurements than one, a non-positive time, or shapes that differ.
    """
    from scipy.optimize import nnls

    if not graphs or len(graphs) != len(seconds):
        raise ConfigError(
            f"need one measured time per network and at least one, got {len(graphs)} networks "
            f"and {len(seconds)} times"
        )
    y = np.asarray(seconds, dtype=float)
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ConfigError("measured times must be finite and > 0 seconds")
    a = np.stack([_design_row(g, bytes_per_element) for g in graphs])
    if extra is not None:
        a = np.vstack([a, extra[0]])
        y = np.concatenate([y, extra[1]])
    a = a / y[:, None]
    b = np.ones_like(y)
    norms = np.linalg.norm(a, axis=0)
    used = norms > 0
    x = np.zeros(a.shape[1])
    x[used] = nnls(a[:, used] / norms[used], b, maxiter=50 * a.shape[1])[0] / norms[used]
    values: dict[str, dict[str, tuple[float, float, float, float]]] = {}
    k = len(FEATURES)
    for c, cls in enumerate(OP_CLASSES):
        for p, phase in enumerate(PHASES):
            start = (c * len(PHASES) + p) * k
            coef = x[start : start + k]
            if used[start : start + k].any():
                values.setdefault(cls, {})[phase] = tuple(float(v) for v in coef)  # type: ignore[assignment]
    return LatencyCoefficients(values)
