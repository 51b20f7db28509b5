"""Post-training int8 quantization of a built candidate.

:func:`quantize` turns the network that the search fine-tunes (a
:class:`~tinytune.models.GraphNet`, its BatchNorm already folded, its update scheme applied)
into a :class:`QuantizedNet`: the traced graph (batch 1, the device's) and, per op, the
integer parameters of
:mod:`tinytune.quant.arith`:

* weights: symmetric int8 per output channel, s_w[o] = max|W[o]|/127, q = round(W/s_w) in
  [-127, 127] (an all-zero channel borrows the mean scale of the others);
* biases: int32, q = round(b/(s_x·s_w[o]));
* activations: one (scale, zero point) per tensor from the calibrated range [lo, hi] ∋ 0
  (:mod:`tinytune.quant.ranges`): s = (hi − lo)/255, z = round(−128 − lo/s);
* requantisation: M·2^−n ≈ s_x·s_w[o]/s_y per output channel;
* table activations (h-swish, h-sigmoid): the convolution requantises to an int8
  pre-activation with a calibrated range of its own; a 256-entry int8 table gives the output
  and a 256-entry derivative table (f′·2^12) the gradient (:func:`activation_tables`);
* backward constants: the Q15 multipliers m_o ≈ s_w[o]·2^F of the input gradient, and, for a
  learning rate, the QAS update multipliers (:func:`qas_multipliers`);
* the classifier stays float32 (MCUNetV3 App. C).

Supported ops: convolutions with ``none``/``relu``/``relu6``/``hswish``/``hsigmoid`` (no
trained per-channel scale), ``add``, ``gap``, the channel-wise ``mul`` of squeeze-and-
excitation, ``maxpool`` (its output keeps its input's quantization), ``cat`` (its inputs
share its output's quantization: a copy), the ``linear``
classifier, and the ops of TinyTL lite residuals: ``avgpool``,
bilinear ``upsample`` and ``groupnorm`` (float32 γ, β and statistics, int8 input and output) —
the ProxylessNAS and MobileNetV3 families with or without lite residuals. Anything else raises
:class:`~tinytune.quant.errors.QuantizationError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor

from tinytune.ir import TABLE_ACTIVATIONS, Graph, Op, trace
from tinytune.models import GraphNet
from tinytune.quant.arith import INT32_MAX, INT32_MIN, frac_bits_for, quantize_multiplier
from tinytune.quant.errors import QuantizationError
from tinytune.quant.kernels import (
    ACT_GRAD_FRAC_BITS,
    INTERP_FRAC_BITS,
    interp_axis,
)
from tinytune.quant.model import (
    MAX_WEIGHT_GRAD_PIXELS,
    SUPPORTED,
    ActQuant,
    QAdd,
    QCat,
    QConv,
    QGap,
    QGroupNorm,
    QLinear,
    QMaxPool,
    QMul,
    QPool,
    QuantizedNet,
    QUpsample,
    UpdateMultipliers,
    _bounds,
)
from tinytune.quant.ranges import observe
from tinytune.quant.schedule import WEIGHT_LR_SCALE

__all__ = ["activation_tables", "check_op", "qas_multipliers", "quantize"]


def _multipliers(reals: Iterable[float]) -> tuple[Tensor, Tensor]:
    pairs = [quantize_multiplier(float(r)) for r in reals]
    return (
        torch.tensor([m for m, _ in pairs], dtype=torch.int64),
        torch.tensor([n for _, n in pairs], dtype=torch.int64),
    )


def qas_multipliers(
    layer: QConv, x_scale: float, lr: float, *, qas: bool = True
) -> UpdateMultipliers:
    """The QAS-scaled SGD step of ``layer`` at learning rate ``lr`` as fixed-point multipliers
    (MCUNetV3 Eq. 4: Δb = lr·G_b/s_b², Δw = lr_w·G_w/s_w² with G the gradient w.r.t. the
    integer parameter, i.e. the real SGD step divided by the parameter's scale). The weights'
    rate lr_w is lr × :data:`~tinytune.quant.schedule.WEIGHT_LR_SCALE`, as in the search's
    float32 fine-tunes.

    ``qas=False`` is the step without quantization-aware scaling, the ablation of MCUNetV3
    Table 2: Δb = lr·G_b and Δw = lr·G_w on the integer parameters, s_b² and s_w² times the
    QAS step (which, for int8 scales far below 1, all but stops training).
    """
    if not lr >= 0 or not math.isfinite(lr):
        raise QuantizationError(f"the learning rate must be finite and >= 0, got {lr!r}")
    s_w = layer.w_scale.tolist()
    lr_w = lr * WEIGHT_LR_SCALE
    if qas:
        bm, bs = _multipliers(lr / (x_scale * s) for s in s_w)
        wm, ws = _multipliers(lr_w * x_scale / s for s in s_w)
    else:
        bm, bs = _multipliers(lr * x_scale * s for s in s_w)  # s_b = s_x·s_w
        wm, ws = _multipliers(lr_w * x_scale * s for s in s_w)
    return UpdateMultipliers(bm, bs, wm, ws)


def _weight_scales(w: Tensor, b: Tensor, s_x: float) -> Tensor:
    """Per output channel s_w = max|W|/127, raised where the bias b/(s_x·s_w) would not leave
    the int32 accumulator room for the products: a channel whose BatchNorm γ is about 0 (a
    "dead" channel of an ImageNet network: weights of 1e-8 after folding, a bias of 1) outputs
    its bias, and its weights round to 0 at any scale that holds that bias."""
    amax = w.abs().flatten(1).max(dim=1).values
    scale = amax / 127.0
    live = scale > 0
    fill = float(scale[live].mean()) if bool(live.any()) else 1.0
    scale = torch.where(live, scale, torch.full_like(scale, fill))
    taps = w[0].numel()
    room = (INT32_MAX - 255 * 127 * taps) / 2  # half of what is left, for the bias updates
    return torch.maximum(scale, b.abs() / (s_x * room))


def _act_real(act: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A table activation of float64 ``x`` and its derivative: h-swish or h-sigmoid with
    PyTorch's choices at the kinks (``hardswish_backward``: x/3 + 1/2 on [-3, 3];
    ``hardsigmoid_backward``: 1/6 on (-3, 3)), sigmoid σ (σ′ = σ(1 − σ)) or SiLU x·σ(x)
    (σ + x·σ(1 − σ))."""
    if act in ("sigmoid", "silu"):
        s = 1.0 / (1.0 + np.exp(-x))
        ds = s * (1.0 - s)
        return (s, ds) if act == "sigmoid" else (x * s, s + x * ds)
    if act == "hswish":
        y = x * np.clip(x + 3.0, 0.0, 6.0) / 6.0
        d = np.where(x < -3.0, 0.0, np.where(x <= 3.0, x / 3.0 + 0.5, 1.0))
    else:
        y = np.clip(x + 3.0, 0.0, 6.0) / 6.0
        d = np.where((x > -3.0) & (x < 3.0), 1.0 / 6.0, 0.0)
    return y, d


def activation_tables(act: str, pre: ActQuant, out: ActQuant) -> tuple[Tensor, Tensor]:
    """The int8 output table and the derivative table of a table activation, indexed by
    pre-activation q + 128 for q = -128 … 127: y = saturate(round(f(s_p·(q − z_p))/s_y) + z_y)
    (round half to even) and D = round(f′(s_p·(q − z_p))·2^ACT_GRAD_FRAC_BITS).

    D is f′ even where the output saturates (a pre-activation beyond the output's calibrated
    range): the int8 saturation is passed straight through, as for an output without
    activation, not masked as a ReLU's clamp is."""
    if act not in TABLE_ACTIVATIONS:
        raise QuantizationError(f"no activation table for {act!r}; allowed: {TABLE_ACTIVATIONS}")
    x = pre.scale * (np.arange(-128, 128, dtype=np.float64) - pre.zero)
    y, d = _act_real(act, x)
    q = np.clip(np.round(y / out.scale) + out.zero, -128, 127)
    grad = np.round(d * 2.0**ACT_GRAD_FRAC_BITS)
    return torch.from_numpy(q.astype(np.int64)), torch.from_numpy(grad.astype(np.int64))


def _quantize_conv(
    op: Op,
    module: torch.nn.Module,
    graph: Graph,
    acts: dict[int, ActQuant],
    pre: dict[str, ActQuant],
) -> QConv:
    x_q, out_q = acts[op.inputs[0]], acts[op.output]
    tabled = op.act in TABLE_ACTIVATIONS
    y_q = pre[op.name] if tabled else out_q  # what the requantisation targets
    w = module.full_weight().double()  # (O, C/groups, k, k)
    b = module.bias.detach().double()
    s_w = _weight_scales(w, b, x_q.scale)
    weight = torch.clamp(torch.round(w / s_w.view(-1, 1, 1, 1)), -127, 127).long()
    bias = torch.clamp(torch.round(b / (x_q.scale * s_w)), INT32_MIN, INT32_MAX).long()
    mult, shift = _multipliers(x_q.scale * s / y_q.scale for s in s_w.tolist())
    frac = frac_bits_for(s_w)
    act_min, act_max = _bounds("none" if tabled else op.act, y_q)
    taps = weight.shape[1] * weight.shape[2] * weight.shape[3]
    if int(bias.abs().max()) + 255 * 127 * taps >= 2**31:
        raise QuantizationError(
            f"{op.name}: {taps} taps per output with biases up to {int(bias.abs().max())} can "
            "overflow the int32 accumulator"
        )
    if weight.shape[0] // op.attrs["groups"] * weight.shape[2] * weight.shape[3] >= 2**24:
        raise QuantizationError(f"{op.name}: too many outputs per input for the gradient bound")
    tables = activation_tables(op.act, y_q, out_q) if tabled else (None, None)
    return QConv(
        op, weight, s_w, bias, mult, shift, act_min, act_max,
        torch.round(s_w * 2.0**frac).long(), frac, y_q if tabled else None, *tables,
    )  # fmt: skip


def _quantize_mul(
    op: Op,
    module: torch.nn.Module,
    graph: Graph,
    acts: dict[int, ActQuant],
    pre: dict[str, ActQuant],
) -> QMul:
    x, s, y = (acts[t] for t in (*op.inputs, op.output))
    mult, shift = quantize_multiplier(x.scale * s.scale / y.scale)
    x_frac, s_frac = frac_bits_for(x.scale), frac_bits_for(s.scale)
    return QMul(
        op, mult, shift, round(x.scale * 2.0**x_frac), x_frac, round(s.scale * 2.0**s_frac),
        s_frac,
    )  # fmt: skip


def _quantize_add(
    op: Op,
    module: torch.nn.Module,
    graph: Graph,
    acts: dict[int, ActQuant],
    pre: dict[str, ActQuant],
) -> QAdd:
    a, b, y = (acts[t] for t in (*op.inputs, op.output))
    big = max(a.scale, b.scale) / y.scale
    _, shift = quantize_multiplier(big)
    if shift < 1:
        raise QuantizationError(f"{op.name}: input/output scale ratio {big:.3g} is too large")
    a_mult, b_mult = (round(q.scale / y.scale * 2.0**shift) for q in (a, b))
    return QAdd(op, a_mult, b_mult, shift, *_bounds(op.act, y))


def _quantize_gap(
    op: Op,
    module: torch.nn.Module,
    graph: Graph,
    acts: dict[int, ActQuant],
    pre: dict[str, ActQuant],
) -> QGap:
    x = graph.tensors[op.inputs[0]]
    hw = x.shape[2] * x.shape[3]
    mult, shift = quantize_multiplier(acts[op.inputs[0]].scale / (acts[op.output].scale * hw))
    frac = frac_bits_for(1.0 / hw)
    return QGap(op, mult, shift, round(2.0**frac / hw), frac)


def _quantize_pool(
    op: Op,
    module: torch.nn.Module,
    graph: Graph,
    acts: dict[int, ActQuant],
    pre: dict[str, ActQuant],
) -> QPool:
    r = op.attrs["ratio"]
    area = r * op.attrs.get("ratio_w", r)
    mult, shift = quantize_multiplier(acts[op.inputs[0]].scale / (acts[op.output].scale * area))
    frac = frac_bits_for(1.0 / area)
    return QPool(op, r, mult, shift, round(2.0**frac / area), frac)


def _tied(graph: Graph, ranges: dict[int, tuple[float, float]]) -> dict[int, tuple[float, float]]:
    """The tensors' ranges, one range over each group of tensors that must share their
    quantization: a max pooling's input and output (the largest of int8 values) and a
    concatenation's inputs and output (a copy of channels)."""
    group = {t: t for t in ranges}

    def root(t: int) -> int:
        while group[t] != t:
            group[t] = group[group[t]]
            t = group[t]
        return t

    for op in graph.ops:
        if op.kind in ("maxpool", "cat"):
            for t in op.inputs:
                group[root(t)] = root(op.output)
    joined: dict[int, tuple[float, float]] = {}
    for t, (lo, hi) in ranges.items():
        r = root(t)
        a, b = joined.get(r, (lo, hi))
        joined[r] = (min(a, lo), max(b, hi))
    return {t: joined[root(t)] for t in ranges}


def _quantize_tied(
    op: Op,
    module: torch.nn.Module,
    graph: Graph,
    acts: dict[int, ActQuant],
    pre: dict[str, ActQuant],
) -> QCat | QMaxPool:
    """A max pooling or a concatenation: no parameter, its tensors tied by :func:`_tied`."""
    return QCat(op) if op.kind == "cat" else QMaxPool(op)


def _quantize_upsample(
    op: Op,
    module: torch.nn.Module,
    graph: Graph,
    acts: dict[int, ActQuant],
    pre: dict[str, ActQuant],
) -> QUpsample:
    (_, _, h, w), (_, _, oh, ow) = (
        graph.tensors[op.inputs[0]].shape,
        graph.tensors[op.output].shape,
    )
    if oh < h or ow < w:
        raise QuantizationError(f"{op.name}: only upsampling is supported, {h}×{w} → {oh}×{ow}")
    real = acts[op.inputs[0]].scale / (acts[op.output].scale * 2.0 ** (2 * INTERP_FRAC_BITS))
    mult, shift = quantize_multiplier(real)
    return QUpsample(op, interp_axis(h, oh), interp_axis(w, ow), mult, shift)


def _quantize_groupnorm(
    op: Op,
    module: torch.nn.Module,
    graph: Graph,
    acts: dict[int, ActQuant],
    pre: dict[str, ActQuant],
) -> QGroupNorm:
    x = graph.tensors[op.inputs[0]]
    hw, per_group = x.shape[2] * x.shape[3], x.shape[1] // op.attrs["groups"]
    if max(255 * per_group * hw, 127 * 255 * hw) >= 2**31:  # Σ(x − z) and Σ_p γ·(x − z)
        raise QuantizationError(f"{op.name}: a group is too large for int32 sums")
    weight = module.weight.detach().to(torch.float32).numpy().copy()
    bias = None
    if module.bias is not None:
        bias = module.bias.detach().to(torch.float32).numpy().copy()
    act_min, act_max = _bounds(op.act, acts[op.output])
    return QGroupNorm(op, weight, bias, op.attrs["groups"], 1e-5, act_min, act_max)


def _quantize_linear(
    op: Op,
    module: torch.nn.Module,
    graph: Graph,
    acts: dict[int, ActQuant],
    pre: dict[str, ActQuant],
) -> QLinear:
    w = module.weight.detach().to(torch.float32).numpy().copy()
    b = module.bias.detach().to(torch.float32).numpy().copy()
    return QLinear(op, w, b)


_QUANTIZERS = {
    "conv": _quantize_conv,
    "add": _quantize_add,
    "mul": _quantize_mul,
    "gap": _quantize_gap,
    "avgpool": _quantize_pool,
    "maxpool": _quantize_tied,
    "cat": _quantize_tied,
    "upsample": _quantize_upsample,
    "groupnorm": _quantize_groupnorm,
    "linear": _quantize_linear,
}


def check_op(op: Op, graph: Graph) -> None:
    """Raise :class:`QuantizationError` unless ``op`` of ``graph`` has an int8 kernel; needs
    the traced graph only, no weight."""
    if op.kind == "linear":
        if op is not graph.ops[-1]:
            raise QuantizationError(f"{op.name}: the classifier must be the last op")
        return
    if op.kind not in SUPPORTED:
        raise QuantizationError(
            f"{op.name}: op kind {op.kind!r} is not supported in int8; allowed: "
            f"{[*SUPPORTED, 'linear']}"
        )
    if op.act not in SUPPORTED[op.kind]:
        raise QuantizationError(
            f"{op.name}: activation {op.act!r} is not supported in int8 after {op.kind}; "
            f"allowed: {list(SUPPORTED[op.kind])}"
        )
    if op.kind == "mul":
        x, s = (graph.tensors[t] for t in op.inputs)
        if s.shape != (*x.shape[:2], 1, 1):
            raise QuantizationError(
                f"{op.name}: a product is supported as x (N, C, H, W) times a channel scale "
                f"(N, C, 1, 1), got {x.shape} × {s.shape}"
            )
    prm = op.params
    if op.kind == "conv" and prm.scale:
        raise QuantizationError(
            f"{op.name}: a trained per-channel scale (norm update) is not supported in int8"
        )
    if op.kind == "groupnorm" and not (prm.scale_trained and (prm.bias_trained or not prm.bias)):
        raise QuantizationError(
            f"{op.name}: a GroupNorm is supported with its scale and shift trained (as in lite "
            "residual branches), not frozen"
        )
    if op.kind == "conv" and op.params.trained_weight:
        out = graph.tensors[op.output]
        if out.shape[2] * out.shape[3] > MAX_WEIGHT_GRAD_PIXELS:
            raise QuantizationError(
                f"{op.name}: {out.shape[2]}×{out.shape[3]} output pixels exceed the "
                f"{MAX_WEIGHT_GRAD_PIXELS} that an int32 weight gradient covers"
            )


def quantize(
    net: GraphNet,
    calibration: Iterable[Tensor],
    *,
    method: str = "minmax",
    percentile: float = 99.99,
) -> QuantizedNet:
    """Quantize ``net`` after observing activation ranges on ``calibration`` batches of
    training images (N, 3, R, R); see the module docstring. ``net`` is not modified."""
    batches = list(calibration)
    if not batches:
        raise QuantizationError("calibration needs at least one batch of images")
    graph = trace(net, batches[0][:1])
    for op in graph.ops:
        check_op(op, graph)
    if graph.ops[-1].kind != "linear":
        raise QuantizationError("the network must end with its linear classifier")
    ranges = observe(net, graph, batches, method=method, percentile=percentile)
    acts = {t: ActQuant.from_range(*r) for t, r in _tied(graph, ranges.tensors).items()}
    pre = {name: ActQuant.from_range(*r) for name, r in ranges.pre_activations.items()}
    layers = tuple(
        _QUANTIZERS[op.kind](op, net.get_submodule(op.name), graph, acts, pre) for op in graph.ops
    )
    return QuantizedNet(graph, acts, layers, method)
