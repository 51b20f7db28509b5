"""The integer (and the few float32) semantics of tinytune's int8 training step.

This module is the specification that the PyTorch simulator (:mod:`tinytune.quant.kernels`,
:mod:`tinytune.quant.simulate`) and the C kernels (``tinytune/lowering/csrc``) both implement,
bit for bit. Every function here is the reference definition of one primitive; the C file
``tt_arith.h`` implements the same primitives on scalars.

Number formats
--------------
* **Activations**: int8 ``q`` with a per-tensor scale ``s`` and zero point ``z`` ∈ [-128, 127]:
  real = s·(q − z). Layout NCHW, batch 1 on the device.
* **Weights**: int8 in [-127, 127], symmetric, one scale per output channel: real = s_w[o]·q.
* **Biases**: int32 with scale s_b[o] = s_x·s_w[o] (zero point 0).
* **Activation gradients**: a *block floating-point* tensor: int8 mantissas γ ∈ [-127, 127] and
  one int32 exponent e per tensor: real gradient = γ·2^e. The exponent is chosen at run time
  from the largest magnitude (:func:`normalize_shift`), so gradients keep 8 bits of precision
  relative to their own maximum however small they become during training. Outside the
  float32 classifier and GroupNorm no float is involved: rescaling by static reals (weight
  scales, 1/HW, the learning rate) goes through fixed-point multipliers computed once at
  export time.
* **Classifier** and **GroupNorm** parameters: float32 (MCUNetV3 App. C keeps the classifier in
  float; TinyTL's GroupNorm needs per-image statistics), computed in a fixed order.

Why these choices: the memory planner budgets one byte per activation gradient, so gradients
must be int8, and a per-tensor power-of-two exponent keeps them precise without a float or a
wider buffer; a single rounding per requantisation (a 64-bit product and one rounding shift)
is both more accurate and simpler to reproduce than a doubled fixed-point multiply; ties
towards +∞ is what an arithmetic shift gives after adding half a unit; everything that can be
an exact integer sum is one, so that only a few per-channel float operations need a fixed
order.

Rounding primitives (all on exact integers, int64 unless said otherwise)
------------------------------------------------------------------------
* ``rshift_round(x, s)`` = ⌊(x + 2^(s−1)) / 2^s⌋ for 1 ≤ s ≤ 62: division by 2^s rounded to
  nearest, **ties towards +∞**; x itself for s = 0; 0 for s ≥ 63 (valid because every caller
  guarantees |x| < 2^62, so |x/2^s| < 1/2). The floor ⌊·/2^s⌋ is an arithmetic right shift;
  the C code (``tt_floor_shift``) does not rely on the implementation-defined ``>>`` of
  negative numbers.
* ``scale_round(x, M, t)``: the product p = x·M (callers guarantee |p| < 2^62) times 2^−t:
  ``rshift_round(p, t)`` for t ≥ 1; for t ≤ 0 the exact p·2^(−t), saturated to ±2^62.
* A real multiplier μ > 0 is stored as (M, n) with M ∈ [2^30, 2^31) and μ ≈ M·2^(−n)
  (:func:`quantize_multiplier`, offline, float64, ``round`` half to even); n may be ≤ 0.
* ``saturate(x, lo, hi)`` clamps.

Forward ops
-----------
* **Convolution** (any groups; zero padding in the real domain, i.e. padded taps contribute 0):
  acc[o,p] = b[o] + Σ w[o,c,k]·(x[c,p+k] − z_x) in int32;
  v = z_y + scale_round(acc, M[o], n[o]) (per output channel, M/2^n ≈ s_x·s_w[o]/s_y);
  y = saturate(v, lo, hi) where [lo, hi] is the activation's range: ``none`` [-128, 127],
  ``relu`` [z_y, 127], ``relu6`` [z_y, min(127, z_y + round(6/s_y))] (ReLU/ReLU6 are folded
  into the clamp, as in tiny-training's int8 models). For ReLU/ReLU6 a 1-bit **mask** is kept:
  bit = 1 iff lo ≤ v ≤ hi (the clamp did not change v), packed little-endian, element i of the
  flat NCHW tensor at bit i % 8 of byte i // 8 (as :func:`tinytune.models.ops.pack_mask`).
  An output without activation keeps no mask: its int8 saturation is passed straight through
  in backward (the memory planner keeps no mask for it either).
* **Add**: v = z_y + rshift_round((a − z_a)·M_a + (b − z_b)·M_b, n), one shift n for both
  multipliers (M_a·2^−n ≈ s_a/s_y, M_b·2^−n ≈ s_b/s_y, the larger one in [2^30, 2^31));
  y = saturate(v, -128, 127).
* **Global average pooling**: acc[c] = Σ_p (x[c,p] − z_x); v = z_y + scale_round(acc, M, n)
  with M·2^−n ≈ s_x/(s_y·HW); y = saturate(v, -128, 127).
* **Average pooling** r×r, stride r (remainder rows and columns dropped): the same over each
  window, M·2^−n ≈ s_x/(s_y·r²).
* **Bilinear upsampling** (align_corners=False) through integer tables per axis, computed
  offline (:func:`tinytune.quant.kernels.interp_axis`): output index o reads inputs i0(o),
  i1(o) with weights w0 + w1 = 2^Q (Q = 10); acc = Σ wy·wx·(x − z_x) over the four taps
  (exact); v = z_y + scale_round(acc, M, n) with M·2^−n ≈ s_x/(s_y·2^2Q).
* **GroupNorm** (float32 statistics, int8 in and out; the memory planner keeps the input and
  two float32 statistics per group): per group of n elements S1 = Σ(x − z_x), S2 = Σ(x − z_x)²
  (exact integers), V = n·S2 − S1² (exact); mean = s_x·(S1/n); var = ((V/n)/n)·s_x·s_x;
  rstd = 1/sqrt(var + ε) (IEEE square root, correctly rounded); per element
  x̂ = (s_x·(x − z_x) − mean)·rstd, y = γ_c·x̂ [+ β_c]; v = z_y + round_half_up(max(−2^30,
  min(2^30, y/s_y))); clamp and mask as for a convolution (ReLU or none).

Gradient tensors: normalisation and accumulation
------------------------------------------------
A backward op produces, for every element i of an input gradient, an exact integer S_i with a
unit exponent e_S (real = S_i·2^e_S) and a static bound |S_i| < 2^B_S. It is written to the
int8 gradient buffer in one of two modes:

* **fresh** (the buffer holds nothing yet): T_i = S_i, e_c = e_S.
* **accumulate** (the buffer already holds (γ_p, e_p) from another reader of the same tensor):
  e_c = max(min(e_S, e_p), e_S + B_S − 61, e_p + 7 − 61) and
  T_i = shift(S_i, e_S − e_c) + shift(γ_p,i, e_p − e_c), where shift(v, d) = v·2^d for d ≥ 0
  and rshift_round(v, −d) for d < 0. Both terms stay below 2^61 in magnitude, so T_i fits.

Then **normalise**: with m = max_i |T_i|, sh = the smallest sh ≥ 0 with rshift_round(m, sh)
≤ 127; γ_i = rshift_round(T_i, sh) ∈ [-127, 127]; the exponent is e_c + sh. Mantissas are
never shifted left, so a gradient that is exact in 8 bits stays exact. The C kernels compute
T twice (one pass for m, one to write), so no wider buffer is needed; in accumulate mode each
element reads its old mantissa before overwriting it.

Backward ops (batch 1)
----------------------
* **Activation mask**: γ_i ← 0 where the mask bit is 0 (in place, before the conv backward).
* **Convolution, input gradient**: with m_o = round(s_w[o]·2^F) (F per layer, chosen so that
  max m_o ∈ [2^14, 2^15]): S[c,i] = Σ_{o,k} γ_y[o,(i−k)/stride]·w[o,c,k]·m_o (the transposed
  convolution, computed as a gather per input element), e_S = e_y − F,
  B_S = bitlen(127·127·max m_o·(C_out/groups)·kh·kw).
  The input gradient is computed with the weights *before* this step's update.
* **Global average pooling**: S[c,p] = γ_y[c]·m_hw with m_hw = round(2^F_hw/HW) ∈ [2^14, 2^15],
  e_S = e_y − F_hw, B_S = bitlen(127·m_hw).
* **Add**: each input that needs a gradient receives S = γ_y, e_S = e_y, B_S = 7 (in fresh mode
  a plain copy).
* **Average pooling**: S = γ_y[window]·m_a with m_a = round(2^F/r²) over each window (0 on the
  dropped remainder), e_S = e_y − F, B_S = bitlen(127·m_a).
* **Bilinear upsampling**: S[c,i,j] = Σ_{o_y,o_x} Wy[o_y,i]·Wx[o_x,j]·γ_y[c,o_y,o_x] (the
  transposed tables; Wy[o,i] sums the weights output o gives input i), e_S = e_y − 2Q,
  B_S = bitlen(127·max_i Σ_o Wy[o,i]·max_j Σ_o Wx[o,j]).
* **GroupNorm** (float32, fresh mode only; its input has no other reader): with g_e = 2^e_y
  (:func:`exp2_f32`), per channel P_c = Σ_p γ·(x − z_x) and Q_c = Σ_p γ (exact integers);
  ∂β_c = Q_c·g_e; ∂γ_c = ((s_x·P_c − mean·Q_c)·rstd)·g_e; per group, summing channels in
  order from the first, A = (Σ_c γ_c·∂β_c)/n and B = (Σ_c γ_c·∂γ_c)/n; per element
  dx = ((γ_c·(γ·g_e) − A) − x̂·B)·rstd, then the block exponent and mantissas as for the
  classifier's feature gradient. The float32 γ and β then take plain SGD steps
  (t = lr·∂; p = p − t), after the input gradient is formed.

QAS-scaled SGD updates (MCUNetV3 Eq. 4, no momentum)
----------------------------------------------------
With G the gradient of the loss with respect to an *integer* parameter, QAS scales it by
s_W^−2 (weights) or s_b^−2 = (s_x·s_w)^−2 (biases), so that the integer update equals the
float SGD update of the real parameter divided by its scale:

* bias: B[o] = Σ_p γ_y[o,p] (int32); Δ = scale_round(B[o], M_b[o], n_b[o] − e_y) with
  M_b·2^−n_b ≈ lr/s_b[o]; b[o] ← saturate(b[o] − Δ, −2^31, 2^31 − 1).
* weight (the first k input channels; depthwise: the first k channels):
  Gw[o,c,k] = Σ_p γ_y[o,p]·(x[c,p·stride+k] − z_x) (exact, |Gw| < 2^31 is checked at export);
  Δ = scale_round(Gw, M_w[o], n_w[o] − e_y) with M_w·2^−n_w ≈ lr·s_x/s_w[o];
  w ← saturate(w − Δ, −127, 127).

Rounding is to nearest with ties towards +∞, and the new value saturates. Each weight's
gradient lives in a register only: no parameter-gradient buffer is ever formed.

Float32 classifier (IEEE-754 binary32 in one fixed order, as for GroupNorm above: no fused
multiply-add, no excess precision — build with ``-ffp-contract=off`` where FLT_EVAL_METHOD is 0)
------------------------------------------------------------------------------------------------
* x_c = s_f·(float)(q_c − z_f); logits: a = W[j,0]·x_0; for c = 1…C−1: a = a + W[j,c]·x_c;
  z_j = a + b_j (every product and sum rounded on its own).
* softmax: m = max_j z_j; e_j = :func:`exp_f32`(z_j − m); S = e_0; S = S + e_j for j = 1…;
  p_j = e_j / S; g_j = p_j − [j = label].
* feature gradient (with the old W): a = W[0,c]·g_0; a = a + W[j,c]·g_j for j = 1…J−1.
  Block exponent e (:func:`block_exponent_f32`) of max_c |a_c|; γ_c =
  :func:`round_half_up_f32`(a_c·2^−e) (2^−e is a normal float32, the product is exact or, for
  values far below one unit, rounds to something that rounds to 0).
* update: t_j = lr·g_j; b_j = b_j − t_j; W[j,c] = W[j,c] − t_j·x_c.

Limits, checked when a network is quantized (:func:`tinytune.quant.quantize`): convolution
accumulators fit int32 (|b| + 255·127·taps < 2^31), a weight gradient fits int32 (at most
66 311 output pixels), GroupNorm sums fit int32; otherwise a QuantizationError names the op.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "GRAD_MAX",
    "INT32_MAX",
    "INT32_MIN",
    "LIMIT",
    "block_exponent_f32",
    "combine_exponent",
    "exp2_f32",
    "exp_f32",
    "frac_bits_for",
    "normalize_shift",
    "quantize_multiplier",
    "round_half_up_f32",
    "rshift_round",
    "saturate",
    "scale_round",
    "shift_exponent",
]

GRAD_MAX = 127
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
LIMIT = 2**62  # every intermediate product and sum stays below this magnitude
_HEADROOM = 61  # bits a term may use when two gradient contributions are summed
_FLUSH = 2.0**-96  # classifier gradients below this magnitude are zero


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(M, n) with M ∈ [2^30, 2^31) and M·2^−n ≈ ``real`` (relative error ≤ 2^−31); (0, 0)
    for 0."""
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"a multiplier must be finite and >= 0, got {real!r}")
    if real == 0:
        return 0, 0
    frac, exp = math.frexp(real)  # real = frac·2^exp, frac ∈ [0.5, 1)
    m = round(frac * 2**31)
    if m == 2**31:
        m, exp = 2**30, exp + 1
    return m, 31 - exp


