"""Autograd functions that keep for backward exactly what a sparse update needs.

PyTorch's own ``conv2d`` saves its input whenever any of its inputs needs a gradient, and its
ReLU saves a full fp32 tensor. On a device the rules are tighter (TinyTL Table 1; MCUNetV3
§2.2): a convolution keeps its input only when its weight is updated, and then only the updated
input channels; a ReLU/ReLU6 keeps a 1-bit mask per element. These functions follow those rules,
so that what autograd really holds while fine-tuning is what the memory planner predicts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx

__all__ = ["Padding", "masked_clamp", "pack_mask", "sparse_conv2d", "unpack_mask"]

_SHIFTS = torch.arange(8, dtype=torch.uint8)


def pack_mask(mask: Tensor) -> Tensor:
    """Pack a boolean tensor into a uint8 tensor of ⌈numel/8⌉ bytes (little-endian bits)."""
    flat = mask.reshape(-1).to(torch.uint8)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    return (flat.view(-1, 8) << _SHIFTS).sum(dim=1, dtype=torch.uint8)


def unpack_mask(packed: Tensor, shape: torch.Size) -> Tensor:
    """Inverse of :func:`pack_mask`."""
    bits = (packed.unsqueeze(1) >> _SHIFTS) & 1  # (bytes, 8)
    return bits.reshape(-1)[: shape.numel()].view(shape).bool()


class _MaskedClamp(torch.autograd.Function):
    """y = clamp(x, 0, upper); backward keeps a 1-bit mask of 0 < x < upper."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, upper: float | None) -> Tensor:
        y = x.clamp(min=0.0) if upper is None else x.clamp(0.0, upper)
        if ctx.needs_input_grad[0]:
            inside = x > 0 if upper is None else (x > 0) & (x < upper)
            ctx.shape = x.shape  # type: ignore[attr-defined]
            ctx.save_for_backward(pack_mask(inside))
        return y

    @staticmethod
    def backward(ctx: FunctionCtx, grad_y: Tensor) -> tuple[Tensor | None, None]:
        (packed,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return grad_y * unpack_mask(packed, ctx.shape).to(grad_y.dtype), None  # type: ignore[attr-defined]


def masked_clamp(x: Tensor, upper: float | None = None) -> Tensor:
    """ReLU (``upper=None``) or ReLU6 (``upper=6``) that saves a 1-bit mask for backward."""
    return _MaskedClamp.apply(x, upper)


def _join(w_train: Tensor | None, w_frozen: Tensor | None, depthwise: bool) -> Tensor:
    if w_train is None:
        return w_frozen  # type: ignore[return-value]
    if w_frozen is None:
        return w_train
    return torch.cat([w_train, w_frozen], dim=0 if depthwise else 1)


Padding = int | tuple[int, int, int, int]
"""A convolution's zero padding: ``p`` on every side, or ``(left, right, top, bottom)`` as
``F.pad`` takes it (TensorFlow's "SAME" padding of a stride-2 convolution on an even size)."""


def _pad(x: Tensor, padding: Padding) -> Tensor:
    return x if isinstance(padding, int) else F.pad(x, padding)


class _SparseConv2d(torch.autograd.Function):
    """A convolution whose weight is split along the input channels (or, depthwise, along the
    channels) into an updated part ``w_train`` (the first k) and a frozen part ``w_frozen``.

    Saved for backward: the first k input channels, and only if ``w_train`` needs a gradient.
    The weights themselves are parameters: they stay where they are and cost no activation
    memory. ∂L/∂x = conv2dᵀ(∂L/∂y, W); ∂L/∂W[:, :k] = conv2d_weight(x[:, :k], ∂L/∂y);
    ∂L/∂b = Σ_{n,h,w} ∂L/∂y.

    An asymmetric padding is applied with ``F.pad`` before a convolution without padding; its
    adjoint crops the gradient of the padded input. The input is saved unpadded (padded again
    in backward), so that what autograd keeps is the same for either padding.
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        x: Tensor,
        w_train: Tensor | None,
        w_frozen: Tensor | None,
        bias: Tensor | None,
        stride: int,
        padding: Padding,
        groups: int,
    ) -> Tensor:
        depthwise = groups > 1 and groups == x.shape[1]
        weight = _join(w_train, w_frozen, depthwise)
        if isinstance(padding, int):
            y = F.conv2d(x, weight, bias, stride, padding, 1, groups)  # (N, C_out, H', W')
        else:
            y = F.conv2d(F.pad(x, padding), weight, bias, stride, 0, 1, groups)
        k = 0 if w_train is None else (w_train.shape[0] if depthwise else w_train.shape[1])
        if w_frozen is None:  # the whole weight is trained: any grouping
            k = x.shape[1]
        elif groups > 1 and not depthwise:
            raise ValueError("a split weight needs groups == 1 or a depthwise convolution")
        x_part = None
        if ctx.needs_input_grad[1]:
            # a copy of the k trained channels, as on a device (at batch 1 a contiguous slice
            # would be a view that keeps all C channels alive)
            x_part = x if k == x.shape[1] else x[:, :k].clone()  # (N, k, H, W)
        ctx.save_for_backward(x_part, w_train, w_frozen)
        ctx.conf = (x.shape, stride, padding, groups, k)  # type: ignore[attr-defined]
        return y

    @staticmethod
    def backward(ctx: FunctionCtx, grad_y: Tensor) -> tuple[Tensor | None, ...]:
        x_part, w_train, w_frozen = ctx.saved_tensors  # type: ignore[attr-defined]
        x_shape, stride, padding, groups, k = ctx.conf  # type: ignore[attr-defined]
        depthwise = groups > 1 and groups == x_shape[1]
        need_x, need_wt, _, need_b = ctx.needs_input_grad[:4]  # type: ignore[attr-defined]
        symmetric = padding if isinstance(padding, int) else 0
        grad_x = grad_wt = grad_b = None
        if need_x:
            weight = _join(w_train, w_frozen, depthwise)
            n, c, h, w = x_shape
            left, right, top, bottom = (0, 0, 0, 0) if isinstance(padding, int) else padding
            padded = (n, c, top + h + bottom, left + w + right)
            grad_x = torch.nn.grad.conv2d_input(
                padded, weight, grad_y, stride, symmetric, 1, groups
            )  # (N, C, top + H + bottom, left + W + right)
            grad_x = grad_x[:, :, top : top + h, left : left + w]
        if need_wt:
            if w_frozen is None:
                g, g_groups = grad_y, groups
            elif depthwise:
                g, g_groups = grad_y[:, :k], k
            else:
                g, g_groups = grad_y, 1
            grad_wt = torch.nn.grad.conv2d_weight(
                _pad(x_part, padding), w_train.shape, g, stride, symmetric, 1, g_groups
            )
        if need_b:
            grad_b = grad_y.sum(dim=(0, 2, 3))
        return grad_x, grad_wt, None, grad_b, None, None, None


def sparse_conv2d(
    x: Tensor,
    w_train: Tensor | None,
    w_frozen: Tensor | None,
    bias: Tensor | None,
    stride: int,
    padding: Padding,
    groups: int,
) -> Tensor:
    """Convolution with a partially trainable weight; see :class:`_SparseConv2d`.

    ``groups`` must be 1 (standard or pointwise convolution; the split is along the input
    channels) or equal to the channel count (depthwise; the split is along the channels).
    ``padding``: ``p`` on every side, or ``(left, right, top, bottom)``, each at least 0.
    """
    if not isinstance(padding, int) and min(padding) < 0:
        raise ValueError(f"padding {padding} has a negative side; each must be at least 0")
    return _SparseConv2d.apply(x, w_train, w_frozen, bias, stride, padding, groups)
