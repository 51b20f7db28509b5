"""Reference kernels of the int8 training step: one function per C kernel of
``tinytune/lowering/csrc``, with the same arguments and, bit for bit, the same results.

The semantics are those of :mod:`tinytune.quant.arith`. Integers are held in int64 tensors;
convolutions of integers run as float64 convolutions, which are exact because every partial sum
stays far below 2^53 (|x − z|·|w| ≤ 255·127 and ≤ 2^16 terms; with the Q15 gradient
multipliers, ≤ 2^29 per term) — the result is checked to be integral. Float32 work uses numpy
in the fixed order that the C code follows. Backward kernels take batch 1, as on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from tinytune.quant.arith import (
    GRAD_MAX,
    INT32_MAX,
    INT32_MIN,
    block_exponent_f32,
    combine_exponent,
    exp2_f32,
    exp_f32,
    normalize_shift,
    round_half_up_f32,
    rshift_round,
    scale_round,
    shift_exponent,
)

__all__ = [
    "ACT_GRAD_FRAC_BITS",
    "INTERP_FRAC_BITS",
    "Contribution",
    "Grad",
    "InterpAxis",
    "Pads",
    "act_table_s8",
    "add_act_s8",
    "add_grad_input",
    "add_s8",
    "avgpool_grad_input",
    "avgpool_s8",
    "conv2d_grad_input",
    "conv2d_s8",
    "conv2d_update_weight",
    "emit",
    "gap_grad_input",
    "gap_s8",
    "grad_act_table",
    "grad_mask",
    "groupnorm_f32",
    "groupnorm_f32_backward",
    "interp_axis",
    "linear_f32",
    "linear_f32_backward",
    "maxpool_grad_input",
    "maxpool_s8",
    "mul_grad_scale",
    "mul_grad_x",
    "mul_s8",
    "softmax_xent_grad",
    "update_bias",
    "upsample_grad_input",
    "upsample_s8",
]

F32 = np.float32
INTERP_FRAC_BITS = 10  # Q of the bilinear interpolation weights: w0 + w1 = 2^Q
ACT_GRAD_FRAC_BITS = 12  # Q of the derivative tables of h-swish and h-sigmoid


@dataclass(frozen=True)
class Grad:
    """A block floating-point gradient: int8 mantissas (held as int64) and one exponent;
    real = mantissa·2^exp."""

    mantissa: Tensor
    exp: int

    def real(self) -> Tensor:
        return self.mantissa.double() * 2.0**self.exp


@dataclass(frozen=True)
class Contribution:
    """An exact integer gradient contribution S (real = S·2^exp) with |S| < 2^bound_bits."""

    values: Tensor
    exp: int
    bound_bits: int


def _exact(t: Tensor) -> Tensor:
    r = t.round()
    if t.numel() and float((t - r).abs().max()) != 0.0:
        raise ArithmeticError("an integer convolution was not exact in float64")
    return r.long()


def _check_int32(t: Tensor, what: str) -> None:
    if t.numel() and (int(t.min()) < INT32_MIN or int(t.max()) > INT32_MAX):
        raise OverflowError(f"{what} left the int32 range")


# --- forward ---------------------------------------------------------------------------------


Pads = tuple[int, int, int, int]
"""Zero padding of a convolution's input: (top, bottom, left, right). A negative side drops
that many rows or columns of the input (a patch's input region may hold rows its output does
not read)."""


def _pads(padding: int | Pads) -> Pads:
    return (padding,) * 4 if isinstance(padding, int) else padding


def _pad(xs: Tensor, pads: Pads) -> Tensor:
    """``xs`` (N, C, H, W) with ``pads`` applied: zeros added, or rows and columns dropped."""
    top, bottom, left, right = pads
    return F.pad(xs, (left, right, top, bottom)) if any(pads) else xs


def conv2d_s8(
    x: Tensor,
    x_zero: int,
    weight: Tensor,
    bias: Tensor,
    mult: Tensor,
    shift: Tensor,
    y_zero: int,
    act_min: int,
    act_max: int,
    stride: int | tuple[int, int],
    padding: int | Pads,
    groups: int,
) -> tuple[Tensor, Tensor]:
    """int8 convolution with requantisation and clamp; returns (y, mask) where mask is True
    where the clamp left the value unchanged. x: (N, C, H, W); weight: (O, C/groups, k, k);
    ``padding`` on every side, or per side (:data:`Pads`)."""
    xs = _pad((x - x_zero).double(), _pads(padding))
    acc = _exact(F.conv2d(xs, weight.double(), None, stride, 0, 1, groups))
    acc = acc + bias.view(1, -1, 1, 1)
    _check_int32(acc, "a convolution accumulator")
    v = y_zero + scale_round(acc, mult.view(1, -1, 1, 1), shift.view(1, -1, 1, 1))
    mask = (v >= act_min) & (v <= act_max)
    return torch.clamp(v, act_min, act_max), mask


def act_table_s8(pre: Tensor, table: Tensor) -> Tensor:
    """A table activation (h-swish, h-sigmoid): y = table[pre + 128] for int8 pre-activations
    ``pre``; ``table`` holds the 256 int8 outputs."""
    return table[pre + 128]


def mul_s8(
    x: Tensor,
    s: Tensor,
    x_zero: int,
    s_zero: int,
    mult: int,
    shift: int,
    y_zero: int,
) -> Tensor:
    """The channel-wise product of squeeze-and-excitation: x (N, C, H, W) times s (N, C, 1, 1),
    y = saturate(z_y + scale_round((x − z_x)·(s − z_s), M, n)), M·2^−n ≈ s_x·s_s/s_y."""
    acc = (x - x_zero) * (s - s_zero)
    return torch.clamp(y_zero + scale_round(acc, mult, shift), -128, 127)


def add_act_s8(
    a: Tensor,
    b: Tensor,
    a_zero: int,
    b_zero: int,
    a_mult: int,
    b_mult: int,
    shift: int,
    y_zero: int,
    act_min: int = -128,
    act_max: int = 127,
) -> tuple[Tensor, Tensor]:
    """The sum requantised and clamped to [act_min, act_max] (a ReLU or ReLU6 after it), and
    the mask of the elements the clamp left unchanged (``tt_add_act_s8``)."""
    acc = (a - a_zero) * a_mult + (b - b_zero) * b_mult
    v = y_zero + rshift_round(acc, shift)
    return torch.clamp(v, act_min, act_max), (v >= act_min) & (v <= act_max)


def add_s8(
    a: Tensor,
    b: Tensor,
    a_zero: int,
    b_zero: int,
    a_mult: int,
    b_mult: int,
    shift: int,
    y_zero: int,
) -> Tensor:
    """The sum requantised to int8 (``tt_add_s8``): :func:`add_act_s8` without an activation."""
    return add_act_s8(a, b, a_zero, b_zero, a_mult, b_mult, shift, y_zero)[0]


def gap_s8(x: Tensor, x_zero: int, mult: int, shift: int, y_zero: int) -> Tensor:
    """Global average pooling (N, C, H, W) → (N, C, 1, 1)."""
    acc = (x - x_zero).sum(dim=(2, 3), keepdim=True)
    return torch.clamp(y_zero + scale_round(acc, mult, shift), -128, 127)


def avgpool_s8(
    x: Tensor, x_zero: int, ratio: int | tuple[int, int], mult: int, shift: int, y_zero: int
) -> Tensor:
    """r×r_w average pooling with stride r down and r_w across (``ratio``: r, or (r, r_w));
    the remainder rows and columns are dropped."""
    n, c, h, w = x.shape
    rh, rw = ratio if isinstance(ratio, tuple) else (ratio, ratio)
    xs = (x - x_zero)[:, :, : h - h % rh, : w - w % rw]
    acc = xs.reshape(n, c, h // rh, rh, w // rw, rw).sum(dim=(3, 5))
    return torch.clamp(y_zero + scale_round(acc, mult, shift), -128, 127)


_BELOW_INT8 = -1000  # the padding of a max pooling: below every int8 value, never chosen


def _pool_windows(
    x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], pads: Pads
) -> tuple[Tensor, tuple[int, int]]:
    """Every window of a max pooling of ``x`` (N, C, H, W) as (N, C, kh·kw, L) float64 values,
    in row-major window order, and the padded input's (H', W')."""
    top, bottom, left, right = pads
    xs = F.pad(x.double(), (left, right, top, bottom), value=float(_BELOW_INT8))
    n, c, h, w = xs.shape
    cols = F.unfold(xs.reshape(n * c, 1, h, w), kernel, stride=stride)
    return cols.reshape(n, c, kernel[0] * kernel[1], -1), (h, w)


