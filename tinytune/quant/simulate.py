"""The int8 training simulator: the numerical reference of the device's training step.

One step on one image (batch 1, as on the device) runs, with the kernels of
:mod:`tinytune.quant.kernels` and the semantics of :mod:`tinytune.quant.arith`:

1. the integer forward pass, keeping what backward needs: the 1-bit masks of ReLU/ReLU6
   outputs, the int8 pre-activations of h-swish/h-sigmoid outputs, the inputs of the layers
   whose weights are trained (their first k channels), and the GroupNorm statistics;
2. the float32 classifier, its softmax cross-entropy gradient, its SGD update, and the feature
   gradient turned into an int8 block floating-point tensor;
3. backward in reverse execution order through every op whose output needs a gradient (the ops
   between the output and the earliest updated layer, no further): mask, input gradient (with
   the weights before the update) written fresh or accumulated where a tensor has several
   readers, then the QAS-scaled SGD update of the trained bias and of the trained input channels
   of the weight (:func:`~tinytune.quant.quantizer.qas_multipliers`); GroupNorm's float32 γ and β
   take plain SGD steps.

Frozen parameters are never written. The parameters of the :class:`QuantizedNet` are updated in
place, as the device updates its SRAM copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from tinytune.ir import PatchPlan, Region
from tinytune.quant import kernels as K
from tinytune.quant.errors import QuantizationError
from tinytune.quant.model import (
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
)
from tinytune.quant.quantizer import qas_multipliers

__all__ = [
    "EmitRecord",
    "ForwardRecord",
    "StepRecord",
    "forward",
    "forward_patched",
    "train_step",
]


@dataclass
class ForwardRecord:
    """Everything the integer forward pass produced.

    Attributes:
        acts: tensor id → int8 values (int64 tensor, NCHW).
        masks: op index → the boolean clamp mask of a ReLU/ReLU6 convolution or GroupNorm.
        pre: op index → the int8 pre-activation of an h-swish/h-sigmoid convolution.
        stats: op index → GroupNorm statistics (N, groups, 2): mean and rstd, float32.
        logits: (N, classes) float32.
    """

    acts: dict[int, Tensor] = field(default_factory=dict)
    masks: dict[int, Tensor] = field(default_factory=dict)
    pre: dict[int, Tensor] = field(default_factory=dict)
    stats: dict[int, np.ndarray] = field(default_factory=dict)
    logits: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))


@dataclass(frozen=True)
class EmitRecord:
    """One write into a gradient buffer: op ``op_index`` added ``contribution`` to tensor
    ``tensor``'s gradient, which held ``before`` (None: fresh) and then ``after``."""

    op_index: int
    tensor: int
    contribution: K.Contribution
    before: K.Grad | None
    after: K.Grad


@dataclass
class StepRecord:
    """One training step: its forward pass, its loss (float64, from the float32 logits), the
    logit gradient, every activation gradient as its writer consumed it (masked, for a
    ReLU/ReLU6 convolution; through the derivative table, for h-swish/h-sigmoid), every write
    into a gradient buffer in order, and the feature gradient as the classifier wrote it (None
    when nothing back-propagates past the classifier)."""

    forward: ForwardRecord
    loss: float
    grad_logits: np.ndarray
    grads: dict[int, K.Grad] = field(default_factory=dict)
    emits: list[EmitRecord] = field(default_factory=list)
    feature_grad: K.Grad | None = None


# --- forward ---------------------------------------------------------------------------------


def _conv_forward(net: QuantizedNet, layer: QConv, rec: ForwardRecord) -> None:
    op = layer.op
    x_q = net.acts[op.inputs[0]]
    y_q = layer.pre if layer.pre is not None else net.acts[op.output]
    y, mask = K.conv2d_s8(
        rec.acts[op.inputs[0]], x_q.zero, layer.weight, layer.bias, layer.mult, layer.shift,
        y_q.zero, layer.act_min, layer.act_max, layer.stride, net.graph.pads(op), layer.groups,
    )  # fmt: skip
    if layer.act_table is not None:
        rec.pre[op.index] = y
        y = K.act_table_s8(y, layer.act_table)
    rec.acts[op.output] = y
    if layer.keeps_mask:
        rec.masks[op.index] = mask