def frac_bits_for(values: Tensor | float) -> int:
    """F such that round(max(values)·2^F) ∈ [2^14, 2^15] (the Q-format of gradient
    multipliers); ``values`` must be positive."""
    top = float(torch.as_tensor(values, dtype=torch.float64).max())
    if not top > 0 or not math.isfinite(top):
        raise ValueError(f"gradient multipliers need a positive maximum, got {top!r}")
    _, exp = math.frexp(top)  # top ∈ [2^(exp−1), 2^exp)
    return 15 - exp


def rshift_round(x: Tensor, s: Tensor | int) -> Tensor:
    """x / 2^s rounded to nearest, ties towards +∞; x for s = 0 and 0 for s ≥ 63.

    ``s`` is an int or an int64 tensor broadcastable with ``x``; requires |x| < 2^62.
    """
    s = torch.as_tensor(s, dtype=torch.int64)
    if bool((s < 0).any()):
        raise ValueError("rshift_round needs shifts >= 0")
    big = s >= 63
    sc = torch.clamp(s, 0, 62)
    half = torch.where(sc > 0, torch.bitwise_left_shift(torch.ones_like(sc), sc - 1), 0)
    out = torch.bitwise_right_shift(x + half, sc)
    return torch.where(big, torch.zeros_like(out), out)


