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

:func:`predict_latency` is pure. :mod:`tinytune.hwmodels.latency_fit` fits the coefficients from
measured step times, from the rows this module makes of them. Where the step's kernel calls were
timed one by one (a bundle's profiler), each op's calls add rows of their own — its forward, its
gradient to the input, its weight gradient and update — so that the training phases' coefficients
are measured rather than inferred from whole steps alone (:data:`KERNEL_PHASES` says which phases
each kernel of :mod:`tinytune.lowering` runs); on the host, each op's timed forward and backward
pass does the same (:func:`op_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tinytune.errors import ConfigError
from tinytune.ir import Graph, Op, PatchPlan, unrolled

__all__ = [
    "BACKWARD_TIMED",
    "COST_CLASSES",
    "EAGER_CLASSES",
    "FEATURES",
    "KERNEL_PHASES",
    "OP_CLASSES",
    "PHASES",
    "SUBCLASSES",
    "LatencyCoefficients",
    "LatencyReport",
    "call_rows",
    "cost_class",
    "op_class",
    "op_rows",
    "op_terms",
    "phase_features",
    "predict_latency",
]

PHASES = ("forward", "grad_input", "grad_weight", "update")
FEATURES = ("macs", "bytes", "elements", "constant")
OP_CLASSES = ("conv_pw", "conv_dw", "conv_kxk", "linear", "elementwise")
# the classes that split an op class, and the op class each falls back to in a profile that
# lacks it: convolutions on few output pixels, and grouped (not depthwise) convolutions
SUBCLASSES = {"conv_pw_few": "conv_pw", "conv_dw_few": "conv_dw", "conv_group": "conv_kxk"}
EAGER_CLASSES = ("act", "act_saved", "scale", "bias_grad")
"""The classes of the work around a convolution that an eager engine runs as kernels of its
own (PyTorch: :func:`op_terms`): ``act`` its activation in the forward pass; ``act_saved``,
where the output needs a gradient, what the activation keeps for the backward pass (a ReLU's
1-bit mask, packed in the forward pass and unpacked in the backward); ``scale`` a trained
per-channel scale after the convolution, in the forward pass and in the gradient to its
input; ``bias_grad`` the gradient of a trained bias (a sum over the output's pixels). A
bundle's kernels do that work inside the convolution's, whose coefficients include it."""
COST_CLASSES = OP_CLASSES + tuple(SUBCLASSES) + EAGER_CLASSES
# Output pixels below which (pointwise) and up to which (depthwise) a convolution is of the
# few-pixel class: the thresholds of the bundle's Linux kernels (TT_FEW_PIXELS,
# TT_FEW_DW_PIXELS in tinytune/lowering/csrc).
PW_FEW_PIXELS = 16
DW_FEW_PIXELS = 64

_BACKWARD = ("grad_input", "grad_weight", "update")
KERNEL_PHASES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        ("conv2d_s8", "conv2d_inplace_s8", "window_s8", "add_s8", "add_act_s8", "gap_s8",
         "linear_f32",
         "copy_s8", "avgpool_s8", "maxpool_s8", "upsample_s8", "groupnorm_f32", "act_table_s8",
         "mul_s8"),
        ("forward",),
    ),
    **dict.fromkeys(
        ("conv2d_grad_input", "gap_grad_input", "avgpool_grad_input", "maxpool_grad_input",
         "upsample_grad_input",
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
        return "conv_pw" if op.kernel_hw == (1, 1) and groups == 1 else "conv_kxk"
    if op.kind == "linear":
        return "linear"
    return "elementwise"


def cost_class(op: Op) -> str:
    """The class whose coefficients price the op: :func:`op_class`, or its few-pixel class for
    a pointwise convolution on under :data:`PW_FEW_PIXELS` output pixels or a depthwise one on
    at most :data:`DW_FEW_PIXELS`, or ``conv_group`` for a grouped convolution that is not
    depthwise (PyTorch on a CPU runs one in about 100 µs whatever its size, two to three times
    a pointwise convolution's time: ``docs/calibration.md``)."""
    cls = op_class(op)
    if cls == "conv_kxk" and op.attrs["groups"] > 1:
        return "conv_group"
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


def op_terms(
    op: Op, graph: Graph, bytes_per_element: int = 4
) -> list[tuple[str, str, np.ndarray]]:
    """The op's terms of a step, ``(cost class, phase, features)``: its phases
    (:func:`phase_features`) in its :func:`cost_class`, and a convolution's eager terms
    (:data:`EAGER_CLASSES`), each on the elements of its output: its activation in the forward
    pass, and where the output needs a gradient what the activation keeps, in the forward and
    the gradient-to-input phases; a trained scale in the forward and the gradient-to-input
    phases; a trained bias's gradient. A profile without the eager classes prices those at 0,
    and a form without them fits none (:attr:`ModelForm.eager`)."""
    cls = cost_class(op)
    terms = [(cls, phase, f) for phase, f in phase_features(op, graph, bytes_per_element).items()]
    if op.kind != "conv":
        return terms
    out = graph.tensors[op.output]
    n, nbytes = out.numel, out.numel * bytes_per_element

    def each(*features: float) -> np.ndarray:
        return np.array([0.0, *features, 1.0])

    if op.act != "none":
        terms.append(("act", "forward", each(2 * nbytes, n)))
        if out.requires_grad:
            terms += [("act_saved", p, each(nbytes, n)) for p in ("forward", "grad_input")]
    if op.params.scale:  # y = scale * conv(x) + bias: a multiply-add of its own
        terms.append(("scale", "forward", each(3 * nbytes, n)))
        if out.requires_grad:
            terms.append(("scale", "grad_input", each(3 * nbytes, n)))
    if op.params.bias_trained:
        terms.append(("bias_grad", "grad_weight", each(nbytes, n)))
    return terms


@dataclass(frozen=True)
class LatencyCoefficients:
    """Seconds per feature unit for every (cost class, phase); a subclass's missing phase
    (:data:`SUBCLASSES`) is its op class's; other missing entries cost 0 (an eager class's, in
    a profile whose engine does that work inside the convolution)."""

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
        if coef is None and cls in SUBCLASSES:
            coef = self.values.get(SUBCLASSES[cls], {}).get(phase)
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
    graph: Graph,
    coefficients: LatencyCoefficients,
    bytes_per_element: int = 4,
    patches: PatchPlan | None = None,
) -> LatencyReport:
    """Predict the latency of one training step of ``graph`` (and of its forward pass): the
    sum of every op's terms (:func:`op_terms`); the forward pass without what is kept only for
    a backward pass (``act_saved``). With ``patches``, the frozen prefix runs patch by patch:
    each op of the stage is priced once per patch on its region (:func:`unrolled`), so the
    recomputed overlap and the calls' fixed costs are counted."""
    if patches is not None:
        graph = unrolled(graph, patches)
    per_op = []
    train = infer = 0.0
    for op in graph.ops:
        phases: dict[str, float] = {}
        for cls, phase, f in op_terms(op, graph, bytes_per_element):
            seconds = float(coefficients.get(cls, phase) @ f)
            phases[phase] = phases.get(phase, 0.0) + seconds
            infer += seconds if phase == "forward" and cls != "act_saved" else 0.0
        per_op.append((op.name, phases))
        train += sum(phases.values())
    return LatencyReport(train, infer, tuple(per_op))


def _column(cls: str, phase: str) -> int:
    """Where the features of (cost class, phase) start in a design row."""
    return (COST_CLASSES.index(cls) * len(PHASES) + PHASES.index(phase)) * len(FEATURES)


def _design_row(graph: Graph, bytes_per_element: int) -> np.ndarray:
    row = np.zeros(len(COST_CLASSES) * len(PHASES) * len(FEATURES))
    for op in graph.ops:
        for cls, phase, f in op_terms(op, graph, bytes_per_element):
            start = _column(cls, phase)
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
    return _phase_rows(graph, groups, bytes_per_element)


def op_rows(
    graph: Graph,
    seconds_by_op: Mapping[str, float],
    phases: Sequence[str] = ("forward",),
    bytes_per_element: int = 4,
) -> tuple[np.ndarray, np.ndarray]:
    """Design rows and seconds of each op's timed part of a step (``tinytune profile``'s
    ``per_op_forward_s`` with ``phases`` forward, or ``per_op_backward_s`` with the gradient
    to the input and of the weights), by op name: one row per op, its terms
    (:func:`op_terms`) in those of ``phases`` it has. Names the graph does not have are left
    out."""
    groups = {
        op.name: [(set(phases), float(seconds_by_op[op.name]))]
        for op in graph.ops
        if op.name in seconds_by_op
    }
    return _phase_rows(graph, groups, bytes_per_element)


BACKWARD_TIMED = ("grad_input", "grad_weight")
"""The phases an op's timed backward pass runs (the update is the optimizer's, apart)."""


def _phase_rows(
    graph: Graph,
    groups: Mapping[str, Sequence[tuple[set[str], float]]],
    bytes_per_element: int,
) -> tuple[np.ndarray, np.ndarray]:
    """One design row per (op, group of phases): the op's terms (:func:`op_terms`) in those
    phases, and the group's seconds; a group with no such term is left out."""
    ops = {op.name: op for op in graph.ops}
    rows, seconds = [], []
    width = len(COST_CLASSES) * len(PHASES) * len(FEATURES)
    for name, op_groups in groups.items():
        terms = op_terms(ops[name], graph, bytes_per_element)
        for phases, secs in op_groups:
            row = np.zeros(width)
            present = [(cls, p, f) for cls, p, f in terms if p in phases]
            for cls, p, f in present:
                at = _column(cls, p)
                row[at : at + len(FEATURES)] += f
            if present:
                rows.append(row)
                seconds.append(secs)
    if not rows:
        return np.zeros((0, width)), np.zeros(0)
    return np.stack(rows), np.asarray(seconds, dtype=float)