def _mul_forward(net: QuantizedNet, layer: QMul, rec: ForwardRecord) -> None:
    x, s = layer.op.inputs
    rec.acts[layer.op.output] = K.mul_s8(
        rec.acts[x], rec.acts[s], net.acts[x].zero, net.acts[s].zero, layer.mult, layer.shift,
        net.acts[layer.op.output].zero,
    )  # fmt: skip


def _add_forward(net: QuantizedNet, layer: QAdd, rec: ForwardRecord) -> None:
    op = layer.op
    y, mask = _sum(net, layer, *(rec.acts[t] for t in op.inputs))
    rec.acts[op.output] = y
    if mask is not None:
        rec.masks[op.index] = mask


def _sum(net: QuantizedNet, layer: QAdd, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor | None]:
    """The int8 sum of ``a`` and ``b`` (values of the add's inputs), and where it has a ReLU
    (a ResNet block's), the mask of what the clamp left unchanged."""
    ta, tb = layer.op.inputs
    args = (
        a, b, net.acts[ta].zero, net.acts[tb].zero, layer.a_mult, layer.b_mult, layer.shift,
        net.acts[layer.op.output].zero,
    )  # fmt: skip
    if not layer.keeps_mask:
        return K.add_s8(*args), None
    return K.add_act_s8(*args, layer.act_min, layer.act_max)


def _gap_forward(net: QuantizedNet, layer: QGap, rec: ForwardRecord) -> None:
    (x,) = layer.op.inputs
    rec.acts[layer.op.output] = K.gap_s8(
        rec.acts[x], net.acts[x].zero, layer.mult, layer.shift, net.acts[layer.op.output].zero
    )


def _pool_forward(net: QuantizedNet, layer: QPool, rec: ForwardRecord) -> None:
    (x,) = layer.op.inputs
    rec.acts[layer.op.output] = K.avgpool_s8(
        rec.acts[x], net.acts[x].zero, (layer.ratio, layer.ratio_w), layer.mult, layer.shift,
        net.acts[layer.op.output].zero,
    )  # fmt: skip


def _cat_forward(net: QuantizedNet, layer: QCat, rec: ForwardRecord) -> None:
    rec.acts[layer.op.output] = torch.cat([rec.acts[t] for t in layer.op.inputs], dim=1)


def _maxpool_forward(net: QuantizedNet, layer: QMaxPool, rec: ForwardRecord) -> None:
    (x,) = layer.op.inputs
    pads = net.graph.pool_pads(layer.op)
    rec.acts[layer.op.output] = K.maxpool_s8(rec.acts[x], layer.kernel, layer.stride, pads)


def _upsample_forward(net: QuantizedNet, layer: QUpsample, rec: ForwardRecord) -> None:
    (x,) = layer.op.inputs
    rec.acts[layer.op.output] = K.upsample_s8(
        rec.acts[x], net.acts[x].zero, layer.rows, layer.cols, layer.mult, layer.shift,
        net.acts[layer.op.output].zero,
    )  # fmt: skip


def _groupnorm_forward(net: QuantizedNet, layer: QGroupNorm, rec: ForwardRecord) -> None:
    op = layer.op
    x_q, y_q = net.acts[op.inputs[0]], net.acts[op.output]
    ys, masks, stats = [], [], []
    for image in rec.acts[op.inputs[0]].split(1):
        y, mask, st = K.groupnorm_f32(
            image, x_q.zero, x_q.scale, layer.weight, layer.bias, layer.groups,
            y_q.scale, y_q.zero, layer.act_min, layer.act_max, layer.eps,
        )  # fmt: skip
        ys.append(y), masks.append(mask), stats.append(st)
    rec.acts[op.output] = torch.cat(ys)
    rec.stats[op.index] = np.stack(stats)
    if layer.keeps_mask:
        rec.masks[op.index] = torch.cat(masks)


def _linear_forward(net: QuantizedNet, layer: QLinear, rec: ForwardRecord) -> None:
    (x,) = layer.op.inputs
    q = net.acts[x]
    feats = rec.acts[x].flatten(1)
    rec.logits = np.stack(
        [K.linear_f32(f, q.zero, q.scale, layer.weight, layer.bias) for f in feats]
    )


