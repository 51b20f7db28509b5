"""The one description of a network that the hardware models and the exporter read.

A :class:`Graph` is a list of :class:`Op` in execution order over :class:`TensorInfo` values,
traced from the very torch module that is fine-tuned (:func:`tinytune.ir.trace`). Each op says
what it computes (kind, shapes, parameters), what the update scheme trains in it, and whether a
gradient has to flow into its inputs. Shapes include the batch dimension.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["OP_KINDS", "TABLE_ACTIVATIONS", "Graph", "Op", "ParamInfo", "TensorInfo"]

OP_KINDS = (
    "conv", "add", "mul", "cat", "gap", "avgpool", "maxpool", "upsample", "groupnorm",
    "linear",
)  # fmt: skip
TABLE_ACTIVATIONS = ("hswish", "hsigmoid", "sigmoid", "silu")
"""The activations that keep their input (the pre-activation) for backward; the int8 step
computes them through tables."""


@dataclass(frozen=True)
class TensorInfo:
    """An activation tensor: its id, shape (N, C, H, W) or (N, F), and whether autograd needs
    its gradient (some parameter upstream of it is trained)."""

    id: int
    shape: tuple[int, ...]
    requires_grad: bool

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class ParamInfo:
    """The parameters of one op and what the update scheme trains among them.

    Attributes:
        weight_shape: shape of the weight (empty when the op has none).
        trained_weight: elements of the weight that are trained.
        trained_in_channels: k, the leading input channels (depthwise: channels) trained.
        bias: bias elements; ``bias_trained`` whether they are trained.
        scale: per-channel scale elements (folded BatchNorm γ or GroupNorm γ);
            ``scale_trained`` whether they are trained.
    """

    weight_shape: tuple[int, ...] = ()
    trained_weight: int = 0
    trained_in_channels: int = 0
    bias: int = 0
    bias_trained: bool = False
    scale: int = 0
    scale_trained: bool = False

    @property
    def weight(self) -> int:
        return math.prod(self.weight_shape) if self.weight_shape else 0

    @property
    def trained(self) -> int:
        """Trained parameter elements."""
        return (
            self.trained_weight
            + (self.bias if self.bias_trained else 0)
            + (self.scale if self.scale_trained else 0)
        )

    @property
    def any_trained(self) -> bool:
        return self.trained > 0


@dataclass(frozen=True)
class Op:
    """One operation.

    Attributes:
        index: position in execution order.
        name: the module path in the traced network (``stages_.4.blocks_3_dw``: stage 4, block 3).
        kind: one of :data:`OP_KINDS`.
        inputs: ids of the input tensors; ``output``: id of the output tensor.
        act: fused activation (``none``, ``relu``, ``relu6``, ``hswish``, ``hsigmoid``).
        conv_index: the update-scheme index of a backbone convolution, else ``None``.
        role: ``stem``/``pw1``/``dw``/``pw2``/``se1``/``se2``/``head``/``lite``/... .
        attrs: kernel size, stride, padding (before: top, and ``pad_left`` where the left
            differs), groups, GroupNorm groups, pooling ratio; a convolution's ``kernel_w`` and
            ``stride_w`` where they differ from ``kernel`` and ``stride`` (down); a max
            pooling's per axis (``kernel_h``, ``kernel_w``, ``stride_h``, ``stride_w``,
            ``pad_top``, ``pad_left``).
        params: parameters and what is trained.
        macs: multiply-accumulates of the forward pass.
    """

    index: int
    name: str
    kind: str
    inputs: tuple[int, ...]
    output: int
    act: str = "none"
    conv_index: int | None = None
    role: str = ""
    attrs: dict[str, int] = field(default_factory=dict)
    params: ParamInfo = field(default_factory=ParamInfo)
    macs: int = 0

    @property
    def kernel_hw(self) -> tuple[int, int]:
        """A convolution's kernel (kh, kw): ``kernel``, and ``kernel_w`` where it differs."""
        k = self.attrs["kernel"]
        return k, self.attrs.get("kernel_w", k)

    @property
    def stride_hw(self) -> tuple[int, int]:
        """A convolution's stride down and across: ``stride``, and ``stride_w`` where it
        differs."""
        s = self.attrs["stride"]
        return s, self.attrs.get("stride_w", s)

    @property
    def square(self) -> bool:
        """Whether a convolution's kernel and stride are the same along both axes."""
        return "kernel_w" not in self.attrs and "stride_w" not in self.attrs


