"""Every C kernel against its reference in :mod:`tinytune.quant.kernels`, bit for bit.

The kernels are compiled with a small driver (``csrc/kernel_driver.c``) by the system gcc,
``-std=c99 -Wall -Wextra -Werror -O2``, and once more with the address and undefined-behaviour
sanitizers; each test feeds random int8 inputs and parameters through stdin and compares every
output array exactly (floats by their bit patterns).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.lowering.harness import build_driver, needs_gcc, run_program
from tinytune.quant import ActQuant, activation_tables
from tinytune.quant import kernels as K
from tinytune.quant.arith import quantize_multiplier, scale_round

pytestmark = needs_gcc

I8, I32, F32, U8 = np.int8, np.int32, np.float32, np.uint8


@pytest.fixture(scope="module", params=["O2", "O3", "O3-baseline", "sanitized"])
def driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver("kernel_driver", request.param, tmp_path_factory.mktemp("kernel_driver"))


def run(driver: Path, kernel: str, *arrays: np.ndarray) -> list[np.ndarray]:
    return run_program(driver, [kernel], arrays)


def i8(t: torch.Tensor) -> np.ndarray:
    return t.flatten().numpy().astype(I8)


def i32(*values: int | torch.Tensor) -> np.ndarray:
    flat: list[int] = []
    for v in values:
        flat += v.flatten().tolist() if isinstance(v, torch.Tensor) else [int(v)]
    return np.array(flat, dtype=I32)


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=F32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, dtype=F32), np.asarray(b, dtype=F32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def pack_bits(mask: torch.Tensor) -> np.ndarray:
    flat = mask.flatten().numpy().astype(np.uint8)
    flat = np.concatenate([flat, np.zeros((-flat.size) % 8, np.uint8)])
    return (flat.reshape(-1, 8) << np.arange(8, dtype=np.uint8)).sum(axis=1).astype(U8)


# --- convolution shapes ----------------------------------------------------------------------


@dataclass(frozen=True)
class Conv:
    in_c: int
    h: int
    w: int
    out_c: int
    kernel: int
    stride: int
    groups: int
    k: int  # trained leading input channels (depthwise: channels), the weight split
    pads: tuple[int, int, int, int] | None = None  # (top, bottom, left, right); else k // 2
    kernel_w: int | None = None  # a rectangular kernel's width; else ``kernel``
    stride_w: int | None = None  # the stride across where it differs; else ``stride``

    @property
    def kw(self) -> int:
        return self.kernel if self.kernel_w is None else self.kernel_w

    @property
    def sw(self) -> int:
        return self.stride if self.stride_w is None else self.stride_w

    @property
    def strides(self) -> int | tuple[int, int]:
        return self.stride if self.sw == self.stride else (self.stride, self.sw)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_c, self.in_c // self.groups, self.kernel, self.kw)

    @property
    def pad(self) -> tuple[int, int, int, int]:
        if self.pads is not None:
            return self.pads
        return (self.kernel // 2,) * 2 + (self.kw // 2,) * 2

    @property
    def out_hw(self) -> tuple[int, int]:
        top, bottom, left, right = self.pad
        return (
            (self.h + top + bottom - self.kernel) // self.stride + 1,
            (self.w + left + right - self.kw) // self.sw + 1,
        )

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.in_c == self.out_c

    def geom(self) -> np.ndarray:
        oh, ow = self.out_hw
        return i32(
            self.in_c, self.h, self.w, self.out_c, oh, ow,
            self.kernel, self.stride, self.pad[0], self.pad[2], self.groups, self.kw, self.sw,
        )  # fmt: skip

    def split(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dim = 0 if self.depthwise else 1
        return weight.split([self.k, weight.shape[dim] - self.k], dim=dim)


CONVS = {
    "pw frozen": Conv(8, 5, 5, 12, 1, 1, 1, 0),
    "pw 1/4": Conv(8, 5, 6, 12, 1, 1, 1, 2),
    "pw whole": Conv(8, 4, 4, 6, 1, 1, 1, 8),
    "pw two tiles": Conv(7, 9, 10, 5, 1, 1, 1, 3),  # 90 pixels: a full tile and a partial one
    # fewer than 16 pixels: dot products over the channels, the input gradient's sums kept
    "pw one pixel 1/4": Conv(40, 1, 1, 24, 1, 1, 1, 10),
    "pw 2x2 whole": Conv(24, 2, 2, 12, 1, 1, 1, 24),
    "pw 3x5 frozen": Conv(20, 3, 5, 9, 1, 1, 1, 0),
    "pw 2x2 over the kept sums": Conv(300, 2, 2, 6, 1, 1, 1, 7),  # 1,200 sums > 1,024
    "pw 3x5 two gathers": Conv(400, 3, 5, 4, 1, 1, 1, 100),  # 4,096 bytes hold 10 pixels
    "pw one pixel wider than the gather": Conv(4200, 1, 1, 64, 1, 1, 1, 5),
    "dw3 s1": Conv(12, 7, 7, 12, 3, 1, 12, 3),
    "dw5 s2": Conv(10, 9, 9, 10, 5, 2, 10, 0),
    "dw7 s2 even": Conv(6, 6, 8, 6, 7, 2, 6, 6),
    "dw3 s2 odd": Conv(4, 9, 7, 4, 3, 2, 4, 1),
    "dw3 wider than a tile": Conv(3, 3, 70, 3, 3, 1, 3, 2),  # the direct loop
    # Linux builds: up to 64 output pixels with channels contiguous, else padded planes
    "dw3 s2 to one pixel": Conv(200, 2, 2, 200, 3, 2, 200, 50),
    "dw3 s1 over 64 pixels": Conv(5, 12, 11, 5, 3, 1, 5, 2),
    "dw3 s1 over the few values": Conv(300, 4, 4, 300, 3, 1, 300, 40),  # 4,800 > 4,096
    "stem s2 1/2": Conv(3, 11, 11, 8, 3, 2, 1, 2),
    "grouped whole": Conv(8, 7, 7, 16, 3, 2, 2, 4),
    "grouped frozen": Conv(8, 5, 5, 8, 5, 1, 2, 0),
    # padded planes of 12 x 2 x 64 x 32 values, over the 32,768 a Linux build keeps
    "s2 planes over the stack": Conv(12, 62, 62, 4, 3, 2, 1, 3),
    # TensorFlow's "SAME": nothing before, one pixel after (k = 3), one and two (k = 5)
    "same dw3 s2": Conv(6, 8, 10, 6, 3, 2, 6, 2, (0, 1, 0, 1)),
    "same dw5 s2": Conv(5, 10, 6, 5, 5, 2, 5, 0, (1, 2, 1, 2)),
    "same stem s2": Conv(3, 16, 16, 8, 3, 2, 1, 3, (0, 1, 0, 1)),
    "same dw3 s2 few": Conv(40, 4, 4, 40, 3, 2, 40, 8, (0, 1, 0, 1)),
    # a patch's region of a larger tensor: padding at the image's border only, input rows and
    # columns the output does not read (negative), no padding where the region goes on
    "patch dw3 s1 top left": Conv(7, 9, 8, 7, 3, 1, 7, 0, (1, -1, 1, -1)),
    "patch dw3 s2 inside": Conv(6, 11, 9, 6, 3, 2, 6, 0, (-1, 0, 0, 0)),
    "patch pw cropped": Conv(8, 6, 7, 5, 1, 1, 1, 0, (-1, -2, -2, 0)),
    "patch stem s2 bottom right": Conv(3, 10, 12, 8, 3, 2, 1, 0, (-1, 1, 0, 1)),
    # rectangular kernels and strides (DS-CNN's 10x4 stem on 49x10 features, a 1-D
    # convolution as a 1xk one over 1xT): the direct loops
    "ds-cnn stem 10x4 s2 same": Conv(1, 49, 10, 8, 10, 2, 1, 1, (4, 5, 1, 2), kernel_w=4),
    "1-d conv 1x5 s1": Conv(6, 1, 32, 8, 1, 1, 1, 3, (0, 0, 2, 2), kernel_w=5),
    "1-d conv 1x3 s2": Conv(4, 1, 33, 5, 1, 1, 1, 4, (0, 0, 1, 1), kernel_w=3, stride_w=2),
    "dw 3x1 s(2, 1)": Conv(6, 11, 7, 6, 3, 2, 6, 2, (1, 1, 0, 0), kernel_w=1, stride_w=1),
    "dw 1x5 1-d": Conv(5, 1, 20, 5, 1, 1, 5, 5, (0, 0, 2, 2), kernel_w=5),
    "pw s(1, 2)": Conv(8, 4, 9, 6, 1, 1, 1, 3, (0, 0, 0, 0), stride_w=2),
}


def rng(*key: object) -> torch.Generator:
    """A generator seeded from ``key`` (stable across processes, unlike ``hash``)."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def rand_int(lo: int, hi: int, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64)