_FORWARD: dict[type, Callable] = {
    QConv: _conv_forward,
    QAdd: _add_forward,
    QMul: _mul_forward,
    QGap: _gap_forward,
    QPool: _pool_forward,
    QMaxPool: _maxpool_forward,
    QCat: _cat_forward,
    QUpsample: _upsample_forward,
    QGroupNorm: _groupnorm_forward,
    QLinear: _linear_forward,
}


def forward(net: QuantizedNet, x: Tensor) -> ForwardRecord:
    """The integer forward pass of int8 images ``x`` (N, 3, R, R) (int64 values, e.g. from
    :meth:`QuantizedNet.quantize_input`)."""
    rec = ForwardRecord()
    rec.acts[net.graph.input] = x.long()
    for layer in net.layers:
        _FORWARD[type(layer)](net, layer, rec)
    return rec


def _window(acts: dict[int, Tensor], held: dict[int, Region], t: int, win: Region) -> Tensor:
    """Window ``win`` of tensor ``t``, which holds its region ``held[t]``."""
    r = held[t] if t in held else Region(0, acts[t].shape[2], 0, acts[t].shape[3])  # the input
    return acts[t][..., win.r0 - r.r0 : win.r1 - r.r0, win.c0 - r.c0 : win.c1 - r.c0]


def forward_patched(net: QuantizedNet, x: Tensor, plan: PatchPlan) -> Tensor:
    """The output of the frozen prefix ``plan`` describes (:mod:`tinytune.ir.patches`),
    computed patch by patch as the device runs it: each op of the stage on its held regions
    with the plan's padding, an addition on its window of each input, each patch's window
    copied into the whole output. It equals :func:`forward`'s tensor ``plan.output``, bit for
    bit (the regions are the receptive fields, computed and not approximated)."""
    graph = net.graph
    layers = {layer.op.index: layer for layer in net.layers}
    out = torch.zeros(graph.tensors[plan.output].shape, dtype=torch.long)
    for p, (window, held) in enumerate(zip(plan.patches, plan.held, strict=True)):
        acts: dict[int, Tensor] = {graph.input: x.long()}
        for op in graph.ops[: plan.stage_end]:
            layer = layers[op.index]
            if isinstance(layer, QConv):
                y_q = layer.pre if layer.pre is not None else net.acts[op.output]
                y, _ = K.conv2d_s8(
                    acts[op.inputs[0]], net.acts[op.inputs[0]].zero, layer.weight, layer.bias,
                    layer.mult, layer.shift, y_q.zero, layer.act_min, layer.act_max,
                    layer.stride, plan.pads(graph, op, p), layer.groups,
                )  # fmt: skip
                if layer.act_table is not None:
                    y = K.act_table_s8(y, layer.act_table)
            elif isinstance(layer, QMaxPool):
                y = K.maxpool_s8(
                    acts[op.inputs[0]], layer.kernel, layer.stride, plan.pads(graph, op, p)
                )
            elif isinstance(layer, QCat):
                y = torch.cat([_window(acts, held, t, held[op.output]) for t in op.inputs], 1)
            elif isinstance(layer, QAdd):
                a, b = (_window(acts, held, t, held[op.output]) for t in op.inputs)
                y, _ = _sum(net, layer, a, b)
            else:
                raise QuantizationError(f"{op.name}: a {op.kind} cannot run patch by patch")
            r = held[op.output]
            if tuple(y.shape[2:]) != (r.h, r.w):
                raise AssertionError(f"{op.name}: {tuple(y.shape)} for region {r}")
            acts[op.output] = y
        r = held[plan.output]
        out[..., window.r0 : window.r1, window.c0 : window.c1] = acts[plan.output][
            ..., window.r0 - r.r0 : window.r1 - r.r0, window.c0 - r.c0 : window.c1 - r.c0
        ]
    return out


# --- backward --------------------------------------------------------------------------------


