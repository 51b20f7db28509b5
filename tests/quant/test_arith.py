"""The primitives of the integer semantics against their mathematical definitions, computed
with Python's exact integers and fractions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tinytune.quant.arith import (
    LIMIT,
    block_exponent_f32,
    combine_exponent,
    exp_f32,
    frac_bits_for,
    normalize_shift,
    quantize_multiplier,
    round_half_up_f32,
    rshift_round,
    scale_round,
    shift_exponent,
)

below_limit = st.integers(-(LIMIT - 1), LIMIT - 1)


def round_half_up(q: Fraction) -> int:
    return math.floor(q + Fraction(1, 2))


def t64(v: int) -> torch.Tensor:
    return torch.tensor([v], dtype=torch.int64)


@settings(deadline=None)  # torch calls per example; the machine may be busy
@given(st.floats(1e-12, 1e12))
def test_quantize_multiplier_is_a_31_bit_mantissa(real):
    m, n = quantize_multiplier(real)
    assert 2**30 <= m < 2**31
    assert abs(Fraction(m, 1) / Fraction(2) ** n - Fraction(real)) <= Fraction(real) * 2**-31


def test_quantize_multiplier_of_zero_and_ties():
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(1.0) == (2**30, 30)
    assert quantize_multiplier(0.75) == (3 * 2**29, 31)


@settings(deadline=None)  # torch calls per example; the machine may be busy
@given(below_limit, st.integers(0, 80))
def test_rshift_round_is_round_half_up(x, s):
    expected = round_half_up(Fraction(x, 2**s))
    assert int(rshift_round(t64(x), s)) == expected


@settings(deadline=None)  # torch calls per example; the machine may be busy
@given(st.integers(-(2**32) + 1, 2**32 - 1), st.integers(0, 2**30 - 1), st.integers(-70, 70))
def test_scale_round(x, mult, t):
    p = x * mult
    if t >= 1:
        expected = round_half_up(Fraction(p, 2**t))
    else:
        expected = max(-LIMIT, min(LIMIT, p * 2**-t))
    assert int(scale_round(t64(x), mult, t)) == expected


@settings(deadline=None)  # torch calls per example; the machine may be busy
@given(st.integers(0, LIMIT - 1))
def test_normalize_shift_is_the_smallest_fitting_shift(m):
    sh = normalize_shift(m)
    assert round_half_up(Fraction(m, 2**sh)) <= 127
    assert sh == 0 or round_half_up(Fraction(m, 2 ** (sh - 1))) > 127


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=6),
    st.integers(-60, 60),
    st.lists(st.integers(-127, 127), min_size=6, max_size=6),
    st.integers(-60, 60),
)
def test_combining_two_contributions_stays_in_range_and_within_a_unit(s, e_s, prev, e_p):
    """A contribution |S| < 2^41 added to int8 mantissas: both shifted terms stay below 2^61
    and the rounding errors (one per right-shifted term) stay below half a unit of e_c."""
    values = torch.tensor(s)
    p = torch.tensor(prev[: len(s)])
    e_c = combine_exponent(e_s, 41, e_p)
    a, b = shift_exponent(values, e_s - e_c), shift_exponent(p, e_p - e_c)
    assert int(a.abs().max()) < 2**61 and int(b.abs().max()) < 2**61
    for ai, si, bi, pi in zip(a.tolist(), s, b.tolist(), p.tolist(), strict=True):
        exact = Fraction(si) * Fraction(2) ** e_s + Fraction(pi) * Fraction(2) ** e_p
        got = Fraction(ai + bi) * Fraction(2) ** e_c
        assert abs(got - exact) <= Fraction(2) ** e_c


@settings(deadline=None)  # torch calls per example; the machine may be busy
@given(st.floats(-(2.0**30), 2.0**30, width=32))
def test_round_half_up_f32_is_exact(v):
    assert int(round_half_up_f32(np.float32(v))) == round_half_up(Fraction(float(np.float32(v))))


def test_exp_f32_is_accurate_to_a_few_ulp():
    d = np.linspace(-80.0, 0.0, 200001, dtype=np.float32)
    got = exp_f32(d).astype(np.float64)
    exact = np.exp(d.astype(np.float64))
    assert np.max(np.abs(got - exact) / exact) < 4e-7
    assert exp_f32(np.float32([-80.5, -1000.0])).tolist() == [0.0, 0.0]
    assert float(exp_f32(np.float32(0.0))) == 1.0


@settings(deadline=None)  # torch calls per example; the machine may be busy
@given(st.floats(2.0**-96, 2.0**100, width=32))
def test_block_exponent_is_the_smallest_that_fits(m):
    e = block_exponent_f32(m)
    assert Fraction(m) <= 127 * Fraction(2) ** e
    assert Fraction(m) > 127 * Fraction(2) ** (e - 1)


def test_block_exponent_flushes_tiny_maxima():
    assert block_exponent_f32(0.0) == 0 and block_exponent_f32(2.0**-97) == 0


@settings(deadline=None)  # torch calls per example; the machine may be busy
@given(st.floats(1e-9, 1e9))
def test_frac_bits_put_the_largest_multiplier_in_q15(top):
    f = frac_bits_for(torch.tensor([top, top / 3]))
    assert 2**14 <= round(top * 2.0**f) <= 2**15