def rand_grad(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """int8 mantissas with about a third zeros (as after a ReLU mask)."""
    v = rand_int(-127, 127, shape, g)
    return torch.where(rand_int(0, 2, shape, g) == 0, 0, v)


def multipliers(n: int, lo: int, hi: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random (M, shift) with M ∈ [2^30, 2^31) and shift ∈ [lo, hi]."""
    return rand_int(2**30, 2**31 - 1, (n,), g), rand_int(lo, hi, (n,), g)


@pytest.mark.parametrize("name", CONVS)
@pytest.mark.parametrize("act", ["none", "relu6"])
def test_conv2d_s8(driver, name, act):
    c = CONVS[name]
    g = rng(name, act)
    x = rand_int(-128, 127, (1, c.in_c, c.h, c.w), g)
    weight = rand_int(-127, 127, c.weight_shape, g)
    bias = rand_int(-(2**14), 2**14, (c.out_c,), g)
    mult, shift = multipliers(c.out_c, 36, 44, g)
    x_zero, y_zero = (int(v) for v in rand_int(-128, 127, (2,), g))
    lo, hi = (-128, 127) if act == "none" else (y_zero, min(127, y_zero + 90))
    y, mask = K.conv2d_s8(
        x, x_zero, weight, bias, mult, shift, y_zero, lo, hi, c.strides, c.pad, c.groups
    )
    train, frozen = c.split(weight)
    out_y, out_mask = run(
        driver, "conv2d_s8", c.geom(), i8(x), i8(train), i8(frozen), i32(c.k), i32(bias),
        i32(x_zero, y_zero, lo, hi), i32(mult), i32(shift), i32(act != "none"),
    )  # fmt: skip
    assert np.array_equal(out_y, i8(y))
    if act == "none":
        assert out_mask.size == 0
    else:
        assert not mask.all() and mask.any()  # the clamp was exercised
        assert np.array_equal(out_mask, pack_bits(mask))


@pytest.mark.parametrize("name", ["pw one pixel 1/4", "dw3 s1", "stem s2 1/2"])
def test_conv2d_s8_every_rounding_shift(driver, name):
    """Shifts at and beyond the ends of the branch-free requantisation (1 .. 62)."""
    c = CONVS[name]
    g = rng(name, "shifts")
    x = rand_int(-128, 127, (1, c.in_c, c.h, c.w), g)
    weight = rand_int(-127, 127, c.weight_shape, g)
    bias = rand_int(-(2**14), 2**14, (c.out_c,), g)
    ends = torch.tensor([-3, 0, 1, 2, 31, 45, 62, 63, 64])
    shift = ends[torch.arange(c.out_c) % len(ends)]
    mult = rand_int(2**30, 2**31 - 1, (c.out_c,), g)
    x_zero, y_zero = 3, -5
    y, mask = K.conv2d_s8(x, x_zero, weight, bias, mult, shift, y_zero, -128, 127, c.strides,
                          c.pad, c.groups)  # fmt: skip
    train, frozen = c.split(weight)
    out_y, out_mask = run(
        driver, "conv2d_s8", c.geom(), i8(x), i8(train), i8(frozen), i32(c.k), i32(bias),
        i32(x_zero, y_zero, -128, 127), i32(mult), i32(shift), i32(1),
    )  # fmt: skip
    assert np.array_equal(out_y, i8(y))
    assert np.array_equal(out_mask, pack_bits(mask))


def test_add_s8(driver):
    g = rng(1)
    a, b = rand_int(-128, 127, (2, 3, 5, 7), g)
    am, shift = quantize_multiplier(1.1)
    bm = round(0.9 * 2.0**shift)
    y = K.add_s8(a, b, -5, 17, am, bm, shift, -20)
    (out,) = run(driver, "add_s8", i8(a), i8(b), i32(-5, 17, am, bm, shift, -20))
    assert np.array_equal(out, i8(y))
    assert (y == 127).any() and (y == -128).any()


@pytest.mark.parametrize(("act_min", "act_max"), [(-20, 127), (-20, 40)])
def test_add_act_s8(driver, act_min: int, act_max: int) -> None:
    """A sum and its ReLU (or ReLU6), with the mask of what the clamp left unchanged."""
    g = rng(11)
    a, b = rand_int(-128, 127, (2, 3, 5, 7), g)
    am, shift = quantize_multiplier(1.1)
    bm = round(0.9 * 2.0**shift)
    y, mask = K.add_act_s8(a, b, -5, 17, am, bm, shift, -20, act_min, act_max)
    out, out_mask = run(
        driver, "add_act_s8", i8(a), i8(b), i32(-5, 17, am, bm, shift, -20, act_min, act_max)
    )
    assert np.array_equal(out, i8(y))
    assert np.array_equal(out_mask, pack_bits(mask))
    assert (y == act_min).any() and not mask.all()


def test_gap_s8(driver):
    g = rng(2)
    x = rand_int(-128, 127, (1, 9, 5, 6), g)
    mult, shift = quantize_multiplier(1.7 / 30)
    y = K.gap_s8(x, -30, mult, shift, 3)
    (out,) = run(driver, "gap_s8", i8(x), i32(9, 30, -30, mult, shift, 3))
    assert np.array_equal(out, i8(y))


def _linear_case(seed: int, in_f: int = 37, out_f: int = 7):
    r = np.random.default_rng(seed)
    x = torch.from_numpy(r.integers(-128, 128, in_f))
    w = r.normal(0, 0.3, (out_f, in_f)).astype(F32)
    b = r.normal(0, 0.1, out_f).astype(F32)
    return x, w, b


def test_linear_f32(driver):
    x, w, b = _linear_case(3)
    logits = K.linear_f32(x, -11, 0.0473, w, b)
    (out,) = run(driver, "linear_f32", i8(x), i32(-11), f32(0.0473), w.ravel(), b)
    assert same_bits(out, logits)


@pytest.mark.parametrize(
    "logits",
    [
        [0.3, -1.2, 2.5, 2.5, 0.0],
        [80.0, -5.0, 0.0, -30.0],  # e^(−85) underflows to the 0 of the spec
        [1e-3, 2e-3, -4e-3],
        [-60.0, -61.5, -200.0, -60.0, 3.0],
    ],
)
def test_softmax_xent_grad(driver, logits):
    z = np.array(logits, dtype=F32)
    for label in (0, len(logits) - 1):
        ref = K.softmax_xent_grad(z, label)
        out, in_place = run(driver, "softmax_xent_grad", z, i32(label))
        assert same_bits(out, ref) and same_bits(in_place, ref)
        exact = np.exp(z.astype(np.float64) - z.max())
        exact = exact / exact.sum() - (np.arange(len(z)) == label)
        assert np.allclose(ref, exact, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("grad_scale", [1.0, 1e-20, 0.0, 1e-35])
@pytest.mark.parametrize("want", [True, False])
def test_linear_f32_backward(driver, grad_scale, want):
    x, w, b = _linear_case(4)
    grad = (np.random.default_rng(5).normal(0, 0.4, w.shape[0]) * grad_scale).astype(F32)
    new_w, new_b, gx = K.linear_f32_backward(x, 9, 0.031, w, b, grad, 0.05, want)
    out_w, out_b, out_gx, out_exp = run(
        driver, "linear_f32_backward", i8(x), i32(9), f32(0.031), w.ravel(), b, grad,
        f32(0.05), i32(want),
    )  # fmt: skip
    assert same_bits(out_w, new_w.ravel()) and same_bits(out_b, new_b)
    if want:
        assert np.array_equal(out_gx, i8(gx.mantissa)) and int(out_exp[0]) == gx.exp
        if grad_scale >= 1e-20:
            assert int(gx.mantissa.abs().max()) > 63  # 8 bits of the largest element are used
    else:
        assert out_gx.size == 0


def test_grad_mask(driver):
    g = rng(6)
    grad = rand_grad((1, 5, 3, 3), g)  # 45 elements: the last mask byte is partial
    mask = rand_int(0, 1, (1, 5, 3, 3), g).bool()
    ref = K.grad_mask(K.Grad(grad, 0), mask)
    (out,) = run(driver, "grad_mask", i8(grad), pack_bits(mask))
    assert np.array_equal(out, i8(ref.mantissa))


IDEAL = {
    "hswish": F.hardswish,
    "hsigmoid": F.hardsigmoid,
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
}


@pytest.mark.parametrize("act", list(IDEAL))
def test_act_table_s8(driver, act):
    """Every pre-activation value through a real table (the quantizer's, from calibrated
    ranges); the output lies within half a step of f of the dequantized pre-activation."""
    pre_q, out_q = ActQuant.from_range(-7.5, 9.0), ActQuant.from_range(-0.4, 9.0)
    table, _ = activation_tables(act, pre_q, out_q)
    pre = torch.arange(-128, 128).view(1, 4, 8, 8)
    y = K.act_table_s8(pre, table)
    (out,) = run(driver, "act_table_s8", i8(pre), i8(table))
    assert np.array_equal(out, i8(y))
    real = out_q.dequantize(y)
    x = pre_q.dequantize(pre)
    ideal = IDEAL[act](x)
    assert float((real - ideal).abs().max()) <= out_q.scale / 2 + 1e-12


@pytest.mark.parametrize("act", ["sigmoid", "silu"])
def test_derivative_tables_are_autograds(act):
    """D[q] = round(f'(x)·2^12) at every dequantized pre-activation x, f' from torch autograd
    in float64."""
    pre_q = ActQuant.from_range(-6.0, 7.0)
    _, dtable = activation_tables(act, pre_q, ActQuant.from_range(-0.4, 7.0))
    x = pre_q.dequantize(torch.arange(-128, 128)).requires_grad_()
    IDEAL[act](x).sum().backward()
    assert torch.equal(dtable, torch.round(x.grad * 2.0**K.ACT_GRAD_FRAC_BITS).long())


def test_mul_s8(driver):
    g = rng("mul")
    x = rand_int(-128, 127, (1, 6, 5, 7), g)
    s = rand_int(-128, 127, (1, 6, 1, 1), g)
    mult, shift = quantize_multiplier(0.02 * 0.004 / 0.01)
    y = K.mul_s8(x, s, -9, -128, mult, shift, 4)
    (out,) = run(driver, "mul_s8", i8(x), i8(s), i32(6, 35, -9, -128, mult, shift, 4))
    assert np.array_equal(out, i8(y))
    assert (y == 127).any() or (y == -128).any()


@pytest.mark.parametrize("act", list(IDEAL))
@pytest.mark.parametrize("g_exp", [-40, -9, 3])
def test_grad_act_table(driver, act, g_exp):
    g = rng("act table", act, g_exp)
    _, dtable = activation_tables(
        act, ActQuant.from_range(-5.0, 6.0), ActQuant.from_range(-0.4, 6.0)
    )
    shape = (1, 7, 5, 5)
    gy = K.Grad(rand_grad(shape, g), g_exp)
    pre = rand_int(-128, 127, shape, g)
    ref = K.grad_act_table(gy, pre, dtable, K.ACT_GRAD_FRAC_BITS)
    out, out_exp = run(
        driver, "grad_act_table", i8(gy.mantissa), i32(gy.exp), i8(pre), i32(dtable),
        i32(K.ACT_GRAD_FRAC_BITS),
    )  # fmt: skip
    assert np.array_equal(out, i8(ref.mantissa)) and int(out_exp[0]) == ref.exp
    assert int(ref.mantissa.abs().max()) > 63


@pytest.mark.parametrize("offset", [None, 0, -9, 12, -70, 70])
def test_mul_grad_x(driver, offset):
    g = rng("mul grad x", offset)
    shape = (1, 6, 4, 5)
    gy = K.Grad(rand_grad(shape, g), -11)
    s = rand_int(-128, 127, (1, 6, 1, 1), g)
    s_mult, frac = round(0.0039 * 2.0**22), 22
    contribution = K.mul_grad_x(gy, s, -128, s_mult, frac)
    prev = _prev(shape, contribution.exp, offset, g)
    ref = K.emit(contribution, prev)
    out, out_exp = run(
        driver, "mul_grad_x", i8(gy.mantissa), i8(s), i32(gy.exp, 6, 20, -128, s_mult, frac),
        *_dst(prev, shape),
    )  # fmt: skip
    assert np.array_equal(out, i8(ref.mantissa)) and int(out_exp[0]) == ref.exp


@pytest.mark.parametrize("offset", [None, 0, -9, 12, -70, 70])
@pytest.mark.parametrize("hw", [(1, 1), (4, 5), (56, 56)])
def test_mul_grad_scale(driver, offset, hw):
    """Per-channel sums over up to 56×56 pixels (an int64 sum in C)."""
    g = rng("mul grad scale", offset, hw)
    shape = (1, 6, *hw)
    gy = K.Grad(rand_grad(shape, g), 2)
    x = rand_int(-128, 127, shape, g)
    x_mult, frac = round(0.021 * 2.0**20), 20
    contribution = K.mul_grad_scale(gy, x, -17, x_mult, frac)
    prev = _prev((1, 6, 1, 1), contribution.exp, offset, g)
    ref = K.emit(contribution, prev)
    out, out_exp = run(
        driver, "mul_grad_scale", i8(gy.mantissa), i8(x),
        i32(gy.exp, 6, hw[0] * hw[1], -17, x_mult, frac), *_dst(prev, (1, 6, 1, 1)),
    )  # fmt: skip
    assert np.array_equal(out, i8(ref.mantissa)) and int(out_exp[0]) == ref.exp


# prev exponent relative to the new contribution's: equal, far below, far above, and beyond
# the headroom on both sides
PREV_OFFSETS = [None, 0, -9, 12, -70, 70]


def _prev(shape: tuple[int, ...], e_new: int, offset: int | None, g: torch.Generator):
    if offset is None:
        return None
    return K.Grad(rand_grad(shape, g), e_new + offset)


def _dst(prev: K.Grad | None, shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    if prev is None:
        return np.zeros(math.prod(shape), I8), i32(12345), i32(0)
    return i8(prev.mantissa), i32(prev.exp), i32(1)


@pytest.mark.parametrize("name", CONVS)
@pytest.mark.parametrize("offset", PREV_OFFSETS)
def test_conv2d_grad_input(driver, name, offset):
    c = CONVS[name]
    g = rng(name, offset, "grad input")
    oh, ow = c.out_hw
    gy = K.Grad(rand_grad((1, c.out_c, oh, ow), g), int(rand_int(-30, 5, (), g)))
    weight = rand_int(-127, 127, c.weight_shape, g)
    w_mult = rand_int(1, 2**15, (c.out_c,), g)
    frac = 21
    shape = (1, c.in_c, c.h, c.w)
    contribution = K.conv2d_grad_input(gy, weight, w_mult, frac, shape, c.strides, c.pad, c.groups)
    prev = _prev(shape, contribution.exp, offset, g)
    ref = K.emit(contribution, prev)
    train, frozen = c.split(weight)
    out, out_exp = run(
        driver, "conv2d_grad_input", c.geom(), i8(gy.mantissa), i32(gy.exp), i8(train),
        i8(frozen), i32(c.k), i32(w_mult), i32(frac), *_dst(prev, shape),
    )  # fmt: skip
    assert np.array_equal(out, i8(ref.mantissa)) and int(out_exp[0]) == ref.exp
    assert int(ref.mantissa.abs().max()) > 63


@pytest.mark.parametrize("hw", [(5, 3), (1, 1)])
@pytest.mark.parametrize("offset", PREV_OFFSETS)
def test_gap_grad_input(driver, offset, hw):
    g = rng("gap", offset, *hw)
    gy = K.Grad(rand_grad((1, 11, 1, 1), g), -13)
    hw_mult = round(2.0**18 / math.prod(hw))
    contribution = K.gap_grad_input(gy, hw_mult, 18, hw)
    shape = (1, 11, *hw)
    prev = _prev(shape, contribution.exp, offset, g)
    ref = K.emit(contribution, prev)
    out, out_exp = run(
        driver, "gap_grad_input", i8(gy.mantissa), i32(gy.exp, 11, math.prod(hw), hw_mult, 18),
        *_dst(prev, shape),
    )  # fmt: skip
    assert np.array_equal(out, i8(ref.mantissa)) and int(out_exp[0]) == ref.exp


@pytest.mark.parametrize("offset", PREV_OFFSETS)
def test_grad_accumulate(driver, offset):
    g = rng("accumulate", offset)
    shape = (1, 4, 3, 5)
    gy = K.Grad(rand_grad(shape, g), -4)
    prev = _prev(shape, gy.exp, offset, g)
    ref = K.emit(K.add_grad_input(gy), prev)
    out, out_exp = run(driver, "grad_accumulate", i8(gy.mantissa), i32(gy.exp), *_dst(prev, shape))
    assert np.array_equal(out, i8(ref.mantissa)) and int(out_exp[0]) == ref.exp
    if prev is None:
        assert torch.equal(ref.mantissa, gy.mantissa) and ref.exp == gy.exp


@pytest.mark.parametrize(
    ("hw", "shifts"),
    [((3, 4), (-40, 40)), ((1, 1), (-40, 40)), ((1, 1), (1, 62)), ((1, 1), (1, 3))],
)
@pytest.mark.parametrize("gy_exp", [-40, -12, 0, 25])
def test_update_bias(driver, gy_exp, hw, shifts):
    """Left shifts that saturate, and one gradient a channel with every right shift of 1 to 62
    (the Linux targets' loop without branches)."""
    g = rng("bias", gy_exp, *hw, *shifts)
    channels = 70
    gy = K.Grad(rand_grad((1, channels, *hw), g), gy_exp)
    bias = rand_int(-(2**20), 2**20, (channels,), g)
    bias[0], bias[1] = 2**31 - 1, -(2**31)  # saturation at both ends
    mult, shift = multipliers(channels, gy_exp + shifts[0], gy_exp + shifts[1], g)
    new, _ = K.update_bias(gy, bias, mult, shift)
    (out,) = run(
        driver, "update_bias", i8(gy.mantissa), i32(gy.exp, channels, math.prod(hw)), i32(bias),
        i32(mult), i32(shift),
    )  # fmt: skip
    assert np.array_equal(out, i32(new))
    assert not torch.equal(new, bias)


@pytest.mark.parametrize("name", [n for n, c in CONVS.items() if c.k])
@pytest.mark.parametrize("gy_exp", [-30, -8, 20])
def test_conv2d_update_weight(driver, name, gy_exp):
    c = CONVS[name]
    g = rng(name, gy_exp, "update")
    oh, ow = c.out_hw
    gy = K.Grad(rand_grad((1, c.out_c, oh, ow), g), gy_exp)
    weight = rand_int(-127, 127, c.weight_shape, g)
    train, _ = c.split(weight)
    saved = c.in_c if c.groups > 1 and not c.depthwise else c.k
    x = rand_int(-128, 127, (1, saved, c.h, c.w), g)
    mult, shift = multipliers(c.out_c, gy_exp + 8, gy_exp + 24, g)  # |Δ| from 0 to ~2^9
    new, _ = K.conv2d_update_weight(
        gy, x, -7, train, mult, shift, c.strides, c.pad, c.groups, c.depthwise
    )
    (out,) = run(
        driver, "conv2d_update_weight", c.geom(), i8(gy.mantissa), i32(gy.exp, -7, c.k), i8(x),
        i8(train), i32(mult), i32(shift),
    )  # fmt: skip
    assert np.array_equal(out, i8(new))
    assert not torch.equal(new, train)


# --- lite residual ops -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "ratio"),
    [((5, 8, 8), (2, 2)), ((3, 9, 7), (2, 2)), ((4, 12, 12), (4, 4)), ((3, 1, 13), (1, 3))],
)
def test_avgpool_s8(driver, shape, ratio):
    g = rng("pool", shape)
    x = rand_int(-128, 127, (1, *shape), g)
    mult, shift = quantize_multiplier(1.3 / (ratio[0] * ratio[1]))
    y = K.avgpool_s8(x, 9, ratio, mult, shift, -3)
    (out,) = run(driver, "avgpool_s8", i8(x), i32(*shape, *ratio, 9, mult, shift, -3))
    assert np.array_equal(out, i8(y))
    sums = (F.avg_pool2d((x - 9).double(), ratio) * (ratio[0] * ratio[1])).round().long()
    assert torch.equal(y, torch.clamp(-3 + scale_round(sums, mult, shift), -128, 127))


@pytest.mark.parametrize("offset", PREV_OFFSETS)
@pytest.mark.parametrize(
    ("shape", "ratio"), [((5, 8, 8), (2, 2)), ((3, 9, 7), (2, 2)), ((3, 1, 13), (1, 3))]
)
def test_avgpool_grad_input(driver, shape, ratio, offset):
    g = rng("pool grad", shape, offset)
    c, h, w = shape
    gy = K.Grad(rand_grad((1, c, h // ratio[0], w // ratio[1]), g), -9)
    frac = 16
    area = round(2.0**frac / (ratio[0] * ratio[1]))
    contribution = K.avgpool_grad_input(gy, ratio, area, frac, (1, *shape))
    prev = _prev((1, *shape), contribution.exp, offset, g)
    ref = K.emit(contribution, prev)
    out, out_exp = run(
        driver, "avgpool_grad_input", i8(gy.mantissa), i32(gy.exp, *shape, *ratio, area, frac),
        *_dst(prev, (1, *shape)),
    )  # fmt: skip
    assert np.array_equal(out, i8(ref.mantissa)) and int(out_exp[0]) == ref.exp


POOLS = [
    ((4, 9, 8), (3, 3), (2, 2), (1, 1, 1, 1)),
    ((3, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0)),
    ((2, 7, 10), (3, 2), (1, 2), (1, 1, 0, 0)),
    ((3, 9, 9), (3, 3), (2, 2), (0, -1, 0, -1)),  # the last row and column no window reads
]


def _pool_geom(shape, kernel, stride, pads) -> np.ndarray:
    c, h, w = shape
    oh = (h + pads[0] + pads[1] - kernel[0]) // stride[0] + 1
    ow = (w + pads[2] + pads[3] - kernel[1]) // stride[1] + 1
    return i32(c, h, w, oh, ow, *kernel, *stride, pads[0], pads[2])


@pytest.mark.parametrize("values", [(-128, 127), (-2, 2)], ids=["spread", "ties"])
@pytest.mark.parametrize(("shape", "kernel", "stride", "pads"), POOLS)
def test_maxpool_s8(driver, shape, kernel, stride, pads, values):
    g = rng("max pool", shape, values)
    x = rand_int(*values, (1, *shape), g)
    y = K.maxpool_s8(x, kernel, stride, pads)
    (out,) = run(driver, "maxpool_s8", _pool_geom(shape, kernel, stride, pads), i8(x))
    assert np.array_equal(out, i8(y))


@pytest.mark.parametrize("offset", PREV_OFFSETS)
@pytest.mark.parametrize("values", [(-128, 127), (-2, 2)], ids=["spread", "ties"])
@pytest.mark.parametrize(("shape", "kernel", "stride", "pads"), POOLS)
def test_maxpool_grad_input(driver, shape, kernel, stride, pads, values, offset):
    g = rng("max pool grad", shape, values, offset)
    x = rand_int(*values, (1, *shape), g)
    y = K.maxpool_s8(x, kernel, stride, pads)
    gy = K.Grad(rand_grad(tuple(y.shape), g), -9)
    contribution = K.maxpool_grad_input(gy, x, kernel, stride, pads)
    prev = _prev((1, *shape), contribution.exp, offset, g)
    ref = K.emit(contribution, prev)
    out, out_exp = run(
        driver, "maxpool_grad_input", _pool_geom(shape, kernel, stride, pads), i8(gy.mantissa),
        i32(gy.exp), i8(x), *_dst(prev, (1, *shape)),
    )  # fmt: skip
    assert np.array_equal(out, i8(ref.mantissa)) and int(out_exp[0]) == ref.exp


def axis_array(a: K.InterpAxis) -> np.ndarray:
    return np.concatenate([[a.n_in, a.n_out], a.i0, a.i1, a.w0, a.w1, a.lo, a.hi]).astype(I32)


UPSAMPLES = [((2, 2), (4, 4)), ((3, 5), (7, 10)), ((4, 4), (8, 8)), ((2, 3), (5, 3))]


def test_interpolation_tables_follow_torch_bilinear():
    """The integer tables reproduce F.interpolate(bilinear, align_corners=False) up to their
    Q10 weights."""
    for (h, w), (oh, ow) in UPSAMPLES:
        x = torch.randn(1, 2, h, w, dtype=torch.float64)
        ref = F.interpolate(x, size=(oh, ow), mode="bilinear", align_corners=False)
        my, mx = K.interp_axis(h, oh).matrix().double(), K.interp_axis(w, ow).matrix().double()
        got = my @ x @ mx.T / 2.0 ** (2 * K.INTERP_FRAC_BITS)
        assert torch.allclose(got, ref, atol=2e-3 * float(x.abs().max()))


@pytest.mark.parametrize(("src", "dst"), UPSAMPLES)
def test_upsample_s8(driver, src, dst):
    g = rng("up", src, dst)
    x = rand_int(-128, 127, (1, 3, *src), g)
    ay, ax = K.interp_axis(src[0], dst[0]), K.interp_axis(src[1], dst[1])
    mult, shift = quantize_multiplier(0.9 / 2.0**20)
    y = K.upsample_s8(x, 11, ay, ax, mult, shift, -7)
    (out,) = run(
        driver, "upsample_s8", i8(x), axis_array(ay), axis_array(ax), i32(3, 11, mult, shift, -7)
    )
    assert np.array_equal(out, i8(y))


@pytest.mark.parametrize("offset", PREV_OFFSETS)
@pytest.mark.parametrize(("src", "dst"), UPSAMPLES)
def test_upsample_grad_input(driver, src, dst, offset):
    g = rng("up grad", src, dst, offset)
    ay, ax = K.interp_axis(src[0], dst[0]), K.interp_axis(src[1], dst[1])
    gy = K.Grad(rand_grad((1, 3, *dst), g), -5)
    contribution = K.upsample_grad_input(gy, ay, ax, K.INTERP_FRAC_BITS)
    shape = (1, 3, *src)
    prev = _prev(shape, contribution.exp, offset, g)
    ref = K.emit(contribution, prev)
    out, out_exp = run(
        driver, "upsample_grad_input", i8(gy.mantissa), axis_array(ay), axis_array(ax),
        i32(gy.exp, 3, K.INTERP_FRAC_BITS), *_dst(prev, shape),
    )  # fmt: skip
    assert np.array_equal(out, i8(ref.mantissa)) and int(out_exp[0]) == ref.exp


GROUPNORMS = {  # channels, h, w, groups, relu, beta
    "one group relu": (8, 4, 4, 1, True, True),
    "two groups": (16, 3, 5, 2, False, False),
    "twelve channels": (12, 4, 4, 1, False, False),
}


def _groupnorm_case(name: str):
    c, h, w, groups, relu, has_beta = GROUPNORMS[name]
    r = np.random.default_rng(zlib.crc32(name.encode()))
    x = torch.from_numpy(r.integers(-128, 128, (1, c, h, w)))
    gamma = r.normal(0, 0.8, c).astype(F32)
    beta = r.normal(0, 0.3, c).astype(F32) if has_beta else None
    y_zero = -128 if relu else 5
    lo, hi = (y_zero, 127) if relu else (-128, 127)
    ints = i32(c, h * w, groups, -6, y_zero, lo, hi)
    floats = f32(0.037, 0.021, 1e-5)
    return x, gamma, beta, groups, ints, floats, relu


@pytest.mark.parametrize("name", GROUPNORMS)
def test_groupnorm_f32(driver, name):
    x, gamma, beta, groups, ints, floats, relu = _groupnorm_case(name)
    y, mask, stats = K.groupnorm_f32(
        x, -6, float(floats[0]), gamma, beta, groups, float(floats[1]), int(ints[4]),
        int(ints[5]), int(ints[6]), float(floats[2]),
    )  # fmt: skip
    beta_arr = beta if beta is not None else np.zeros(0, F32)
    out_y, out_mask, out_stats = run(
        driver, "groupnorm_f32", i8(x), ints, floats, gamma, beta_arr, i32(relu)
    )
    assert np.array_equal(out_y, i8(y))
    assert same_bits(out_stats, stats.ravel())
    if relu:
        assert np.array_equal(out_mask, pack_bits(mask)) and not mask.all()
    # against float64: the normalised values, before rounding to int8
    xr = (x.double() + 6) * float(floats[0])
    ref = F.group_norm(
        xr,
        groups,
        torch.from_numpy(gamma).double(),
        None if beta is None else torch.from_numpy(beta).double(),
        eps=1e-5,
    )
    ref = torch.relu(ref) if relu else ref
    deq = (y.double() - int(ints[4])) * float(floats[1])
    inside = (ref / float(floats[1]) + int(ints[4])).abs() < 127
    assert torch.all(((deq - ref).abs() <= 0.5001 * float(floats[1]))[inside])


@pytest.mark.parametrize("want", [True, False])
@pytest.mark.parametrize("name", GROUPNORMS)
def test_groupnorm_f32_backward(driver, name, want):
    x, gamma, beta, groups, ints, floats, _ = _groupnorm_case(name)
    _, _, stats = K.groupnorm_f32(
        x, -6, float(floats[0]), gamma, beta, groups, float(floats[1]), int(ints[4]),
        int(ints[5]), int(ints[6]), float(floats[2]),
    )  # fmt: skip
    g = rng("gn grad", name)
    gy = K.Grad(rand_grad(tuple(x.shape), g), -11)
    new_gamma, new_beta, gx = K.groupnorm_f32_backward(
        gy, x, -6, float(floats[0]), gamma, beta, stats, groups, 0.05, want
    )
    beta_arr = beta if beta is not None else np.zeros(0, F32)
    out_gamma, out_beta, out_gx, out_exp = run(
        driver, "groupnorm_f32_backward", i8(gy.mantissa), i32(gy.exp), i8(x), ints, floats,
        gamma, beta_arr, stats.ravel(), f32(0.05), i32(want),
    )  # fmt: skip
    assert same_bits(out_gamma, new_gamma)
    assert same_bits(out_beta, new_beta if new_beta is not None else np.zeros(0, F32))
    if want:
        assert np.array_equal(out_gx, i8(gx.mantissa)) and int(out_exp[0]) == gx.exp
    # against float64 autograd of the group norm at the same point
    xr = ((x.double() + 6) * float(floats[0])).requires_grad_(True)
    gm = torch.from_numpy(gamma).double().requires_grad_(True)
    bt = None if beta is None else torch.from_numpy(beta).double().requires_grad_(True)
    F.group_norm(xr, groups, gm, bt, eps=1e-5).backward(gy.real())
    assert np.allclose(gamma - new_gamma, 0.05 * gm.grad.numpy(), rtol=1e-4, atol=1e-6)
    if want:
        bound = 2.0 ** (gx.exp - 1) + 1e-4 * float(xr.grad.abs().max())
        assert float((gx.real() - xr.grad).abs().max()) <= bound
