"""The quantized network: the traced graph of a candidate (batch 1, the device's) and, per op,
the integer parameters of :mod:`tinytune.quant.arith` that
:func:`tinytune.quant.quantizer.quantize` computes (see there for the scheme).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from tinytune.ir import TABLE_ACTIVATIONS, Graph, Op
from tinytune.quant.kernels import (
    INTERP_FRAC_BITS,
    InterpAxis,
)

__all__ = [
    "SUPPORTED",
    "ActQuant",
    "QAdd",
    "QCat",
    "QConv",
    "QGap",
    "QGroupNorm",
    "QLinear",
    "QMaxPool",
    "QMul",
    "QPool",
    "QUpsample",
    "QuantizedNet",
    "UpdateMultipliers",
]

SUPPORTED = {
    "conv": ("none", "relu", "relu6", *TABLE_ACTIVATIONS),
    "add": ("none", "relu", "relu6"),
    "mul": ("none",),
    "gap": ("none",),
    "avgpool": ("none",),
    "maxpool": ("none",),
    "cat": ("none",),
    "upsample": ("none",),
    "groupnorm": ("none", "relu"),
}
MAX_WEIGHT_GRAD_PIXELS = (2**31 - 1) // (127 * 255)  # keeps Σ_p γ·(x − z) inside int32


@dataclass(frozen=True)
class ActQuant:
    """The quantization of one activation tensor: real = scale·(q − zero)."""

    scale: float
    zero: int

    @classmethod
    def from_range(cls, lo: float, hi: float) -> ActQuant:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        if hi - lo < 1e-8:
            hi = lo + 1e-8
        scale = (hi - lo) / 255.0
        zero = int(np.clip(round(-128.0 - lo / scale), -128, 127))
        return cls(scale, zero)

    def quantize(self, x: Tensor) -> Tensor:
        """Float → int8 (int64 tensor), round half to even; done offline (input images)."""
        q = torch.round(x.double() / self.scale) + self.zero
        return torch.clamp(q, -128, 127).long()

    def dequantize(self, q: Tensor) -> Tensor:
        return (q.double() - self.zero) * self.scale


def _bounds(act: str, out: ActQuant) -> tuple[int, int]:
    if act == "none":
        return -128, 127
    if act == "relu":
        return out.zero, 127
    return out.zero, min(127, out.zero + round(6.0 / out.scale))


@dataclass
class QConv:
    """A quantized convolution; ``weight`` and ``bias`` change when the step trains them.

    Attributes:
        weight: int8 values (int64 tensor) (O, C/groups, k, k).
        w_scale: per-output-channel weight scales (float64).
        bias: int32 values (int64 tensor), scale s_x·s_w[o].
        mult, shift: requantisation M[o]·2^−n[o] ≈ s_x·s_w[o]/s_y.
        act_min, act_max: the output clamp (ReLU/ReLU6 folded in).
        grad_mult, grad_frac_bits: m_o ≈ s_w[o]·2^F for the input gradient.
        pre: for a table activation (h-swish, h-sigmoid), the quantization of the
            pre-activation, which the requantisation targets (clamp [-128, 127]); else None.
        act_table, grad_table: its 256-entry output and derivative tables, indexed by
            pre-activation + 128 (see :func:`activation_tables`).
    """

    op: Op
    weight: Tensor
    w_scale: Tensor
    bias: Tensor
    mult: Tensor
    shift: Tensor
    act_min: int
    act_max: int
    grad_mult: Tensor
    grad_frac_bits: int
    pre: ActQuant | None = None
    act_table: Tensor | None = None
    grad_table: Tensor | None = None

    @property
    def stride(self) -> int | tuple[int, int]:
        """One stride, or (down, across) where they differ (as PyTorch takes it)."""
        sh, sw = self.op.stride_hw
        return sh if sh == sw else (sh, sw)

    @property
    def padding(self) -> int:
        """The zero padding before (top); :meth:`Graph.pads` has every side."""
        return self.op.attrs["padding"]

    @property
    def groups(self) -> int:
        return self.op.attrs["groups"]

    @property
    def depthwise(self) -> bool:
        o = self.weight.shape[0]
        return self.groups > 1 and self.groups == o and self.weight.shape[1] == 1

    @property
    def trained_channels(self) -> int:
        """k: the leading input channels (depthwise: channels) of the weight that are trained,
        along the weight's split dimension (a grouped convolution trains all C/groups)."""
        if not self.op.params.trained_weight:
            return 0
        dim = 0 if self.depthwise else 1
        return min(self.op.params.trained_in_channels, self.weight.shape[dim])

    @property
    def saved_channels(self) -> int:
        """The leading input channels that the weight update reads (kept from the forward)."""
        return self.op.params.trained_in_channels if self.op.params.trained_weight else 0

    @property
    def bias_trained(self) -> bool:
        return self.op.params.bias_trained

    @property
    def keeps_mask(self) -> bool:
        return self.op.act in ("relu", "relu6")

    @property
    def keeps_pre_activation(self) -> bool:
        return self.act_table is not None

    def split_weight(self) -> tuple[Tensor, Tensor]:
        """(trained part, frozen part): the first k input channels (depthwise: channels)."""
        k = self.trained_channels
        dim = 0 if self.depthwise else 1
        c = self.weight.shape[dim]
        train, frozen = self.weight.split([k, c - k], dim=dim)
        return train, frozen