@dataclass
class _Backward:
    net: QuantizedNet
    record: ForwardRecord
    lr: float
    qas: bool = True
    grads: dict[int, K.Grad] = field(default_factory=dict)
    emits: list[EmitRecord] = field(default_factory=list)

    def needs_grad(self, tensor: int) -> bool:
        return self.net.graph.tensors[tensor].requires_grad

    def emit(self, op_index: int, tensor: int, contribution: K.Contribution) -> None:
        before = self.grads.get(tensor)
        self.grads[tensor] = K.emit(contribution, before)
        self.emits.append(EmitRecord(op_index, tensor, contribution, before, self.grads[tensor]))


def _conv_backward(b: _Backward, layer: QConv) -> None:
    op = layer.op
    gy = b.grads[op.output]
    if layer.keeps_mask:
        gy = K.grad_mask(gy, b.record.masks[op.index])
        b.grads[op.output] = gy
    elif layer.grad_table is not None:
        pre = b.record.pre[op.index]
        gy = K.grad_act_table(gy, pre, layer.grad_table, K.ACT_GRAD_FRAC_BITS)
        b.grads[op.output] = gy
    (x,) = op.inputs
    if b.needs_grad(x):
        b.emit(
            op.index,
            x,
            K.conv2d_grad_input(
                gy, layer.weight, layer.grad_mult, layer.grad_frac_bits,
                tuple(b.record.acts[x].shape), layer.stride, b.net.graph.pads(op), layer.groups,
            ),
        )  # fmt: skip
    if not (layer.bias_trained or layer.trained_channels):
        return
    x_q = b.net.acts[x]
    upd = qas_multipliers(layer, x_q.scale, b.lr, qas=b.qas)
    if layer.trained_channels:
        w_train, w_frozen = layer.split_weight()
        x_saved = b.record.acts[x][:, : layer.saved_channels]
        w_new, _ = K.conv2d_update_weight(
            gy, x_saved, x_q.zero, w_train, upd.weight_mult, upd.weight_shift,
            layer.stride, b.net.graph.pads(op), layer.groups, layer.depthwise,
        )  # fmt: skip
        dim = 0 if layer.depthwise else 1
        layer.weight = torch.cat([w_new, w_frozen], dim=dim)
    if layer.bias_trained:
        layer.bias, _ = K.update_bias(gy, layer.bias, upd.bias_mult, upd.bias_shift)


def _add_backward(b: _Backward, layer: QAdd) -> None:
    gy = b.grads[layer.op.output]
    if layer.keeps_mask:  # through the ReLU first
        gy = K.grad_mask(gy, b.record.masks[layer.op.index])
        b.grads[layer.op.output] = gy
    for t in layer.op.inputs:
        if b.needs_grad(t):
            b.emit(layer.op.index, t, K.add_grad_input(gy))


def _mul_backward(b: _Backward, layer: QMul) -> None:
    op = layer.op
    x, s = op.inputs
    gy = b.grads[op.output]
    acts, q = b.record.acts, b.net.acts
    if b.needs_grad(x):
        b.emit(op.index, x, K.mul_grad_x(gy, acts[s], q[s].zero, layer.s_mult, layer.s_frac_bits))
    if b.needs_grad(s):
        c = K.mul_grad_scale(gy, acts[x], q[x].zero, layer.x_mult, layer.x_frac_bits)
        b.emit(op.index, s, c)


def _gap_backward(b: _Backward, layer: QGap) -> None:
    (x,) = layer.op.inputs
    if b.needs_grad(x):
        hw = tuple(b.record.acts[x].shape[2:])
        gy = b.grads[layer.op.output]
        b.emit(layer.op.index, x, K.gap_grad_input(gy, layer.hw_mult, layer.hw_frac_bits, hw))


def _pool_backward(b: _Backward, layer: QPool) -> None:
    (x,) = layer.op.inputs
    if b.needs_grad(x):
        gy = b.grads[layer.op.output]
        shape = tuple(b.record.acts[x].shape)
        ratio = (layer.ratio, layer.ratio_w)
        c = K.avgpool_grad_input(gy, ratio, layer.area_mult, layer.area_frac_bits, shape)
        b.emit(layer.op.index, x, c)


