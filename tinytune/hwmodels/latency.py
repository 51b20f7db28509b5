"""Latency of a training step (and of inference) from per-op cost terms.

Each op contributes up to four phases: ``forward``; ``grad_input`` (back-propagation to its
input, when the input needs a gradient); ``grad_weight`` (the gradient of its trained weights);
``update`` (applying it). Each phase has a feature vector — multiply-accumulates, bytes moved,
elements written, and a constant — and a device profile holds one coefficient per feature for
every (op class, phase), in seconds per unit. The prediction is the sum over ops and phases of
coefficients · features; the form follows the per-layer fits of nn-Meter and of
``reference/hw-measurements.md`` §4 (MACs + output elements + weights + a constant per op type).

The coefficients are per **cost class** (:func:`cost_class`): the op class (:func:`op_class`),
with pointwise and depthwise convolutions on few output pixels apart — where the exported
bundle's Linux kernels take other loops, whose cost per multiply-accumulate differs about
threefold. A profile without coefficients for a few-pixel class (every published, PyTorch and
Cortex-M7 profile, whose engines make no such difference) prices those ops as their op class.

:func:`predict_latency` is pure. :func:`fit_coefficients` fits the coefficients from measured
step times by non-negative least squares on relative error, so that small and large networks
weigh alike. Where the step's kernel calls were timed one by one (a bundle's profiler), each
op's calls add rows of their own — its forward, its gradient to the input, its weight
gradient and update — so that the training phases' coefficients are measured rather than
inferred from whole steps alone (:data:`KERNEL_PHASES` says which phases each kernel of
:mod:`tinytune.export` runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tinytune.errors import ConfigError
from tinytune.ir import Graph, Op

__all__ = [
    "COST_CLASSES",
    "FEATURES",
    "KERNEL_PHASES",
    "OP_CLASSES",
    "PHASES",
    "LatencyCoefficients",
    "LatencyReport",
    "call_rows",
    "cost_class",
    "fit_coefficients",
    "op_class",
    "phase_features",
    "predict_latency",
]

PHASES = ("forward", "grad_input", "grad_weight", "update")
FEATURES = ("macs", "bytes", "elements", "constant")
OP_CLASSES = ("conv_pw", "conv_dw", "conv_kxk", "linear", "elementwise")
# the few-pixel classes and the op class each falls back to in a profile that lacks it
FEW_PIXEL_CLASSES = {"conv_pw_few": "conv_pw", "conv_dw_few": "conv_dw"}
COST_CLASSES = OP_CLASSES + tuple(FEW_PIXEL_CLASSES)
# Output pixels below which (pointwise) and up to which (depthwise) a convolution is of the
# few-pixel class: the thresholds of the bundle's Linux kernels (TT_FEW_PIXELS,
# TT_FEW_DW_PIXELS in tinytune/export/csrc).
PW_FEW_PIXELS = 16
DW_FEW_PIXELS = 64

_BACKWARD = ("grad_input", "grad_weight", "update")
KERNEL_PHASES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        ("conv2d_s8", "add_s8", "gap_s8", "linear_f32", "copy_s8", "avgpool_s8", "upsample_s8",
         "groupnorm_f32", "act_table_s8", "mul_s8"),
        ("forward",),
    ),
    **dict.fromkeys(
        ("conv2d_grad_input", "gap_grad_input", "avgpool_grad_input", "upsample_grad_input",
         "grad_accumulate", "mul_grad_x", "mul_grad_scale"),
        ("grad_input",),
    ),
    "update_bias": ("grad_weight", "update"),
    "conv2d_update_weight": ("grad_weight", "update"),  # QAS: gradient and update fused
    "linear_f32_backward": _BACKWARD,
    "groupnorm_f32_backward": _BACKWARD,
    "softmax_xent_grad": _BACKWARD,  # the loss gradient, counted with the classifier's
    # the gradient through the op's own activation (ReLU mask, h-swish/h-sigmoid table): with
    # whatever uses it
    "grad_mask": (),
    "grad_act_table": (),
}  # fmt: skip
"""The latency model's phases each kernel of a bundle's step runs (``tt_<kernel>`` in C)."""


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


def cost_class(op: Op) -> str:
    """The class whose coefficients price the op: :func:`op_class`, or its few-pixel class for
    a pointwise convolution on under :data:`PW_FEW_PIXELS` output pixels or a depthwise one on
    at most :data:`DW_FEW_PIXELS`."""
    cls = op_class(op)
    if cls == "conv_pw":
        out, cin = op.params.weight_shape[:2]
        if op.macs < PW_FEW_PIXELS * out * cin:
            return "conv_pw_few"
    elif cls == "conv_dw":
        channels, _, kh, kw = op.params.weight_shape
        if op.macs <= DW_FEW_PIXELS * channels * kh * kw:
            return "conv_dw_few"
    return cls


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
    """Seconds per feature unit for every (cost class, phase); a few-pixel class's missing
    phase is its op class's; other missing entries cost 0."""

    values: dict[str, dict[str, tuple[float, float, float, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for cls, phases in self.values.items():
            if cls not in COST_CLASSES:
                raise ConfigError(f"unknown op class {cls!r}; allowed: {COST_CLASSES}")
            for phase, coef in phases.items():
                if phase not in PHASES:
                    raise ConfigError(f"unknown phase {phase!r}; allowed: {PHASES}")
                if len(coef) != len(FEATURES) or any(not math.isfinite(c) or c < 0 for c in coef):
                    raise ConfigError(
                        f"coefficients of {cls}/{phase} must be {len(FEATURES)} finite numbers "
                        f">= 0, got {coef!r}"
                    )

    def get(self, cls: str, phase: str) -> np.ndarray:
        coef = self.values.get(cls, {}).get(phase)
        if coef is None and cls in FEW_PIXEL_CLASSES:
            coef = self.values.get(FEW_PIXEL_CLASSES[cls], {}).get(phase)
        return np.asarray(coef if coef is not None else (0.0,) * len(FEATURES))

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
        cls = cost_class(op)
        phases = {
            phase: float(coefficients.get(cls, phase) @ f)
            for phase, f in phase_features(op, graph, bytes_per_element).items()
        }
        per_op.append((op.name, phases))
        train += sum(phases.values())
        infer += phases["forward"]
    return LatencyReport(train, infer, tuple(per_op))


def _design_row(graph: Graph, bytes_per_element: int) -> np.ndarray:
    row = np.zeros(len(COST_CLASSES) * len(PHASES) * len(FEATURES))
    for op in graph.ops:
        c = COST_CLASSES.index(cost_class(op))
        for phase, f in phase_features(op, graph, bytes_per_element).items():
            start = (c * len(PHASES) + PHASES.index(phase)) * len(FEATURES)
            row[start : start + len(FEATURES)] += f
    return row


def call_rows(
    graph: Graph, calls: Sequence[tuple[str, str, float]], bytes_per_element: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """Design rows and seconds of a step's timed kernel calls, ``(op, kernel, seconds)``.

    An op's calls are grouped by the phases they run (:data:`KERNEL_PHASES`; groups that
    share a phase merge, and ``grad_mask`` joins the op's gradient to the input, or its weight
    gradient when it has none); each group is one row: the features of its phases, the sum of
    its calls' seconds. A group none of whose phases the op has in the model is left out.

    Raises:
        ConfigError: a kernel outside :data:`KERNEL_PHASES`, or an op the graph does not have.
    """
    ops = {op.name: op for op in graph.ops}
    groups: dict[str, list[tuple[set[str], float]]] = {}
    for name, kernel, secs in calls:
        if kernel not in KERNEL_PHASES:
            raise ConfigError(f"unknown kernel {kernel!r}; known: {sorted(KERNEL_PHASES)}")
        if name not in ops:
            raise ConfigError(f"a timed call names op {name!r}, which the graph does not have")
        phases = set(KERNEL_PHASES[kernel])
        if not phases:
            feats = phase_features(ops[name], graph, bytes_per_element)
            phases = {"grad_input" if "grad_input" in feats else "grad_weight"}
        kept, at = [], None  # the op's groups in order of their first call
        for have, total in groups.get(name, []):
            if have & phases:
                phases, secs = have | phases, total + secs
                at = len(kept) if at is None else at
            else:
                kept.append((have, total))
        kept.insert(len(kept) if at is None else at, (phases, secs))
        groups[name] = kept
    rows, seconds = [], []
    width = len(PHASES) * len(FEATURES)
    for name, op_groups in groups.items():
        feats = phase_features(ops[name], graph, bytes_per_element)
        start = COST_CLASSES.index(cost_class(ops[name])) * width
        for phases, secs in op_groups:
            row = np.zeros(len(COST_CLASSES) * width)
            present = [p for p in PHASES if p in phases and p in feats]
            for p in present:
                at = start + PHASES.index(p) * len(FEATURES)
                row[at : at + len(FEATURES)] += feats[p]
            if present:
                rows.append(row)
                seconds.append(secs)
    if not rows:
        return np.zeros((0, len(COST_CLASSES) * width)), np.zeros(0)
    return np.stack(rows), np.asarray(seconds, dtype=float)


def fit_coefficients(
    graphs: Sequence[Graph],
    seconds: Sequence[float],
    bytes_per_element: int = 4,
    calls: Sequence[Sequence[tuple[str, str, float]]] | None = None,
) -> LatencyCoefficients:
    """Fit coefficients to measured training-step times by non-negative least squares.

    Rows are divided by the measured time, so the fit minimises relative error. Columns are
    scaled to unit norm before the solve. ``calls``, one sequence per network (empty where the
    calls were not timed), adds each network's :func:`call_rows`, divided by the network's
    step time: a call's error weighs as its share of the step.

    Raises:
        ConfigError: fewer measurements than one, a non-positive time, shapes that differ, or
            times so far from the features' scale that the scaled system is not finite.
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
    # overflow is checked below rather than warned about on stderr
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.stack([_design_row(g, bytes_per_element) for g in graphs]) / y[:, None]
        b = np.ones_like(y)
        if calls is not None:
            if len(calls) != len(graphs):
                raise ConfigError(f"need one list of calls per network, got {len(calls)}")
            for graph, step, timed in zip(graphs, y, calls, strict=True):
                rows, secs = call_rows(graph, timed, bytes_per_element)
                a = np.vstack([a, rows / step])
                b = np.concatenate([b, secs / step])
        norms = np.linalg.norm(a, axis=0)
    if not (np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(norms).all()):
        raise ConfigError(
            "the measured times are too far from the networks' sizes to fit (a feature per "
            "second overflows): are the times in seconds?"
        )
    used = norms > 0
    if not used.any():  # scipy's nnls aborts the process on a system without columns
        raise ConfigError(
            "the networks' features vanish against the measured times (every column is 0): "
            "are the times in seconds?"
        )
    x = np.zeros(a.shape[1])
    x[used] = nnls(a[:, used] / norms[used], b, maxiter=50 * a.shape[1])[0] / norms[used]
    values: dict[str, dict[str, tuple[float, float, float, float]]] = {}
    k = len(FEATURES)
    for c, cls in enumerate(COST_CLASSES):
        for p, phase in enumerate(PHASES):
            start = (c * len(PHASES) + p) * k
            coef = x[start : start + k]
            if used[start : start + k].any():
                values.setdefault(cls, {})[phase] = tuple(float(v) for v in coef)  # type: ignore[assignment]
    return LatencyCoefficients(values)