@dataclass
class QAdd:
    """y = a + b: M_a·2^−n ≈ s_a/s_y, M_b·2^−n ≈ s_b/s_y; with a ReLU or ReLU6 after it,
    clamped to [act_min, act_max] (the unclamped elements' mask kept for backward)."""

    op: Op
    a_mult: int
    b_mult: int
    shift: int
    act_min: int = -128
    act_max: int = 127

    @property
    def keeps_mask(self) -> bool:
        return self.op.act in ("relu", "relu6")


@dataclass
class QMul:
    """y = x·s (squeeze-and-excitation): M·2^−n ≈ s_x·s_s/s_y; backward m_s ≈ s_s·2^F_s
    (gradient to x) and m_x ≈ s_x·2^F_x (gradient to s)."""

    op: Op
    mult: int
    shift: int
    x_mult: int
    x_frac_bits: int
    s_mult: int
    s_frac_bits: int


@dataclass
class QGap:
    """Global average pooling: M·2^−n ≈ s_x/(s_y·HW); backward m_hw ≈ 2^F/HW."""

    op: Op
    mult: int
    shift: int
    hw_mult: int
    hw_frac_bits: int


@dataclass
class QPool:
    """r×r_w average pooling (``ratio``, :attr:`ratio_w`): M·2^−n ≈ s_x/(s_y·r·r_w); backward
    m_a ≈ 2^F/(r·r_w)."""

    op: Op
    ratio: int
    mult: int
    shift: int
    area_mult: int
    area_frac_bits: int

    @property
    def ratio_w(self) -> int:
        """The window's width and stride across: ``ratio`` unless the op says otherwise."""
        return self.op.attrs.get("ratio_w", self.ratio)


@dataclass
class QCat:
    """The concatenation of its inputs' channels; every input is quantized as its output is
    (:func:`~tinytune.quant.quantizer.quantize` ties them), so that it is a copy."""

    op: Op


@dataclass
class QMaxPool:
    """Max pooling; its output keeps the input's quantization (the largest of int8 values)."""

    op: Op

    @property
    def kernel(self) -> tuple[int, int]:
        return self.op.attrs["kernel_h"], self.op.attrs["kernel_w"]

    @property
    def stride(self) -> tuple[int, int]:
        return self.op.attrs["stride_h"], self.op.attrs["stride_w"]


@dataclass
class QUpsample:
    """Bilinear upsampling through integer tables; M·2^−n ≈ s_x/(s_y·2^2Q)."""

    op: Op
    rows: InterpAxis
    cols: InterpAxis
    mult: int
    shift: int
    frac_bits: int = INTERP_FRAC_BITS


@dataclass
class QGroupNorm:
    """GroupNorm with float32 γ (C,), β (C,) or None, ε, and the output clamp."""

    op: Op
    weight: np.ndarray
    bias: np.ndarray | None
    groups: int
    eps: float
    act_min: int
    act_max: int

    @property
    def keeps_mask(self) -> bool:
        return self.op.act == "relu"


@dataclass
class QLinear:
    """The float32 classifier (J, C) and its bias (J,)."""

    op: Op
    weight: np.ndarray
    bias: np.ndarray


QLayer = QConv | QAdd | QMul | QCat | QGap | QPool | QMaxPool | QUpsample | QGroupNorm | QLinear


@dataclass
class QuantizedNet:
    """A quantized network: its graph (batch 1), one quantization per activation tensor and
    one quantized layer per op, in execution order."""

    graph: Graph
    acts: dict[int, ActQuant]
    layers: tuple[QLayer, ...]
    calibration: str = "minmax"

    def quantize_input(self, images: Tensor) -> Tensor:
        """Float images (N, 3, R, R) → int8 values (int64 tensor)."""
        return self.acts[self.graph.input].quantize(images)

    def clone(self) -> QuantizedNet:
        return copy.deepcopy(self)

    def trained_state(self) -> dict[str, Tensor | np.ndarray]:
        """Copies of every parameter tensor, keyed ``<op name>.weight`` / ``.bias``."""
        state: dict[str, Tensor | np.ndarray] = {}
        for layer in self.layers:
            if isinstance(layer, QConv | QLinear | QGroupNorm):
                state[f"{layer.op.name}.weight"] = copy.deepcopy(layer.weight)
                if layer.bias is not None:
                    state[f"{layer.op.name}.bias"] = copy.deepcopy(layer.bias)
        return state


@dataclass(frozen=True)
class UpdateMultipliers:
    """Per output channel, M·2^−n ≈ lr/s_b[o] (bias) and ≈ lr·s_x/s_w[o] (weight)."""

    bias_mult: Tensor
    bias_shift: Tensor
    weight_mult: Tensor
    weight_shift: Tensor