def maxpool_s8(x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], pads: Pads) -> Tensor:
    """Max pooling of int8 values (``tt_maxpool_s8``): the output keeps the input's scale and
    zero point; ``pads`` (top, bottom, left, right) hold rows and columns no window chooses."""
    cols, _ = _pool_windows(x, kernel, stride, pads)
    n, c, _, _ = x.shape
    oh = (x.shape[2] + pads[0] + pads[1] - kernel[0]) // stride[0] + 1
    return cols.amax(dim=2).long().reshape(n, c, oh, -1)


def maxpool_grad_input(
    gy: Grad, x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], pads: Pads
) -> Contribution:
    """∂L/∂x of max pooling: each output's gradient to the first largest input of its window
    (row-major, PyTorch's choice), summed where windows overlap."""
    cols, (h, w) = _pool_windows(x, kernel, stride, pads)
    n, c, kk, n_out = cols.shape
    first = cols.argmax(dim=2, keepdim=True)  # the first of equal values
    g = gy.mantissa.reshape(n, c, 1, n_out).double()
    chosen = torch.zeros_like(cols).scatter_(2, first, g)
    s = F.fold(chosen.reshape(n * c, kk, n_out), (h, w), kernel, stride=stride)
    top, _, left, _ = pads
    out = torch.zeros(x.shape, dtype=torch.float64)  # rows no window reads get nothing
    rows, cols_ = min(x.shape[2], h - top), min(x.shape[3], w - left)
    out[:, :, :rows, :cols_] = s.reshape(n, c, h, w)[:, :, top : top + rows, left : left + cols_]
    cover = -(-kernel[0] // stride[0]) * -(-kernel[1] // stride[1])
    return Contribution(_exact(out), gy.exp, _bitlen(GRAD_MAX * cover))


@dataclass(frozen=True)
class InterpAxis:
    """Bilinear interpolation along one axis as integer tables: output o reads inputs i0[o]
    and i1[o] with weights w0[o] + w1[o] = 2^Q; input i is read by outputs lo[i] … hi[i]−1."""

    n_in: int
    n_out: int
    i0: np.ndarray
    i1: np.ndarray
    w0: np.ndarray
    w1: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def matrix(self) -> Tensor:
        """(n_out, n_in) int64: the weight output o gives input i."""
        m = torch.zeros(self.n_out, self.n_in, dtype=torch.int64)
        o = torch.arange(self.n_out)
        m.index_put_((o, torch.from_numpy(self.i0).long()), torch.from_numpy(self.w0).long())
        m.index_put_(
            (o, torch.from_numpy(self.i1).long()),
            torch.from_numpy(self.w1).long(),
            accumulate=True,
        )
        return m


def interp_axis(n_in: int, n_out: int, frac_bits: int = INTERP_FRAC_BITS) -> InterpAxis:
    """The tables of ``F.interpolate(mode="bilinear", align_corners=False)`` along one axis:
    source coordinate max(0, (o + 1/2)·n_in/n_out − 1/2), weights rounded to Q=frac_bits."""
    one = 1 << frac_bits
    i0, i1, w0, w1 = [], [], [], []
    for o in range(n_out):
        src = max((o + 0.5) * n_in / n_out - 0.5, 0.0)
        a = min(int(np.floor(src)), n_in - 1)
        lam = src - a
        b = min(a + 1, n_in - 1)
        wb = round(lam * one)
        i0.append(a), i1.append(b), w0.append(one - wb), w1.append(wb)
    lo, hi = [n_out] * n_in, [0] * n_in
    for o in range(n_out):
        for i in (i0[o], i1[o]):
            lo[i], hi[i] = min(lo[i], o), max(hi[i], o + 1)
    lo = [min(a, b) for a, b in zip(lo, hi, strict=True)]  # an unread input: empty range
    tables = (np.array(v, dtype=np.int32) for v in (i0, i1, w0, w1, lo, hi))
    return InterpAxis(n_in, n_out, *tables)


def upsample_s8(
    x: Tensor, x_zero: int, ay: InterpAxis, ax: InterpAxis, mult: int, shift: int, y_zero: int
) -> Tensor:
    """Bilinear upsampling (N, C, H, W) → (N, C, ay.n_out, ax.n_out) through the tables."""
    my, mx = ay.matrix().double(), ax.matrix().double()
    acc = _exact(my @ (x - x_zero).double() @ mx.T)
    return torch.clamp(y_zero + scale_round(acc, mult, shift), -128, 127)


def _groupnorm_stats(
    x: np.ndarray, x_zero: int, x_scale: np.float32, groups: int, eps: np.float32
) -> np.ndarray:
    """(groups, 2) float32: mean and rstd of each group of x (C, HW) int values."""
    c = x.shape[0]
    xs = (x - x_zero).reshape(groups, c // groups * x.shape[1]).astype(np.int64)
    n = xs.shape[1]
    s1, s2 = xs.sum(axis=1), (xs * xs).sum(axis=1)
    fn = F32(n)
    mean = x_scale * (s1.astype(F32) / fn)
    var = (n * s2 - s1 * s1).astype(F32)
    var = var / fn
    var = var / fn
    var = var * x_scale
    var = var * x_scale
    rstd = F32(1.0) / np.sqrt(var + eps)
    return np.stack([mean, rstd], axis=1).astype(F32)


def _groupnorm_xhat(
    x: np.ndarray, x_zero: int, x_scale: np.float32, stats: np.ndarray, groups: int
) -> np.ndarray:
    c = x.shape[0]
    per_channel = np.repeat(stats, c // groups, axis=0)  # (C, 2)
    xf = x_scale * (x - x_zero).astype(F32)
    d = xf - per_channel[:, :1]
    return (d * per_channel[:, 1:]).astype(F32)


def groupnorm_f32(
    x: Tensor,
    x_zero: int,
    x_scale: float,
    gamma: np.ndarray,
    beta: np.ndarray | None,
    groups: int,
    y_scale: float,
    y_zero: int,
    act_min: int,
    act_max: int,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor, np.ndarray]:
    """GroupNorm of one image x (1, C, H, W) with int8 input and output; returns (y, mask,
    statistics (groups, 2) = mean, rstd)."""
    _, c, h, w = x.shape
    xv = x.reshape(c, h * w).numpy()
    sx = F32(x_scale)
    stats = _groupnorm_stats(xv, x_zero, sx, groups, F32(eps))
    y = gamma.astype(F32)[:, None] * _groupnorm_xhat(xv, x_zero, sx, stats, groups)
    if beta is not None:
        y = y + beta.astype(F32)[:, None]
    q = np.clip(y / F32(y_scale), F32(-(2.0**30)), F32(2.0**30))
    v = torch.from_numpy(round_half_up_f32(q) + y_zero).reshape(1, c, h, w)
    mask = (v >= act_min) & (v <= act_max)
    return torch.clamp(v, act_min, act_max), mask, stats


def linear_f32(
    x: Tensor, x_zero: int, x_scale: float, weight: np.ndarray, bias: np.ndarray
) -> np.ndarray:
    """Float32 classifier on int8 features x (C,): a = W[:,0]·x_0; a = a + W[:,c]·x_c for
    c = 1…C−1; logits = a + b."""
    xf = F32(x_scale) * (x.numpy() - x_zero).astype(F32)
    acc = weight[:, 0] * xf[0]
    for c in range(1, xf.shape[0]):
        acc = acc + weight[:, c] * xf[c]
    return (acc + bias).astype(F32)


# --- loss ------------------------------------------------------------------------------------


def softmax_xent_grad(logits: np.ndarray, label: int) -> np.ndarray:
    """∂(cross-entropy)/∂logits = softmax(logits) − onehot(label), in float32."""
    z = np.asarray(logits, dtype=F32)
    e = exp_f32(z - z.max())
    total = e[0]
    for j in range(1, e.shape[0]):
        total = total + e[j]
    g = (e / total).astype(F32)
    g[label] = g[label] - F32(1.0)
    return g


# --- gradient buffers ----------------------------------------------------------------------


def emit(contribution: Contribution, prev: Grad | None) -> Grad:
    """Write a contribution into a gradient buffer: fresh when ``prev`` is None, else summed
    with what the buffer holds; then normalised to int8 mantissas."""
    s = contribution
    if prev is None:
        total, e_c = s.values, s.exp
    else:
        e_c = combine_exponent(s.exp, s.bound_bits, prev.exp)
        total = shift_exponent(s.values, s.exp - e_c) + shift_exponent(
            prev.mantissa, prev.exp - e_c
        )
    sh = normalize_shift(int(total.abs().max()) if total.numel() else 0)
    mantissa = rshift_round(total, sh)
    assert int(mantissa.abs().max()) <= GRAD_MAX
    return Grad(mantissa, e_c + sh)


def grad_mask(g: Grad, mask: Tensor) -> Grad:
    """Zero the gradient where the activation clamp changed the value."""
    return Grad(torch.where(mask, g.mantissa, 0), g.exp)


def _bitlen(v: int) -> int:
    return int(v).bit_length()


def grad_act_table(gy: Grad, pre: Tensor, table: Tensor, frac_bits: int) -> Grad:
    """The gradient through a table activation, in place of its output gradient: γ·D[pre]
    with D[p] ≈ f′(pre-activation p)·2^F (``table``), normalised afresh to int8 mantissas."""
    s = gy.mantissa * table[pre + 128]
    bound = _bitlen(GRAD_MAX * int(table.abs().max()))
    return emit(Contribution(s, gy.exp - frac_bits, bound), None)


def mul_grad_x(gy: Grad, s: Tensor, s_zero: int, s_mult: int, frac_bits: int) -> Contribution:
    """∂L/∂x of y = x·s: γ·(s − z_s)·m_s with m_s ≈ s_s·2^F, as S·2^(e_y − F)."""
    v = gy.mantissa * ((s - s_zero) * s_mult)
    return Contribution(v, gy.exp - frac_bits, _bitlen(GRAD_MAX * 255 * s_mult))


def mul_grad_scale(gy: Grad, x: Tensor, x_zero: int, x_mult: int, frac_bits: int) -> Contribution:
    """∂L/∂s of y = x·s: Σ_p γ·(x − z_x) per channel, times m_x ≈ s_x·2^F, as S·2^(e_y − F)."""
    _, _, h, w = x.shape
    v = (gy.mantissa * (x - x_zero)).sum(dim=(2, 3), keepdim=True) * x_mult
    return Contribution(v, gy.exp - frac_bits, _bitlen(GRAD_MAX * 255 * h * w * x_mult))


def conv2d_grad_input(
    gy: Grad,
    weight: Tensor,
    w_mult: Tensor,
    frac_bits: int,
    input_shape: tuple[int, ...],
    stride: int | tuple[int, int],
    padding: int | Pads,
    groups: int,
) -> Contribution:
    """∂L/∂x of a convolution (weights before the update), as S·2^(e_y − F)."""
    o, _, kh, kw = weight.shape
    wm = weight * w_mult.view(-1, 1, 1, 1)
    top, bottom, left, right = _pads(padding)
    n, c, h, w = input_shape
    padded = (n, c, h + top + bottom, w + left + right)
    s = torch.nn.grad.conv2d_input(padded, wm.double(), gy.mantissa.double(), stride, 0, 1, groups)
    s = _pad(s, (-top, -bottom, -left, -right))  # the padding's gradient is dropped
    bound = _bitlen(GRAD_MAX * 127 * int(w_mult.max()) * (o // groups) * kh * kw)
    return Contribution(_exact(s), gy.exp - frac_bits, bound)


def gap_grad_input(gy: Grad, hw_mult: int, frac_bits: int, hw: tuple[int, int]) -> Contribution:
    """∂L/∂x of global average pooling: ∂L/∂y / HW broadcast over H×W."""
    s = (gy.mantissa * hw_mult).expand(-1, -1, *hw)
    return Contribution(s.contiguous(), gy.exp - frac_bits, _bitlen(GRAD_MAX * hw_mult))


def add_grad_input(gy: Grad) -> Contribution:
    """∂L/∂a = ∂L/∂b = ∂L/∂y for y = a + b."""
    return Contribution(gy.mantissa, gy.exp, _bitlen(GRAD_MAX))


def avgpool_grad_input(
    gy: Grad,
    ratio: int | tuple[int, int],
    area_mult: int,
    frac_bits: int,
    input_shape: tuple[int, ...],
) -> Contribution:
    """∂L/∂x of r×r_w average pooling: ∂L/∂y / (r·r_w) over each window, 0 on dropped rows
    and columns."""
    s = torch.zeros(input_shape, dtype=torch.int64)
    _, _, h, w = gy.mantissa.shape
    rh, rw = ratio if isinstance(ratio, tuple) else (ratio, ratio)
    up = (gy.mantissa * area_mult).repeat_interleave(rh, 2).repeat_interleave(rw, 3)
    s[:, :, : h * rh, : w * rw] = up
    return Contribution(s, gy.exp - frac_bits, _bitlen(GRAD_MAX * area_mult))


def upsample_grad_input(gy: Grad, ay: InterpAxis, ax: InterpAxis, frac_bits: int) -> Contribution:
    """∂L/∂x of the bilinear upsampling: the transposed tables applied to ∂L/∂y."""
    my, mx = ay.matrix(), ax.matrix()
    s = _exact(my.double().T @ gy.mantissa.double() @ mx.double())
    bound = _bitlen(GRAD_MAX * int(my.sum(0).max()) * int(mx.sum(0).max()))
    return Contribution(s, gy.exp - 2 * frac_bits, bound)


def groupnorm_f32_backward(
    gy: Grad,
    x: Tensor,
    x_zero: int,
    x_scale: float,
    gamma: np.ndarray,
    beta: np.ndarray | None,
    stats: np.ndarray,
    groups: int,
    lr: float,
    want_input_grad: bool,
) -> tuple[np.ndarray, np.ndarray | None, Grad | None]:
    """The input gradient of GroupNorm (old γ; block floating point) and the SGD step of its
    float32 γ and β; ``gy`` is already masked. Returns (new γ, new β, ∂L/∂x)."""
    _, c, h, w = x.shape
    cg = c // groups
    xv = x.reshape(c, h * w).numpy().astype(np.int64)
    m = gy.mantissa.reshape(c, h * w).numpy().astype(np.int64)
    sx, ge, n = F32(x_scale), exp2_f32(gy.exp), F32(cg * h * w)
    p_c = (m * (xv - x_zero)).sum(axis=1).astype(F32)
    q_c = m.sum(axis=1).astype(F32)
    mean = np.repeat(stats[:, 0], cg)
    rstd = np.repeat(stats[:, 1], cg)
    d_beta = (q_c * ge).astype(F32)
    d_gamma = ((sx * p_c - mean * q_c) * rstd * ge).astype(F32)
    g32 = gamma.astype(F32)
    gx: Grad | None = None
    if want_input_grad:
        a = np.empty(groups, F32)
        b = np.empty(groups, F32)
        for g in range(groups):
            lo = g * cg
            sg, sgx = g32[lo] * d_beta[lo], g32[lo] * d_gamma[lo]
            for ch in range(lo + 1, lo + cg):
                sg = sg + g32[ch] * d_beta[ch]
                sgx = sgx + g32[ch] * d_gamma[ch]
            a[g], b[g] = sg / n, sgx / n
        xh = _groupnorm_xhat(xv, x_zero, sx, stats, groups)
        gval = g32[:, None] * (m.astype(F32) * ge)
        u = gval - np.repeat(a, cg)[:, None]
        u = u - xh * np.repeat(b, cg)[:, None]
        dx = (u * rstd[:, None]).astype(F32)
        e = block_exponent_f32(float(np.abs(dx).max()))
        mantissa = round_half_up_f32(dx * F32(2.0**-e))
        gx = Grad(torch.from_numpy(mantissa).reshape(1, c, h, w), e)
    new_gamma = (g32 - F32(lr) * d_gamma).astype(F32)
    new_beta = None if beta is None else (beta.astype(F32) - F32(lr) * d_beta).astype(F32)
    return new_gamma, new_beta, gx


# --- updates (QAS-scaled SGD) ------------------------------------------------------------------


def update_bias(
    gy: Grad, bias: Tensor, upd_mult: Tensor, upd_shift: Tensor
) -> tuple[Tensor, Tensor]:
    """b ← sat32(b − round(lr·2^e·Σ_p γ / s_b)); returns (new bias, Δ)."""
    total = gy.mantissa.sum(dim=(0, 2, 3))  # (C,)
    delta = scale_round(total, upd_mult, upd_shift - gy.exp)
    return torch.clamp(bias - delta, INT32_MIN, INT32_MAX), delta


def conv2d_update_weight(
    gy: Grad,
    x_saved: Tensor,
    x_zero: int,
    w_train: Tensor,
    upd_mult: Tensor,
    upd_shift: Tensor,
    stride: int | tuple[int, int],
    padding: int | Pads,
    groups: int,
    depthwise: bool,
) -> tuple[Tensor, Tensor]:
    """w ← sat(w − round(lr·s_x·2^e·Gw / s_w), ±127) on the trained part ``w_train``
    ((O, k, kh, kw), or depthwise (k, 1, kh, kw)); x_saved: (1, k, H, W), the first k input
    channels. Returns (new w_train, Gw)."""
    xs = _pad((x_saved - x_zero).double(), _pads(padding))
    g = gy.mantissa.double()
    if depthwise:
        k = w_train.shape[0]
        g, groups, mult, shift = g[:, :k], k, upd_mult[:k], upd_shift[:k]
    else:
        mult, shift = upd_mult, upd_shift
    gw = _exact(torch.nn.grad.conv2d_weight(xs, w_train.shape, g, stride, 0, 1, groups))
    _check_int32(gw, "a weight gradient")
    delta = scale_round(gw, mult.view(-1, 1, 1, 1), (shift - gy.exp).view(-1, 1, 1, 1))
    return torch.clamp(w_train - delta, -127, 127), gw


# --- classifier backward -------------------------------------------------------------------


def linear_f32_backward(
    x: Tensor,
    x_zero: int,
    x_scale: float,
    weight: np.ndarray,
    bias: np.ndarray,
    grad: np.ndarray,
    lr: float,
    want_input_grad: bool,
) -> tuple[np.ndarray, np.ndarray, Grad | None]:
    """The feature gradient (old weights, block floating point) and the SGD update of the
    float32 classifier; returns (new weight, new bias, feature gradient (1, C, 1, 1))."""
    g = np.asarray(grad, dtype=F32)
    xf = F32(x_scale) * (x.numpy() - x_zero).astype(F32)
    gx: Grad | None = None
    if want_input_grad:
        acc = weight[0, :] * g[0]
        for j in range(1, g.shape[0]):
            acc = acc + weight[j, :] * g[j]
        e = block_exponent_f32(float(np.abs(acc).max()))
        mantissa = round_half_up_f32(acc * F32(2.0**-e))  # all 0 when the maximum is flushed
        gx = Grad(torch.from_numpy(mantissa).view(1, -1, 1, 1), e)
    t = F32(lr) * g
    new_bias = (bias - t).astype(F32)
    new_weight = (weight - t[:, None] * xf[None, :]).astype(F32)
    return new_weight, new_bias, gx
