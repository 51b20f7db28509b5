"""The modules of a network that tinytune fine-tunes.

Every network, a built-in family's sub-network or a user's, is built from an op graph of these
modules (:class:`~tinytune.models.graphnet.GraphNet`): every convolution becomes a
:class:`ConvUnit` with its BatchNorm folded into the weight and a bias (as it runs on a
device), and every other operation that touches activations is a leaf module of its own, so
that :mod:`tinytune.ir` can trace the one network that is trained.

Leaf modules (the op set): :class:`ConvUnit`, :class:`Add`, :class:`Mul`, :class:`Cat`,
:class:`GlobalAvgPool`, :class:`AvgPool`, :class:`MaxPool`, :class:`GroupNormUnit`,
:class:`Upsample`, :class:`Classifier`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinytune.errors import ModelError
from tinytune.models.ops import Padding, masked_clamp, sparse_conv2d

__all__ = [
    "ACTIVATIONS",
    "SAME",
    "Add",
    "AvgPool",
    "Cat",
    "Classifier",
    "ConvUnit",
    "GlobalAvgPool",
    "GroupNormUnit",
    "LiteResidual",
    "LiteSite",
    "MaxPool",
    "Mul",
    "Upsample",
    "apply_activation",
    "same_padding",
]

ACTIVATIONS = ("none", "relu", "relu6", "hswish", "hsigmoid", "sigmoid", "silu")

SAME = "same"
"""The ``padding`` of a :class:`ConvUnit` that pads as TensorFlow's "SAME" does
(:func:`same_padding`), for weights trained with it."""


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's "SAME" padding of one axis: (before, after).

    The output has ⌈n/s⌉ positions; the total padding p = max((⌈n/s⌉ − 1)·s + k − n, 0) is
    split p // 2 before and the rest after. At stride 2 on an even size a 3×3 kernel gets
    (0, 1), a 5×5 one (1, 2); at stride 1 an odd kernel gets (k // 2, k // 2), as symmetric
    padding does.
    """
    out = -(-size // stride)  # ⌈n/s⌉
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def apply_activation(x: Tensor, act: str) -> Tensor:
    """ReLU/ReLU6 keep a 1-bit mask for backward; h-swish, h-sigmoid, sigmoid and SiLU
    (swish) keep their fp32 input."""
    if act == "none":
        return x
    if act == "relu":
        return masked_clamp(x)
    if act == "relu6":
        return masked_clamp(x, 6.0)
    if act == "hswish":
        return F.hardswish(x)
    if act == "hsigmoid":
        return F.hardsigmoid(x)
    if act == "sigmoid":
        return torch.sigmoid(x)
    if act == "silu":
        return F.silu(x)
    raise ValueError(f"unknown activation {act!r}; allowed: {ACTIVATIONS}")


class ConvUnit(nn.Module):
    """Convolution + bias (folded BatchNorm) [+ per-channel scale] + activation.

    The weight is held as two parameters split along the input channels (depthwise: along the
    channels): ``weight_train``, the first k that the update scheme trains, and ``weight_frozen``,
    the rest. Either may be ``None``. ``scale`` exists only when the scheme trains the folded
    BatchNorm γ (y = scale ⊙ conv(x) + bias, scale initialised to 1).

    The kernel is the weight's (kh, kw); ``stride`` is one stride or (down, across).
    ``padding`` is ``p`` zeros on every side, (ph, pw) zeros above and below, left and right,
    or :data:`SAME`: TensorFlow's padding, which depends on the input size
    (:func:`same_padding`; one pixel more after than before for a stride-2 convolution on an
    even size). The traced graph holds the padding before (top and left) of the last input the
    unit saw; the padding after follows from the shapes.

    Attributes:
        index: convolution index from the input (the update-scheme convention).
        kind: ``stem``, ``dw``, ``pw1``, ``pw2``, ``se1``, ``se2``, ``head`` or ``lite``.
    """

    def __init__(
        self,
        weight: Tensor,
        bias: Tensor,
        *,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str = 0,
        groups: int = 1,
        act: str = "none",
        kind: str = "pw",
        index: int = -1,
    ) -> None:
        super().__init__()
        if act not in ACTIVATIONS:
            raise ValueError(f"unknown activation {act!r}; allowed: {ACTIVATIONS}")
        sizes = padding if isinstance(padding, tuple) else (padding,)
        if padding != SAME and not all(isinstance(p, int) and p >= 0 for p in sizes):
            raise ValueError(
                f"padding {padding!r} is neither a size >= 0 nor {SAME!r} (nor a pair of sizes)"
            )
        if isinstance(padding, tuple) and padding[0] == padding[1]:
            padding = padding[0]
        self.out_channels, in_per_group, self.kernel_size, self.kernel_w = weight.shape
        self.in_channels = in_per_group * groups
        self.stride, self.stride_w = stride if isinstance(stride, tuple) else (stride, stride)
        self.padding, self.groups = padding, groups
        self.act, self.kind, self.index = act, kind, index
        self.weight_train: nn.Parameter | None
        self.register_parameter("weight_train", None)
        self.weight_frozen: nn.Parameter | None = nn.Parameter(weight.detach().clone(), False)
        self.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.scale: nn.Parameter | None
        self.register_parameter("scale", None)
        self.in_size: tuple[int, int] | None = None  # (H, W) of the last input

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.in_channels == self.out_channels

    @property
    def split_channels(self) -> int:
        """The channel count along which the weight is split (C_in, or C for depthwise)."""
        return self.out_channels if self.depthwise else self.in_channels

    @property
    def trained_channels(self) -> int:
        """k: how many leading input channels of the weight are trained."""
        if self.weight_train is None:
            return 0
        if self.weight_frozen is None:
            return self.split_channels
        return self.weight_train.shape[0 if self.depthwise else 1]

    def full_weight(self) -> Tensor:
        """The whole weight, (C_out, C_in/groups, k, k)."""
        parts = [w.detach() for w in (self.weight_train, self.weight_frozen) if w is not None]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0 if self.depthwise else 1)

    def set_weight_update(self, ratio: float | None) -> None:
        """Train the first ⌈ratio·C_in⌉ input channels of the weight (``None``: freeze it)."""
        if ratio is not None and self.groups > 1 and not self.depthwise and ratio < 1.0:
            raise ValueError("a grouped convolution can only be trained as a whole")
        full = self.full_weight()
        if ratio == 1.0:  # the whole weight, whatever the grouping
            self.weight_train, self.weight_frozen = nn.Parameter(full.clone()), None
            return
        c = self.split_channels
        k = 0 if ratio is None else math.ceil(ratio * c)
        train, frozen = full.split([k, c - k], dim=0 if self.depthwise else 1)
        self.weight_train = nn.Parameter(train.clone(), requires_grad=True) if k else None
        self.weight_frozen = nn.Parameter(frozen.clone(), requires_grad=False) if k < c else None

    def set_bias_update(self, train: bool) -> None:
        self.bias.requires_grad_(train)

    def set_scale_update(self, train: bool) -> None:
        """Train (or drop) a per-channel scale after the convolution; dropping it folds it into
        the weight and the bias is unchanged since y = s·conv(x) + b."""
        if train and self.scale is None:
            self.scale = nn.Parameter(torch.ones(self.out_channels, dtype=self.bias.dtype))
        elif not train and self.scale is not None:
            s = self.scale.detach()
            full = self.full_weight() * s.view(-1, 1, 1, 1)
            ratio = (
                self.trained_channels / self.split_channels
                if self.weight_train is not None
                else None
            )
            self.weight_train, self.weight_frozen = None, nn.Parameter(full, requires_grad=False)
            self.scale = None
            if ratio is not None:
                self.set_weight_update(ratio)

    @property
    def kernel_hw(self) -> tuple[int, int]:
        return self.kernel_size, self.kernel_w

    @property
    def strides(self) -> int | tuple[int, int]:
        """The stride as PyTorch takes it: one, or (down, across) where they differ."""
        return self.stride if self.stride_w == self.stride else (self.stride, self.stride_w)

    def padding_of(self, height: int, width: int) -> Padding:
        """The padding of an input of ``height`` × ``width``: ``p`` on every side, or
        ``(left, right, top, bottom)`` where they differ."""
        if isinstance(self.padding, tuple):
            ph, pw = self.padding
            return pw, pw, ph, ph
        if self.padding != SAME:
            return self.padding  # type: ignore[return-value]
        top, bottom = same_padding(height, self.kernel_size, self.stride)
        left, right = same_padding(width, self.kernel_w, self.stride_w)
        if top == bottom == left == right:
            return top
        return left, right, top, bottom

    def pre_activation(self, x: Tensor) -> Tensor:
        """The output before the activation: convolution, [scale,] bias."""
        self.in_size = (x.shape[-2], x.shape[-1])
        padding = self.padding_of(*self.in_size)
        if self.scale is None:
            return sparse_conv2d(
                x, self.weight_train, self.weight_frozen, self.bias,
                self.strides, padding, self.groups,
            )  # fmt: skip
        z = sparse_conv2d(
            x, self.weight_train, self.weight_frozen, None,
            self.strides, padding, self.groups,
        )  # fmt: skip
        return torch.addcmul(self.bias.view(1, -1, 1, 1), z, self.scale.view(1, -1, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        return apply_activation(self.pre_activation(x), self.act)

    def padding_before(self) -> tuple[int, int]:
        """The padding before the input (top, left) of the last input the unit saw."""
        if self.padding == SAME and self.in_size is None:
            raise ModelError(
                f"convolution #{self.index} pads {SAME!r}, which depends on the input size; "
                "run it (trace the network) before describing it"
            )
        padding = self.padding_of(*self.in_size) if self.in_size else self.padding_of(0, 0)
        if isinstance(padding, int):
            return padding, padding
        left, _, top, _ = padding
        return top, left

    def ir_describe(self) -> dict[str, Any]:
        trained_w = self.weight_train.numel() if self.weight_train is not None else 0
        top, left = self.padding_before()
        attrs = {"kernel": self.kernel_size, "stride": self.stride, "padding": top}
        attrs["groups"] = self.groups
        # the other axis, where it differs (a square convolution's attributes are as they were)
        for key, value, down in (
            ("kernel_w", self.kernel_w, self.kernel_size),
            ("stride_w", self.stride_w, self.stride),
            ("pad_left", left, top),
        ):
            if value != down:
                attrs[key] = value
        return {
            "kind": "conv",
            "act": self.act,
            "role": self.kind,
            "conv_index": self.index if self.index >= 0 else None,
            "attrs": attrs,
            "params": {
                "weight_shape": tuple(self.full_weight().shape),
                "trained_weight": trained_w,
                "trained_in_channels": self.trained_channels,
                "bias": self.bias.numel(),
                "bias_trained": self.bias.requires_grad,
                "scale": self.scale.numel() if self.scale is not None else 0,
                "scale_trained": self.scale is not None and self.scale.requires_grad,
            },
        }

    def extra_repr(self) -> str:
        return (
            f"#{self.index} {self.kind} {self.in_channels}->{self.out_channels} "
            f"k={self.kernel_size if self.kernel_w == self.kernel_size else self.kernel_hw} "
            f"s={self.strides} p={self.padding} g={self.groups} "
            f"act={self.act} "
            f"train_ch={self.trained_channels}/{self.split_channels}"
        )


class Add(nn.Module):
    """Element-wise sum (residual connections), optionally followed by a ReLU or ReLU6 (as a
    ResNet's block ends); keeps nothing for backward but that activation's 1-bit mask."""

    def __init__(self, act: str = "none") -> None:
        super().__init__()
        if act not in ("none", "relu", "relu6"):
            raise ValueError(
                f"an add's activation {act!r} is not allowed; allowed: none, relu, relu6"
            )
        self.act = act

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return apply_activation(a + b, self.act)

    def ir_describe(self) -> dict[str, Any]:
        return {"kind": "add", "act": self.act}

    def extra_repr(self) -> str:
        return "" if self.act == "none" else f"act={self.act}"


class Mul(nn.Module):
    """Channel-wise product ``x * s`` of squeeze-and-excitation, s of shape (N, C, 1, 1)."""

    def forward(self, x: Tensor, s: Tensor) -> Tensor:
        return x * s

    def ir_describe(self) -> dict[str, Any]:
        return {"kind": "mul"}


class Cat(nn.Module):
    """The concatenation of its inputs' channels; keeps nothing for backward (the gradient is
    split along the channels)."""

    def forward(self, *xs: Tensor) -> Tensor:
        return torch.cat(xs, dim=1)

    def ir_describe(self) -> dict[str, Any]:
        return {"kind": "cat"}


class GlobalAvgPool(nn.Module):
    """Mean over H and W, keeping (N, C, 1, 1); keeps nothing for backward."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=(2, 3), keepdim=True)

    def ir_describe(self) -> dict[str, Any]:
        return {"kind": "gap"}


class AvgPool(nn.Module):
    """r×r_w average pooling with stride r down and r_w across (``ratio``: r, or (r, r_w); the
    remainder rows and columns are dropped, as ``nn.AvgPool2d((r, r_w))`` does); written as a
    reshape and a mean so that it keeps nothing for backward."""

    def __init__(self, ratio: int | tuple[int, int]) -> None:
        super().__init__()
        self.ratio, self.ratio_w = ratio if isinstance(ratio, tuple) else (ratio, ratio)

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        r, q = self.ratio, self.ratio_w
        x = x[:, :, : h - h % r, : w - w % q]
        return x.reshape(n, c, h // r, r, w // q, q).mean(dim=(3, 5))  # (N, C, H/r, W/r_w)

    def ir_describe(self) -> dict[str, Any]:
        attrs = {"ratio": self.ratio} | (
            {"ratio_w": self.ratio_w} if self.ratio_w != self.ratio else {}
        )
        return {"kind": "avgpool", "attrs": attrs}


class MaxPool(nn.Module):
    """Max pooling of a ``kernel`` (kh, kw) window at ``stride`` (sh, sw) over the input padded
    by ``padding`` (top, left) rows and columns that no window chooses; the output's size
    follows from the input's, as ``nn.MaxPool2d`` gives it. Keeps its input for backward
    (the gradient goes to the first largest value of each window)."""

    def __init__(
        self, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int]
    ) -> None:
        super().__init__()
        self.kernel, self.stride, self.padding = tuple(kernel), tuple(stride), tuple(padding)

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel, self.stride, self.padding)

    def ir_describe(self) -> dict[str, Any]:
        (kh, kw), (sh, sw), (top, left) = self.kernel, self.stride, self.padding
        attrs = {"kernel_h": kh, "kernel_w": kw, "stride_h": sh, "stride_w": sw}
        return {"kind": "maxpool", "attrs": attrs | {"pad_top": top, "pad_left": left}}

    def extra_repr(self) -> str:
        return f"kernel={self.kernel}, stride={self.stride}, padding={self.padding}"


class Upsample(nn.Module):
    """Bilinear upsampling to a given size; keeps nothing for backward."""

    def forward(self, x: Tensor, like: Tensor) -> Tensor:
        if x.shape[2:] == like.shape[2:]:
            return x
        return F.interpolate(x, size=like.shape[2:], mode="bilinear", align_corners=False)

    def ir_describe(self) -> dict[str, Any]:
        return {"kind": "upsample"}


class GroupNormUnit(nn.Module):
    """GroupNorm (8 channels per group) with a trainable scale, an optional bias, and an
    activation. TinyTL trains its lite residuals with GroupNorm so that batch 1 works."""

    def __init__(self, channels: int, *, bias: bool, scale_init: float, act: str) -> None:
        super().__init__()
        self.channels = channels
        self.num_groups = max(1, channels // 8)
        self.act = act
        self.weight = nn.Parameter(torch.full((channels,), float(scale_init)))
        self.bias: nn.Parameter | None = nn.Parameter(torch.zeros(channels)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = F.group_norm(x, self.num_groups, self.weight, self.bias, eps=1e-5)
        return apply_activation(y, self.act)

    def ir_describe(self) -> dict[str, Any]:
        return {
            "kind": "groupnorm",
            "act": self.act,
            "role": "lite",
            "attrs": {"groups": self.num_groups},
            "params": {
                "bias": self.bias.numel() if self.bias is not None else 0,
                "bias_trained": self.bias is not None and self.bias.requires_grad,
                "scale": self.weight.numel(),
                "scale_trained": self.weight.requires_grad,
            },
        }


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, tuple) else (int(v), int(v))


def _one_or_pair(v: tuple[int, int]) -> int | tuple[int, int]:
    """One number where both axes have it, else the pair."""
    return v[0] if v[0] == v[1] else v


class LiteResidual(nn.Module):
    """TinyTL lite residual branch (TinyTL §3.2, tinytl ``LiteResidualModule``).

    avg-pool ↓r → k×k group conv (stride of the block) → GroupNorm → ReLU → 1×1 conv →
    GroupNorm (scale initialised to 0, no bias: the block's own bias plays that role) →
    bilinear upsample to the block output → added to it. At initialisation the branch adds 0.

    ``stride``, ``kernel_size`` and ``downsample`` are one number, or (down, across) for a
    block whose input is not square (a spectrogram; a sensor window of height 1 takes a
    1×k kernel and a 1×r pool).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        stride: int | tuple[int, int],
        kernel_size: int | tuple[int, int],
        groups: int,
        downsample: int | tuple[int, int],
        expand: float,
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        if in_channels % groups:
            raise ValueError(f"{in_channels} channels cannot be split into {groups} groups")
        mid = max(8, int(in_channels * expand + 4) // 8 * 8)  # a multiple of 8, as in TinyTL
        ratio, (kh, kw) = _pair(downsample), _pair(kernel_size)
        self.pool = AvgPool(ratio) if max(ratio) > 1 else None
        w1 = torch.empty(mid, in_channels // groups, kh, kw)
        w2 = torch.empty(out_channels, mid, 1, 1)
        for w in (w1, w2):  # He init, fan-out (tinytl init_models)
            fan_out = w.shape[0] * w.shape[2] * w.shape[3]
            w.normal_(0.0, math.sqrt(2.0 / fan_out), generator=generator)
        self.conv1 = ConvUnit(
            w1,
            torch.zeros(mid),
            stride=_one_or_pair(_pair(stride)),
            padding=_one_or_pair((kh // 2, kw // 2)),
            groups=groups,
            kind="lite",
        )
        self.norm1 = GroupNormUnit(mid, bias=True, scale_init=1.0, act="relu")
        self.conv2 = ConvUnit(w2, torch.zeros(out_channels), kind="lite")
        self.norm2 = GroupNormUnit(out_channels, bias=False, scale_init=0.0, act="none")
        self.up = Upsample()
        for conv in (self.conv1, self.conv2):
            conv.set_weight_update(1.0)
            conv.bias.requires_grad_(False)

    def forward(self, x: Tensor, like: Tensor) -> Tensor:
        h = self.pool(x) if self.pool is not None else x
        h = self.norm1(self.conv1(h))
        h = self.norm2(self.conv2(h))
        return self.up(h, like)


@dataclass(frozen=True)
class LiteSite:
    """Where a lite residual branch may go: a network's stage, which takes the branch by
    ``module.attach_lite``.

    Attributes:
        in_channels, out_channels: of the block's input and of the tensor the branch adds to.
        stride: (down, across), from the block's input to that tensor.
        size: (H, W) of the block's input at the network's resolution.
    """

    module: nn.Module
    in_channels: int
    out_channels: int
    stride: tuple[int, int]
    size: tuple[int, int]


class Classifier(nn.Module):
    """Flatten (N, C, 1, 1) → linear layer; always trained."""

    def __init__(self, in_features: int, n_classes: int, generator: torch.Generator) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        w = torch.empty(n_classes, in_features).uniform_(-bound, bound, generator=generator)
        self.weight = nn.Parameter(w)
        self.bias = nn.Parameter(torch.zeros(n_classes))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x.flatten(1), self.weight, self.bias)

    def ir_describe(self) -> dict[str, Any]:
        return {
            "kind": "linear",
            "role": "classifier",
            "params": {
                "weight_shape": tuple(self.weight.shape),
                "trained_weight": self.weight.numel() if self.weight.requires_grad else 0,
                "trained_in_channels": self.weight.shape[1] if self.weight.requires_grad else 0,
                "bias": self.bias.numel(),
                "bias_trained": self.bias.requires_grad,
            },
        }