def _check_range(p: Tensor, what: str) -> None:
    if p.numel() and int(p.abs().max()) >= LIMIT:
        raise OverflowError(f"{what} reached 2^62; the integer semantics do not cover it")


def scale_round(x: Tensor, mult: Tensor | int, shift: Tensor | int) -> Tensor:
    """round(x·M·2^−t): :func:`rshift_round` for t ≥ 1, the exact left shift saturated to
    ±2^62 for t ≤ 0. ``mult`` and ``shift`` broadcast against ``x`` (per channel)."""
    mult = torch.as_tensor(mult, dtype=torch.int64)
    t = torch.as_tensor(shift, dtype=torch.int64)
    if x.numel() and int(x.abs().max()) >= 2**32:
        raise OverflowError("scale_round needs |x| < 2^32 so that x·M stays below 2^62")
    p = x * mult
    _check_range(p, "a scaled product")
    right = rshift_round(p, torch.clamp(t, min=0))
    s = torch.clamp(-t, 0, 62)
    cap = torch.bitwise_right_shift(torch.full_like(s, LIMIT), s)  # 2^(62−s)
    over = (p.abs() > cap) | ((-t > 62) & (p != 0))
    left = torch.where(over, torch.sign(p) * LIMIT, p * torch.bitwise_left_shift(1, s))
    return torch.where(t >= 1, right, left)