@dataclass(frozen=True)
class Graph:
    """A traced network: ops in execution order, their tensors, and the network's input and
    output tensor ids."""

    ops: tuple[Op, ...]
    tensors: dict[int, TensorInfo]
    input: int
    output: int
    n_classes: int

    @property
    def batch_size(self) -> int:
        return self.tensors[self.input].shape[0]

    def consumers(self) -> dict[int, list[int]]:
        """Tensor id → indices of the ops that read it."""
        out: dict[int, list[int]] = {t: [] for t in self.tensors}
        for op in self.ops:
            for t in op.inputs:
                out[t].append(op.index)
        return out

    def producer(self) -> dict[int, int]:
        """Tensor id → index of the op that writes it (the network input has none)."""
        return {op.output: op.index for op in self.ops}

    def pads(self, op: Op) -> tuple[int, int, int, int]:
        """The zero padding of convolution ``op``'s input as (top, bottom, left, right): its
        ``padding`` attribute before (top, and left unless ``pad_left`` says otherwise), and
        after whatever its output's size implies, ``(out − 1)·stride + kernel − padding − in``
        (TensorFlow's "SAME" pads one more after than before at stride 2 on an even size;
        negative: input rows no output reads)."""
        (kh, kw), (sh, sw) = op.kernel_hw, op.stride_hw
        top = op.attrs["padding"]
        left = op.attrs.get("pad_left", top)
        (_, _, h_in, w_in) = self.tensors[op.inputs[0]].shape
        (_, _, h_out, w_out) = self.tensors[op.output].shape
        bottom = (h_out - 1) * sh + kh - top - h_in
        right = (w_out - 1) * sw + kw - left - w_in
        return top, bottom, left, right

    def pool_pads(self, op: Op) -> tuple[int, int, int, int]:
        """The padding of max pooling ``op``'s input as (top, bottom, left, right), the sides
        after following from its output's size as in :meth:`pads` (negative: input rows no
        window reads)."""
        a = op.attrs
        (_, _, h_in, w_in) = self.tensors[op.inputs[0]].shape
        (_, _, h_out, w_out) = self.tensors[op.output].shape
        bottom = (h_out - 1) * a["stride_h"] + a["kernel_h"] - a["pad_top"] - h_in
        right = (w_out - 1) * a["stride_w"] + a["kernel_w"] - a["pad_left"] - w_in
        return a["pad_top"], bottom, a["pad_left"], right

    def total_macs(self) -> int:
        return sum(op.macs for op in self.ops)

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "input": self.input,
            "output": self.output,
            "n_classes": self.n_classes,
            "tensors": [asdict(t) for t in self.tensors.values()],
            "ops": [asdict(op) for op in self.ops],
        }
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Graph:
        data = json.loads(text)
        tensors = {
            t["id"]: TensorInfo(t["id"], tuple(t["shape"]), t["requires_grad"])
            for t in data["tensors"]
        }
        ops = []
        for o in data["ops"]:
            p = o["params"]
            p["weight_shape"] = tuple(p["weight_shape"])
            ops.append(
                Op(
                    index=o["index"],
                    name=o["name"],
                    kind=o["kind"],
                    inputs=tuple(o["inputs"]),
                    output=o["output"],
                    act=o["act"],
                    conv_index=o["conv_index"],
                    role=o["role"],
                    attrs=o["attrs"],
                    params=ParamInfo(**p),
                    macs=o["macs"],
                )
            )
        return cls(tuple(ops), tensors, data["input"], data["output"], data["n_classes"])