def _cat_backward(b: _Backward, layer: QCat) -> None:
    gy = b.grads[layer.op.output]
    c0 = 0
    for t in layer.op.inputs:
        c1 = c0 + b.net.graph.tensors[t].shape[1]
        if b.needs_grad(t):  # its channels of the output's gradient, as they are
            part = K.Grad(gy.mantissa[:, c0:c1], gy.exp)
            b.emit(layer.op.index, t, K.add_grad_input(part))
        c0 = c1


def _maxpool_backward(b: _Backward, layer: QMaxPool) -> None:
    (x,) = layer.op.inputs
    if b.needs_grad(x):
        gy = b.grads[layer.op.output]
        pads = b.net.graph.pool_pads(layer.op)
        c = K.maxpool_grad_input(gy, b.record.acts[x], layer.kernel, layer.stride, pads)
        b.emit(layer.op.index, x, c)


def _upsample_backward(b: _Backward, layer: QUpsample) -> None:
    (x,) = layer.op.inputs
    if b.needs_grad(x):
        gy = b.grads[layer.op.output]
        b.emit(
            layer.op.index, x, K.upsample_grad_input(gy, layer.rows, layer.cols, layer.frac_bits)
        )


def _groupnorm_backward(b: _Backward, layer: QGroupNorm) -> None:
    op = layer.op
    gy = b.grads[op.output]
    if layer.keeps_mask:
        gy = K.grad_mask(gy, b.record.masks[op.index])
        b.grads[op.output] = gy
    (x,) = op.inputs
    want = b.needs_grad(x)
    if want and x in b.grads:
        raise QuantizationError(f"{op.name}: a GroupNorm input with several readers")
    x_q = b.net.acts[x]
    layer.weight, layer.bias, gx = K.groupnorm_f32_backward(
        gy, b.record.acts[x], x_q.zero, x_q.scale, layer.weight, layer.bias,
        b.record.stats[op.index][0], layer.groups, b.lr, want,
    )  # fmt: skip
    if gx is not None:
        b.grads[x] = gx


_BACKWARD: dict[type, Callable] = {
    QConv: _conv_backward,
    QAdd: _add_backward,
    QMul: _mul_backward,
    QGap: _gap_backward,
    QPool: _pool_backward,
    QMaxPool: _maxpool_backward,
    QCat: _cat_backward,
    QUpsample: _upsample_backward,
    QGroupNorm: _groupnorm_backward,
}


def _cross_entropy(logits: np.ndarray, label: int) -> float:
    z = logits.astype(np.float64)
    m = z.max()
    return float(m + math.log(np.exp(z - m).sum()) - z[label])


def train_step(
    net: QuantizedNet, x: Tensor, label: int, lr: float, *, qas: bool = True
) -> StepRecord:
    """One SGD step on one int8 image ``x`` (1, 3, R, R) with class ``label``; updates the
    trained parameters of ``net`` in place and returns what happened. ``qas=False`` updates
    the integer weights and biases without quantization-aware scaling (the ablation; the
    float32 classifier and GroupNorm parameters are unchanged by it)."""
    if x.shape[0] != 1:
        raise QuantizationError(f"the training step takes one image (batch 1), got {x.shape[0]}")
    n_classes = net.graph.n_classes
    if not 0 <= label < n_classes:
        raise QuantizationError(f"label {label} is outside the {n_classes} classes")
    record = forward(net, x)
    logits = record.logits[0]
    g = K.softmax_xent_grad(logits, label)
    b = _Backward(net, record, lr, qas)
    head = net.layers[-1]
    assert isinstance(head, QLinear)
    (feat,) = head.op.inputs
    q = net.acts[feat]
    head.weight, head.bias, gx = K.linear_f32_backward(
        record.acts[feat].flatten(), q.zero, q.scale, head.weight, head.bias, g, lr,
        b.needs_grad(feat),
    )  # fmt: skip
    if gx is not None:  # the features' shape: pooled (1, C, 1, 1), or a flattened map
        gx = K.Grad(gx.mantissa.view(record.acts[feat].shape), gx.exp)
        b.grads[feat] = gx
    for layer in reversed(net.layers[:-1]):
        if b.needs_grad(layer.op.output):
            _BACKWARD[type(layer)](b, layer)
    return StepRecord(record, _cross_entropy(logits, label), g, b.grads, b.emits, gx)