def saturate(x: Tensor, lo: int, hi: int) -> Tensor:
    return torch.clamp(x, lo, hi)


def shift_exponent(x: Tensor, d: int) -> Tensor:
    """x·2^d exactly for d ≥ 0, :func:`rshift_round`(x, −d) for d < 0."""
    if d >= 0:
        out = x * (1 << d)
        _check_range(out, "a left-shifted gradient")
        return out
    return rshift_round(x, -d)


def normalize_shift(max_abs: int) -> int:
    """The smallest sh ≥ 0 with rshift_round(max_abs, sh) ≤ 127."""
    if max_abs < 0 or max_abs >= LIMIT:
        raise ValueError(f"a gradient magnitude must lie in [0, 2^62), got {max_abs}")
    sh = 0
    while (max_abs + ((1 << sh) >> 1)) >> sh > GRAD_MAX:
        sh += 1
    return sh


def combine_exponent(e_new: int, bound_bits: int, e_prev: int) -> int:
    """The common unit exponent when a contribution (e_new, |S| < 2^bound_bits) is added to an
    existing int8 gradient with exponent e_prev (see the module docstring)."""
    return max(min(e_new, e_prev), e_new + bound_bits - _HEADROOM, e_prev + 7 - _HEADROOM)


# --- float32 -------------------------------------------------------------------------------

_F32 = np.float32
_LOG2E = _F32(1.4426950408889634)
_LN2_HI = _F32(0.693145751953125)  # 0x3f317200: k·LN2_HI is exact for |k| < 2^9
_LN2_LO = _F32(1.428606765330187e-06)
_EXP_COEFFS = tuple(_F32(1.0 / math.factorial(i)) for i in range(7))  # 1, 1, 1/2, … 1/720
_EXP_FLOOR = _F32(-80.0)


def round_half_up_f32(v: np.ndarray) -> np.ndarray:
    """⌊v + 1/2⌋ of float32 values, exactly (no rounding in the addition): t = ⌊v⌋,
    f = v − t (exact), t + (f ≥ 1/2). Returns int64; requires |v| < 2^31."""
    v = np.asarray(v, dtype=_F32)
    t = np.floor(v)
    f = v - t
    return t.astype(np.int64) + (f >= _F32(0.5)).astype(np.int64)


def exp_f32(d: np.ndarray) -> np.ndarray:
    """e^d for float32 d ≤ 0 in a fixed sequence of float32 operations.

    d < −80 gives 0 (no subnormal is ever formed). Otherwise k = round_half_up(d·log2 e),
    r = (d − k·LN2_HI) − k·LN2_LO, p = Horner of the degree-6 Taylor polynomial of e^r
    (q = 1/720; q = q·r + 1/120; …; q = q·r + 1), result p·2^k (exact).
    """
    d = np.asarray(d, dtype=_F32)
    if np.any(d > 0):
        raise ValueError("exp_f32 is defined for d <= 0 (softmax after subtracting the max)")
    under = d < _EXP_FLOOR
    d = np.where(under, _F32(0.0), d)
    k = round_half_up_f32(d * _LOG2E)
    kf = k.astype(_F32)
    r = d - kf * _LN2_HI
    r = r - kf * _LN2_LO
    q = np.full_like(r, _EXP_COEFFS[6])
    for c in reversed(_EXP_COEFFS[:6]):
        q = q * r
        q = q + c
    out = np.ldexp(q, k.astype(np.int32)).astype(_F32)
    return np.where(under, _F32(0.0), out)


def exp2_f32(e: int) -> np.float32:
    """2^e as a float32, e saturated to [−126, 127] (never subnormal or infinite)."""
    return np.float32(2.0 ** max(-126, min(127, e)))


def block_exponent_f32(max_abs: float) -> int:
    """The exponent e of a float32 gradient whose largest magnitude is ``max_abs``: the
    smallest e with max_abs ≤ 127·2^e, or 0 when max_abs < 2^−96 (then every mantissa is 0).
    """
    m = float(_F32(max_abs))
    if m < _FLUSH:
        return 0
    frac, exp = math.frexp(m)  # m = frac·2^exp
    return exp - 7 + (1 if frac > 127 / 128 else 0)
