/* Forward kernels: int8 convolution, add (and add with a ReLU), global average pooling. */
#include "tt_arith.h"
#include "tt_int8.h"

/* Pixels of the int32 sums a convolution keeps on the stack at a time (256 bytes). */
#define TT_TILE 64

/* The requantisation is inlined into each kernel on Linux targets (so that each of their
 * versions has its own); a Cortex-M keeps one copy, for its flash. */
#ifdef TT_CORTEX_M
#define TT_STORE
#else
#define TT_STORE TT_INLINE_ALWAYS
#endif

/* Requantise n int32 sums of output channel o into y[idx0 ..] and set their mask bits. On Linux
 * targets, where the rounding shift t is in 1 .. 62, without a branch per value (on a
 * Cortex-M, where t is in 32 .. 62, likewise in 32-bit arithmetic):
 * round(a m 2^-t) = floor((a m + 2^(t-1) + 2^62) / 2^t) - 2^(62-t), the numerator in
 * [0, 2^64) since |a m| <= 2^62, so an unsigned shift computes the floor without the
 * implementation-defined >> of a negative. The same values as tt_scale_round, bit for bit. */
TT_STORE
static void tt_conv_store(const tt_requant *q, int32_t o, const int32_t *acc, int32_t n,
                          int32_t idx0, int8_t *y, uint8_t *mask) {
    int32_t p;
#ifndef TT_CORTEX_M
    int32_t t = q->shift[o];
    if (t >= 1 && t <= 62) {
        int64_t mult = q->mult[o], lo = q->act_min, hi = q->act_max;
        uint64_t offset = ((uint64_t)1 << 62) + ((uint64_t)1 << (t - 1));
        int64_t back = q->y_zero - ((int64_t)1 << (62 - t));
        for (p = 0; p < n; p++) {
            int32_t idx = idx0 + p;
            int64_t v = back + (int64_t)(((uint64_t)(acc[p] * mult) + offset) >> t);
            if (mask) {
                mask[idx >> 3] = (uint8_t)(mask[idx >> 3] |
                                           (uint32_t)((v >= lo) & (v <= hi)) << (idx & 7));
            }
            y[idx] = (int8_t)(v < lo ? lo : (v > hi ? hi : v));
        }
        return;
    }
#else
    /* On a Cortex-M, where the shift is in 32 .. 62 (a multiplier below one: the common case),
     * the same floor in 32-bit arithmetic after one 32 x 32 -> 64-bit multiply-accumulate: the
     * numerator's high word, shifted by t - 32. */
    int32_t t = q->shift[o];
#ifdef TT_MULHI
    /* With a shift of 33 .. 62, round(a m 2^-t) = floor((floor(a m / 2^32) + 2^(sh-1)) / 2^sh)
     * for sh = t - 32 (floors nest), floor(a m / 2^32) being the top word of the product
     * (SMMUL, RISC-V's MULH: tt_mulhi), in [-2^30, 2^30); adding 2^30 (a multiple of 2^sh)
     * makes the numerator non-negative for an unsigned shift, taken back with the zero point.
     * tt_sat8 (SSAT with the DSP extension) clamps to int8 (the whole clamp where the
     * activation's range is int8's, as it is after a ReLU6 folded into the output scale); an
     * output is in range where the clamp leaves it as it is, and the mask takes its bits a byte
     * at a time. */
    if (t >= 33 && t <= 62) {
        int32_t sh = t - 32, lo = q->act_min, hi = q->act_max, mult = q->mult[o];
        uint32_t c = (1u << 30) + (1u << (sh - 1));
        int32_t back = q->y_zero - ((int32_t)1 << (30 - sh));
        int8_t *out = y + idx0;
        if (!mask && lo == -128 && hi == 127) { /* no activation: SSAT clamps */
            for (p = 0; p < n; p++) {
                out[p] = (int8_t)tt_sat8(back + (int32_t)(((uint32_t)tt_mulhi(acc[p], mult) + c) >> sh));
            }
        } else if (!mask) {
            for (p = 0; p < n; p++) {
                int32_t v = tt_sat8(back + (int32_t)(((uint32_t)tt_mulhi(acc[p], mult) + c) >> sh));
                v = v < lo ? lo : v;
                out[p] = (int8_t)(v > hi ? hi : v);
            }
        } else if (lo == -128 && hi == 127) { /* in range where SSAT leaves it as it is */
            int32_t idx = idx0, end = idx0 + n;
            while (idx < end) {
                int32_t stop = ((idx >> 3) + 1) << 3 < end ? ((idx >> 3) + 1) << 3 : end;
                uint32_t bits = 0, bit = 1u << (idx & 7);
                for (; idx < stop; idx++, bit <<= 1) {
                    int32_t v =
                        back + (int32_t)(((uint32_t)tt_mulhi(acc[idx - idx0], mult) + c) >> sh);
                    int32_t u = tt_sat8(v);
                    bits |= u == v ? bit : 0u;
                    y[idx] = (int8_t)u;
                }
                mask[(idx - 1) >> 3] = (uint8_t)(mask[(idx - 1) >> 3] | bits);
            }
        } else { /* in range when the clamp leaves it as it is; a byte of the mask at a time */
            int32_t idx = idx0, end = idx0 + n;
            while (idx < end) {
                int32_t stop = ((idx >> 3) + 1) << 3 < end ? ((idx >> 3) + 1) << 3 : end;
                uint32_t bits = 0;
                for (; idx < stop; idx++) {
                    int32_t v =
                        back + (int32_t)(((uint32_t)tt_mulhi(acc[idx - idx0], mult) + c) >> sh);
                    int32_t u = tt_sat8(v);
                    u = u < lo ? lo : u;
                    u = u > hi ? hi : u;
                    bits |= (uint32_t)(u == v) << (idx & 7);
                    y[idx] = (int8_t)u;
                }
                mask[(idx - 1) >> 3] = (uint8_t)(mask[(idx - 1) >> 3] | bits);
            }
        }
        return;
    }
#endif
    if (t >= 32 && t <= 62) {
        int32_t sh = t - 32, lo = q->act_min, hi = q->act_max;
        int64_t mult = q->mult[o];
        uint64_t offset = ((uint64_t)1 << 62) + ((uint64_t)1 << (t - 1));
        int32_t back = q->y_zero - ((int32_t)1 << (62 - t));
        for (p = 0; p < n; p++) {
            int32_t idx = idx0 + p;
            uint32_t top = (uint32_t)(((uint64_t)(acc[p] * mult) + offset) >> 32);
            int32_t v = back + (int32_t)(top >> sh);
            if (mask && v >= lo && v <= hi) {
                mask[idx >> 3] = (uint8_t)(mask[idx >> 3] | (1u << (idx & 7)));
            }
            y[idx] = (int8_t)(v < lo ? lo : (v > hi ? hi : v));
        }
        return;
    }
#endif
    for (p = 0; p < n; p++) {
        int32_t idx = idx0 + p;
        int64_t v = q->y_zero + tt_scale_round(acc[p], q->mult[o], q->shift[o]);
        if (mask && v >= q->act_min && v <= q->act_max) {
            mask[idx >> 3] = (uint8_t)(mask[idx >> 3] | (1u << (idx & 7)));
        }
        y[idx] = (int8_t)tt_clamp64(v, q->act_min, q->act_max);
    }
}


#ifdef TT_DSP
/* int32 words a 1x1 or dense convolution keeps on the stack (4 KiB): its inputs laid out in
 * pairs, and a row of weights. */
#define TT_PW_WORDS 1024

/* The 1x1 convolution on a core with the DSP extension, a tile of pixels at a time: the tile's
 * inputs less their zero point are laid out once as int16 pairs of channels (c, c + 2) and
 * (c + 1, c + 3) for each block of four channels and each pixel (channels past in_c are 0),
 * and each output channel's weights (its row read in place where it is whole and a multiple of
 * four, else copied into one zero-padded row after the tile) are widened four at a time into
 * the same pairs (SXTB16), so that each SMLAD adds two multiply-accumulates without repacking.
 * Returns 0 (nothing done) where a tile would hold fewer than four pixels. The integer sums
 * are those of the direct loop, bit for bit. */
TT_NOINLINE
static int32_t tt_conv_pointwise_dsp(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                                     const int32_t *bias, const tt_requant *q, int8_t *y,
                                     uint8_t *mask) {
    int32_t hw = g->out_h * g->out_w, cin = g->in_c, k = w->k, blocks = (cin + 3) / 4;
    /* the tile's pairs, then one padded row of weights (blocks words) */
    int32_t step = (TT_PW_WORDS - blocks) / (2 * blocks);
    int32_t xt[TT_PW_WORDS];
    int8_t *wrow;
    int32_t acc[TT_TILE];
    int32_t zz = (int32_t)(((uint32_t)q->x_zero & 0xFFFFu) | ((uint32_t)q->x_zero << 16));
    int32_t o, b, c, j, p, p0;
    if (step < 4) {
        return 0;
    }
    if (step > TT_TILE) {
        step = TT_TILE;
    }
    wrow = (int8_t *)(xt + 2 * blocks * step);
    for (j = cin; j < 4 * blocks; j++) {
        wrow[j] = 0;
    }
    for (p0 = 0; p0 < hw; p0 += step) {
        int32_t n = hw - p0 < step ? hw - p0 : step;
        for (b = 0; b < blocks; b++) {
            int32_t *out = xt + 2 * b * n;
            p = 0;
            if (4 * b + 3 < cin) { /* four pixels of four channels: widen, less x_zero, pair */
                const int8_t *x0 = x + 4 * b * hw + p0;
                for (; p + 4 <= n; p += 4, out += 8) {
                    int32_t v0 = tt_load4(x0 + p), v1 = tt_load4(x0 + hw + p);
                    int32_t v2 = tt_load4(x0 + 2 * hw + p), v3 = tt_load4(x0 + 3 * hw + p);
                    int32_t e0 = __ssub16(__sxtb16(v0), zz), o0 = __ssub16(tt_sxtb16_odd(v0), zz);
                    int32_t e1 = __ssub16(__sxtb16(v1), zz), o1 = __ssub16(tt_sxtb16_odd(v1), zz);
                    int32_t e2 = __ssub16(__sxtb16(v2), zz), o2 = __ssub16(tt_sxtb16_odd(v2), zz);
                    int32_t e3 = __ssub16(__sxtb16(v3), zz), o3 = __ssub16(tt_sxtb16_odd(v3), zz);
                    out[0] = tt_pkhbt(e0, e2); /* pixel 0: channels (0, 2), (1, 3) */
                    out[1] = tt_pkhbt(e1, e3);
                    out[2] = tt_pkhbt(o0, o2); /* pixel 1 */
                    out[3] = tt_pkhbt(o1, o3);
                    out[4] = tt_pkhtb(e2, e0); /* pixel 2 */
                    out[5] = tt_pkhtb(e3, e1);
                    out[6] = tt_pkhtb(o2, o0); /* pixel 3 */
                    out[7] = tt_pkhtb(o3, o1);
                }
                out -= 2 * p;
            }
            for (; p < n; p++) {
                int32_t v[4];
                for (j = 0; j < 4; j++) {
                    c = 4 * b + j;
                    v[j] = c < cin ? x[c * hw + p0 + p] - q->x_zero : 0;
                }
                out[2 * p] = (int32_t)(((uint32_t)v[0] & 0xFFFFu) | ((uint32_t)v[2] << 16));
                out[2 * p + 1] = (int32_t)(((uint32_t)v[1] & 0xFFFFu) | ((uint32_t)v[3] << 16));
            }
        }
        for (o = 0; o < g->out_c; o++) {
            const int8_t *wo = wrow;
            if ((cin & 3) == 0 && (k == 0 || k == cin)) { /* one whole row: no padding */
                wo = k == 0 ? w->frozen + o * cin : w->train + o * cin;
            } else {
                if (k > 0) {
                    memcpy(wrow, w->train + o * k, (size_t)k);
                }
                if (k < cin) {
                    memcpy(wrow + k, w->frozen + o * (cin - k), (size_t)(cin - k));
                }
            }
            for (p = 0; p + 4 <= n; p += 4) {
                int32_t a0 = bias[o], a1 = a0, a2 = a0, a3 = a0;
                const int32_t *xb = xt + 2 * p;
                for (b = 0; b < blocks; b++, xb += 2 * n) {
                    int32_t wv = tt_load4(wo + 4 * b);
                    int32_t w02 = __sxtb16(wv), w13 = tt_sxtb16_odd(wv);
                    a0 = __smlad(xb[0], w02, a0);
                    a0 = __smlad(xb[1], w13, a0);
                    a1 = __smlad(xb[2], w02, a1);
                    a1 = __smlad(xb[3], w13, a1);
                    a2 = __smlad(xb[4], w02, a2);
                    a2 = __smlad(xb[5], w13, a2);
                    a3 = __smlad(xb[6], w02, a3);
                    a3 = __smlad(xb[7], w13, a3);
                }
                acc[p] = a0;
                acc[p + 1] = a1;
                acc[p + 2] = a2;
                acc[p + 3] = a3;
            }
            for (; p < n; p++) {
                int32_t a = bias[o];
                const int32_t *xb = xt + 2 * p;
                for (b = 0; b < blocks; b++, xb += 2 * n) {
                    int32_t wv = tt_load4(wo + 4 * b);
                    a = __smlad(xb[0], __sxtb16(wv), a);
                    a = __smlad(xb[1], tt_sxtb16_odd(wv), a);
                }
                acc[p] = a;
            }
            tt_conv_store(q, o, acc, n, o * hw + p0, y, mask);
        }
    }
    return 1;
}
#endif

#ifdef TT_CORTEX_M
/* Four pixels' sums of x w over a run of n input channels: weights w[0 .. n), the pixels'
 * inputs at x, x + stride, ... (one channel after the other). With the DSP extension, four
 * channels at a time: channels 0 and 2 paired in the halves of one SMLAD operand, 1 and 3 in
 * another, against their weights paired the same way (16 multiply-accumulates in 8 SMLADs). */
static inline void tt_dot4(const int8_t *x, int32_t stride, const int8_t *w, int32_t n,
                           int32_t *s) {
    int32_t a0 = s[0], a1 = s[1], a2 = s[2], a3 = s[3], i = 0;
#ifdef TT_DSP
    for (; i + 4 <= n; i += 4, x += 4 * stride) {
        int32_t wv = tt_load4(w + i);
        int32_t w02 = __sxtb16(wv), w13 = tt_sxtb16_odd(wv); /* (w0, w2), (w1, w3) */
        int32_t xa = tt_load4(x), xb = tt_load4(x + 2 * stride); /* channels 0, 2 */
        int32_t ae = __sxtb16(xa), ao = tt_sxtb16_odd(xa);       /* pixels (0, 2), (1, 3) */
        int32_t be = __sxtb16(xb), bo = tt_sxtb16_odd(xb);
        a0 = __smlad(tt_pkhbt(ae, be), w02, a0);
        a1 = __smlad(tt_pkhbt(ao, bo), w02, a1);
        a2 = __smlad(tt_pkhtb(be, ae), w02, a2);
        a3 = __smlad(tt_pkhtb(bo, ao), w02, a3);
        xa = tt_load4(x + stride); /* channels 1, 3 */
        xb = tt_load4(x + 3 * stride);
        ae = __sxtb16(xa), ao = tt_sxtb16_odd(xa);
        be = __sxtb16(xb), bo = tt_sxtb16_odd(xb);
        a0 = __smlad(tt_pkhbt(ae, be), w13, a0);
        a1 = __smlad(tt_pkhbt(ao, bo), w13, a1);
        a2 = __smlad(tt_pkhtb(be, ae), w13, a2);
        a3 = __smlad(tt_pkhtb(bo, ao), w13, a3);
    }
#endif
    for (; i < n; i++, x += stride) {
        int32_t wv = w[i];
        a0 += x[0] * wv;
        a1 += x[1] * wv;
        a2 += x[2] * wv;
        a3 += x[3] * wv;
    }
    s[0] = a0;
    s[1] = a1;
    s[2] = a2;
    s[3] = a3;
}

#ifdef __riscv
/* tt_dot4 for two output channels at once, their weights at wa and wb, on a core with the
 * registers for eight sums (RISC-V has 32): each input value loaded once for two products. */
static inline void tt_dot4x2(const int8_t *x, int32_t stride, const int8_t *wa,
                             const int8_t *wb, int32_t n, int32_t *s, int32_t *t) {
    int32_t a0 = s[0], a1 = s[1], a2 = s[2], a3 = s[3];
    int32_t b0 = t[0], b1 = t[1], b2 = t[2], b3 = t[3], i;
    for (i = 0; i < n; i++, x += stride) {
        int32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3], va = wa[i], vb = wb[i];
        a0 += x0 * va;
        a1 += x1 * va;
        a2 += x2 * va;
        a3 += x3 * va;
        b0 += x0 * vb;
        b1 += x1 * vb;
        b2 += x2 * vb;
        b3 += x3 * vb;
    }
    s[0] = a0, s[1] = a1, s[2] = a2, s[3] = a3;
    t[0] = b0, t[1] = b1, t[2] = b2, t[3] = b3;
}

/* Output channels o and o + 1 of tt_conv_pointwise, a half tile of pixels each in acc. */
static void tt_conv_pointwise_pair(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                                   const int32_t *bias, const tt_requant *q, int8_t *y,
                                   uint8_t *mask, int32_t o, int32_t *acc) {
    int32_t hw = g->out_h * g->out_w, cin = g->in_c, k = w->k, half = TT_TILE / 2;
    const int8_t *wt = k > 0 ? w->train + o * k : NULL;
    const int8_t *wf = k < cin ? w->frozen + o * (cin - k) : NULL;
    const int8_t *wt1 = k > 0 ? wt + k : NULL, *wf1 = k < cin ? wf + (cin - k) : NULL;
    int32_t *bcc = acc + half;
    int32_t base = bias[o], base1 = bias[o + 1], p, p0, ci;
    for (ci = 0; ci < k; ci++) { /* less x_zero times each one's weights */
        base -= q->x_zero * wt[ci];
        base1 -= q->x_zero * wt1[ci];
    }
    for (ci = 0; ci < cin - k; ci++) {
        base -= q->x_zero * wf[ci];
        base1 -= q->x_zero * wf1[ci];
    }
    for (p0 = 0; p0 < hw; p0 += half) {
        int32_t n = hw - p0 < half ? hw - p0 : half;
        for (p = 0; p + 4 <= n; p += 4) {
            acc[p] = acc[p + 1] = acc[p + 2] = acc[p + 3] = base;
            bcc[p] = bcc[p + 1] = bcc[p + 2] = bcc[p + 3] = base1;
            tt_dot4x2(x + p0 + p, hw, wt, wt1, k, acc + p, bcc + p);
            tt_dot4x2(x + k * hw + p0 + p, hw, wf, wf1, cin - k, acc + p, bcc + p);
        }
        for (; p < n; p++) { /* the last pixels of a tile, one at a time */
            const int8_t *xc = x + p0 + p;
            int32_t a = base, b = base1;
            for (ci = 0; ci < k; ci++, xc += hw) {
                a += xc[0] * wt[ci];
                b += xc[0] * wt1[ci];
            }
            for (ci = 0; ci < cin - k; ci++, xc += hw) {
                a += xc[0] * wf[ci];
                b += xc[0] * wf1[ci];
            }
            acc[p] = a;
            bcc[p] = b;
        }
        tt_conv_store(q, o, acc, n, o * hw + p0, y, mask);
        tt_conv_store(q, o + 1, bcc, n, (o + 1) * hw + p0, y, mask);
    }
}
#endif

/* The same 1x1 convolution on a Cortex-M (no vector unit): four pixels' sums live in
 * registers while the input channels stream past (on RISC-V, of two output channels at a
 * time), and the input zero point comes out of the loop as sum (x - x_zero) w = sum x w -
 * x_zero sum w. The same integers as the direct loop, bit for bit (|sum x w| < 2^14 cin: no
 * overflow). */
static void tt_conv_pointwise(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                              const int32_t *bias, const tt_requant *q, int8_t *y,
                              uint8_t *mask) {
    int32_t hw = g->out_h * g->out_w;
    int32_t cin = g->in_c, k = w->k;
    int32_t acc[TT_TILE];
    int32_t o = 0, ci, p, p0;
#ifdef __riscv
    for (; o + 2 <= g->out_c; o += 2) {
        tt_conv_pointwise_pair(g, x, w, bias, q, y, mask, o, acc);
    }
#endif
    for (; o < g->out_c; o++) {
        const int8_t *wt = k > 0 ? w->train + o * k : NULL;
        const int8_t *wf = k < cin ? w->frozen + o * (cin - k) : NULL;
        int32_t base = bias[o], wsum = 0;
        for (ci = 0; ci < k; ci++) {
            wsum += wt[ci];
        }
        for (ci = 0; ci < cin - k; ci++) {
            wsum += wf[ci];
        }
        base -= q->x_zero * wsum;
        for (p0 = 0; p0 < hw; p0 += TT_TILE) {
            int32_t n = hw - p0 < TT_TILE ? hw - p0 : TT_TILE;
            for (p = 0; p + 4 <= n; p += 4) {
                acc[p] = acc[p + 1] = acc[p + 2] = acc[p + 3] = base;
                tt_dot4(x + p0 + p, hw, wt, k, acc + p);
                tt_dot4(x + k * hw + p0 + p, hw, wf, cin - k, acc + p);
            }
            for (; p < n; p++) { /* the last pixels of a tile, one at a time */
                const int8_t *xc = x + p0 + p;
                int32_t a = base;
                for (ci = 0; ci < k; ci++, xc += hw) {
                    a += xc[0] * wt[ci];
                }
                for (ci = 0; ci < cin - k; ci++, xc += hw) {
                    a += xc[0] * wf[ci];
                }
                acc[p] = a;
            }
            tt_conv_store(q, o, acc, n, o * hw + p0, y, mask);
        }
    }
}
#else
/* Bytes of input a pointwise convolution gathers pixel by pixel at a time (on the stack). */
#define TT_GATHER 4096
/* Below this many pixels a 1x1 convolution is computed as dot products over the channels. */
#define TT_FEW_PIXELS 16

/* Input channels a few-pixel 1x1 convolution pads its rows to (zeros past the last). */
#define TT_ROW_ALIGN 16

/* The sums of four int16 rows w[0..3] (each `row` long, a multiple of TT_ROW_ALIGN, one after
 * the other) with one int16 row x, added to acc[0..3]: one loop that the compiler turns into
 * pairwise multiply-adds (PMADDWD on x86, SMLAL on AArch64), each x value loaded once;
 * |x w| < 2^15. */
static inline void tt_dot4_s16(const int16_t *x, const int16_t *w, int32_t row, int32_t *acc) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, i;
    const int16_t *w1 = w + row, *w2 = w + 2 * row, *w3 = w + 3 * row;
    row &= ~(TT_ROW_ALIGN - 1);
    for (i = 0; i < row; i++) {
        s0 += x[i] * w[i];
        s1 += x[i] * w1[i];
        s2 += x[i] * w2[i];
        s3 += x[i] * w3[i];
    }
    acc[0] += s0;
    acc[1] += s1;
    acc[2] += s2;
    acc[3] += s3;
}

/* Output channel o's weight row (the trained, then the frozen part) as int16, zeros to `row`. */
static inline void tt_widen_row(const tt_weight *w, int32_t o, int32_t cin, int32_t row,
                                int16_t *out) {
    int32_t k = w->k, c;
    const int8_t *wt = k > 0 ? w->train + o * k : NULL;
    const int8_t *wf = k < cin ? w->frozen + o * (cin - k) : NULL;
    for (c = 0; c < k; c++) {
        out[c] = wt[c];
    }
    for (c = k; c < cin; c++) {
        out[c] = wf[c - k];
    }
    for (c = cin; c < row; c++) {
        out[c] = 0;
    }
}

/* A 1x1 convolution on few pixels (the late layers of a small input): the pixels' inputs less
 * the zero point are gathered channel-contiguous as int16 rows, and four output channels'
 * weight rows at a time are widened into rows of the same length (a last block repeats its
 * first channel), so that each output is one contiguous dot product over the padded channels,
 * four outputs sharing the loads of their input row. The same integers as the direct loop, bit
 * for bit (|sum (x - x_zero) w| < 2^15 cin: no overflow). */
TT_VECTOR_CLONES
static void tt_conv_pointwise_dots(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                                   const int32_t *bias, const tt_requant *q, int8_t *y,
                                   uint8_t *mask) {
    int32_t hw = g->out_h * g->out_w;
    int32_t cin = g->in_c, x_zero = q->x_zero;
    int32_t row = (cin + TT_ROW_ALIGN - 1) & ~(TT_ROW_ALIGN - 1);
    int32_t step = TT_GATHER / row < TT_TILE ? TT_GATHER / row : TT_TILE;
    int16_t xt[TT_GATHER], wr[4 * TT_GATHER];
    int32_t acc[4][TT_TILE];
    int32_t o, ci, p, p0, j;
    for (p0 = 0; p0 < hw; p0 += step) {
        int32_t n = hw - p0 < step ? hw - p0 : step;
        for (p = 0; p < n; p++) {
            for (ci = 0; ci < cin; ci++) {
                xt[p * row + ci] = (int16_t)(x[ci * hw + p0 + p] - x_zero);
            }
            for (; ci < row; ci++) {
                xt[p * row + ci] = 0;
            }
        }
        for (o = 0; o < g->out_c; o += 4) {
            int32_t m = g->out_c - o < 4 ? g->out_c - o : 4;
            for (j = 0; j < 4; j++) {
                tt_widen_row(w, j < m ? o + j : o, cin, row, wr + j * row);
            }
            for (p = 0; p < n; p++) {
                int32_t s[4] = {0, 0, 0, 0};
                tt_dot4_s16(xt + p * row, wr, row, s);
                for (j = 0; j < m; j++) {
                    acc[j][p] = bias[o + j] + s[j];
                }
            }
            for (j = 0; j < m; j++) {
                tt_conv_store(q, o + j, acc[j], n, (o + j) * hw + p0, y, mask);
            }
        }
    }
}

/* A 1x1 convolution, stride 1, no padding, one group: per output channel, the sums of a tile
 * of TT_TILE pixels are accumulated input channel by input channel over contiguous rows (a
 * loop the compiler vectorises). Integer sums do not depend on their order, so the result is
 * that of the direct loop below, bit for bit. */
TT_VECTOR_CLONES
static void tt_conv_pointwise(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                              const int32_t *bias, const tt_requant *q, int8_t *y,
                              uint8_t *mask) {
    int32_t hw = g->out_h * g->out_w;
    int32_t cin = g->in_c, k = w->k;
    int32_t x_zero = q->x_zero;
    int32_t acc[TT_TILE];
    int32_t o, ci, p, p0;
    if (hw < TT_FEW_PIXELS && cin <= TT_GATHER) {
        tt_conv_pointwise_dots(g, x, w, bias, q, y, mask);
        return;
    }
    for (o = 0; o < g->out_c; o++) {
        const int8_t *wt = k > 0 ? w->train + o * k : NULL;
        const int8_t *wf = k < cin ? w->frozen + o * (cin - k) : NULL;
        for (p0 = 0; p0 < hw; p0 += TT_TILE) {
            int32_t n = hw - p0 < TT_TILE ? hw - p0 : TT_TILE;
            for (p = 0; p < n; p++) {
                acc[p] = bias[o];
            }
            for (ci = 0; ci < cin; ci++) {
                int32_t wv = ci < k ? wt[ci] : wf[ci - k];
                const int8_t *xc = x + ci * hw + p0;
                if (wv == 0) {
                    continue;
                }
                for (p = 0; p < n; p++) { /* |product| <= 255 127 */
                    acc[p] += (int16_t)(((int32_t)xc[p] - x_zero) * wv);
                }
            }
            tt_conv_store(q, o, acc, n, o * hw + p0, y, mask);
        }
    }
}
#endif

/* Any other convolution whose output rows fit a TT_TILE buffer (depthwise, the stem, grouped
 * ones): per output channel and output row, each input channel's kernel taps add a strided
 * run of an input row, its bounds computed once instead of tested per pixel. Same sums as the
 * direct loop, bit for bit. */
TT_VECTOR_CLONES
static void tt_conv_rows(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                         const int32_t *bias, const tt_requant *q, int8_t *y, uint8_t *mask) {
    int32_t kk = g->kernel * g->kernel, s = g->stride, x_zero = q->x_zero;
    int32_t cg = g->in_c / g->groups, og = g->out_c / g->groups;
    int32_t depthwise = tt_is_depthwise(g);
    int32_t acc[TT_TILE];
    int32_t o, ci, oy, ox, ky, kx;
    for (o = 0; o < g->out_c; o++) {
        int32_t c0 = (o / og) * cg;
        for (oy = 0; oy < g->out_h; oy++) {
            for (ox = 0; ox < g->out_w; ox++) {
                acc[ox] = bias[o];
            }
            for (ci = 0; ci < cg; ci++) {
                const int8_t *wo;
                const int8_t *xc = x + (c0 + ci) * g->in_h * g->in_w;
                if (depthwise) {
                    wo = o < w->k ? w->train + o * kk : w->frozen + (o - w->k) * kk;
                } else {
                    wo = ci < w->k ? w->train + (o * w->k + ci) * kk
                                   : w->frozen + (o * (cg - w->k) + (ci - w->k)) * kk;
                }
                for (ky = 0; ky < g->kernel; ky++) {
                    int32_t iy = oy * s + ky - g->pad_top;
                    const int8_t *row;
                    if (iy < 0 || iy >= g->in_h) {
                        continue;
                    }
                    row = xc + iy * g->in_w;
                    for (kx = 0; kx < g->kernel; kx++) {
                        int32_t wv = wo[ky * g->kernel + kx];
                        int32_t off = kx - g->pad_left; /* ix = ox * s + off */
                        int32_t lo, hi;
                        if (wv == 0) {
                            continue;
                        }
                        tt_tap_range(g, off, &lo, &hi);
                        for (ox = lo; ox <= hi; ox++) {
                            acc[ox] += ((int32_t)row[ox * s + off] - x_zero) * wv;
                        }
                    }
                }
            }
            tt_conv_store(q, o, acc, g->out_w, (o * g->out_h + oy) * g->out_w, y, mask);
        }
    }
}

#ifndef TT_CORTEX_M
/* int16 values of the padded input planes a convolution keeps on the stack (64 KiB), and int32
 * sums of one output channel (32 KiB); and the smaller buffers (16 KiB each) of the path an
 * in-place depthwise convolution takes below its own buffer (tt_inplace_whole). */
#define TT_PLANE_VALUES 32768
#define TT_PLANE_SUMS 8192
#define TT_SMALL_PLANE_VALUES 8192
#define TT_SMALL_PLANE_SUMS 4096

/* The padded planes of one group's input channels, split by stride phase: row r, column j of
 * phase (fy, fx) of channel ci holds x - x_zero at input row r stride + fy - pad_top, column
 * j stride + fx - pad_left, and 0 in the padding. Kernel tap (ky, kx) of output (oy, ox) then reads
 * row oy + ky / stride, column ox + kx / stride of phase (ky % stride, kx % stride): with sums
 * kept qw to a row, every tap of a channel is one contiguous run over the whole output. Sizes:
 * *rh rows, *qw columns; returns the values of all planes, or 0 when they (with the last run's
 * overreach of up to a kernel width) or the sums do not fit their buffers. */
static int32_t tt_plane_size(const tt_conv_geom *g, int32_t values, int32_t sums, int32_t *rh,
                             int32_t *qw) {
    int32_t s = g->stride, n;
    *rh = g->out_h + (g->kernel - 1) / s; /* the rows and columns the taps reach */
    *qw = g->out_w + (g->kernel - 1) / s;
    n = (g->in_c / g->groups) * s * s * *rh * *qw;
    return g->out_h * *qw <= sums && n + g->kernel <= values ? n : 0;
}

/* A convolution over zero-padded planes of x - x_zero (host and Linux boards): no bounds in
 * the inner loop, one run per kernel tap over all output rows, which the compiler vectorises.
 * The padding adds 0, and the columns past out_w (whose sums read the next row) are not stored;
 * so the stored sums are those of the direct loop, bit for bit. */
static TT_INLINE_ALWAYS void tt_conv_planes_in(const tt_conv_geom *g, const int8_t *x,
                                                const tt_weight *w, const int32_t *bias,
                                                const tt_requant *q, int8_t *y, uint8_t *mask,
                                                int16_t *planes, int32_t values, int32_t *acc,
                                                int32_t sums) {
    int32_t s = g->stride, pad_top = g->pad_top, pad_left = g->pad_left;
    int32_t cg = g->in_c / g->groups, og = g->out_c / g->groups;
    int32_t rh, qw, n = tt_plane_size(g, values, sums, &rh, &qw);
    int32_t m = g->out_h * qw; /* sums of one output channel, qw to a row */
    int32_t grp, o, ci, fy, fx, r, j, i, oy, ky, kx;
    for (grp = 0; grp < g->groups; grp++) {
        for (j = 0; j < n + g->kernel; j++) { /* the last run reads past the last plane */
            planes[j] = 0;
        }
        for (ci = 0; ci < cg; ci++) {
            const int8_t *xc = x + (grp * cg + ci) * g->in_h * g->in_w;
            for (fy = 0; fy < s; fy++) {
                for (fx = 0; fx < s; fx++) {
                    int16_t *plane = planes + ((ci * s + fy) * s + fx) * rh * qw;
                    /* the columns j whose input column ix = j s + fx - pad_left is inside */
                    int32_t off = fx - pad_left;
                    int32_t j0 = off >= 0 ? 0 : (-off + s - 1) / s;
                    int32_t j1 = (g->in_w - 1 - off) / s + 1;
                    j1 = g->in_w - 1 - off < 0 ? 0 : (j1 < qw ? j1 : qw);
                    for (r = 0; r < rh; r++) {
                        int32_t iy = r * s + fy - pad_top;
                        if (iy < 0 || iy >= g->in_h) {
                            continue;
                        }
                        for (j = j0; j < j1; j++) { /* ix = j s + off, inside the row */
                            int32_t v = xc[iy * g->in_w + j * s + off];
                            plane[r * qw + j] = (int16_t)(v - q->x_zero);
                        }
                    }
                }
            }
        }
        for (o = grp * og; o < (grp + 1) * og; o++) {
            for (i = 0; i < m; i++) {
                acc[i] = bias[o];
            }
            for (ci = 0; ci < cg; ci++) {
                const int8_t *wo = tt_kernel_taps(g, w, o, ci);
                for (ky = 0; ky < g->kernel; ky++) {
                    for (kx = 0; kx < g->kernel; kx++) {
                        int32_t wv = wo[ky * g->kernel + kx];
                        const int16_t *run =
                            planes + ((ci * s + ky % s) * s + kx % s) * rh * qw +
                            (ky / s) * qw + kx / s;
                        if (wv == 0) {
                            continue;
                        }
                        for (i = 0; i < m; i++) { /* |product| <= 255 127 */
                            acc[i] += (int16_t)(run[i] * wv);
                        }
                    }
                }
            }
            for (oy = 0; oy < g->out_h; oy++) {
                tt_conv_store(q, o, acc + oy * qw, g->out_w, (o * g->out_h + oy) * g->out_w, y,
                              mask);
            }
        }
    }
}

TT_VECTOR_CLONES
static void tt_conv_planes(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                           const int32_t *bias, const tt_requant *q, int8_t *y,
                           uint8_t *mask) {
    int16_t planes[TT_PLANE_VALUES];
    int32_t acc[TT_PLANE_SUMS];
    tt_conv_planes_in(g, x, w, bias, q, y, mask, planes, TT_PLANE_VALUES, acc, TT_PLANE_SUMS);
}

/* tt_conv_planes with the smaller buffers, for planes and sums that fit them. */
TT_VECTOR_CLONES
static void tt_conv_planes_small(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                                 const int32_t *bias, const tt_requant *q, int8_t *y,
                                 uint8_t *mask) {
    int16_t planes[TT_SMALL_PLANE_VALUES];
    int32_t acc[TT_SMALL_PLANE_SUMS];
    tt_conv_planes_in(g, x, w, bias, q, y, mask, planes, TT_SMALL_PLANE_VALUES, acc,
                      TT_SMALL_PLANE_SUMS);
}

/* A depthwise convolution on few output pixels (the late layers of a small input): the
 * channels are the contiguous axis (inputs x - x_zero and sums pixel by pixel), so each kernel
 * tap adds, at each output pixel it reaches, one run over all channels that the compiler
 * vectorises, instead of a few-element loop per channel. Same sums, bit for bit. */
TT_VECTOR_CLONES
static void tt_conv_depthwise_few(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                                  const int32_t *bias, const tt_requant *q, int8_t *y,
                                  uint8_t *mask) {
    int32_t ch = g->in_c, kk = g->kernel * g->kernel;
    int32_t n_in = g->in_h * g->in_w, n_out = g->out_h * g->out_w;
    int16_t xt[TT_FEW_VALUES]; /* [input pixel][channel] */
    int32_t acc[TT_FEW_VALUES]; /* [output pixel][channel] */
    int16_t wcol[TT_FEW_VALUES];
    int32_t part[TT_TILE];
    int32_t c, i, p, oy, ox, ky, kx;
    for (c = 0; c < ch; c++) {
        for (i = 0; i < n_in; i++) {
            xt[i * ch + c] = (int16_t)(x[c * n_in + i] - q->x_zero);
        }
    }
    for (p = 0; p < n_out; p++) {
        for (c = 0; c < ch; c++) {
            acc[p * ch + c] = bias[c];
        }
    }
    for (ky = 0; ky < g->kernel; ky++) {
        for (kx = 0; kx < g->kernel; kx++) {
            tt_tap_column(w, ch, kk, ky * g->kernel + kx, wcol);
            for (oy = 0; oy < g->out_h; oy++) {
                int32_t iy = oy * g->stride + ky - g->pad_top;
                if (iy < 0 || iy >= g->in_h) {
                    continue;
                }
                for (ox = 0; ox < g->out_w; ox++) {
                    int32_t ix = ox * g->stride + kx - g->pad_left;
                    int32_t *a = acc + (oy * g->out_w + ox) * ch;
                    const int16_t *xr = xt + (iy * g->in_w + ix) * ch;
                    if (ix < 0 || ix >= g->in_w) {
                        continue;
                    }
                    for (c = 0; c < ch; c++) { /* |product| <= 255 127 */
                        a[c] += (int16_t)(xr[c] * wcol[c]);
                    }
                }
            }
        }
    }
    for (c = 0; c < ch; c++) {
        for (p = 0; p < n_out; p++) {
            part[p] = acc[p * ch + c];
        }
        tt_conv_store(q, c, part, n_out, c * n_out, y, mask);
    }
}
#endif

#ifdef TT_DSP
/* Taps of a depthwise convolution's output pixels (out_h out_w k k) up to which the DSP path
 * lists them once for all channels. */
#define TT_DW_TAPS 256

/* The taps of a depthwise convolution on a small map, listed once for all channels, output
 * pixel by output pixel: entry[] the input pixel and the tap (a halfword each), count[] the
 * entries of each output pixel. Returns 0 when the list does not fit. */
static int32_t tt_depthwise_taps(const tt_conv_geom *g, uint16_t *entry, uint8_t *count) {
    int32_t n = 0, oy, ox, ky, kx;
    if (g->out_h * g->out_w * g->kernel * g->kernel > TT_DW_TAPS ||
        g->out_h * g->out_w > TT_TILE || g->in_h * g->in_w > 256 || g->kernel > 15) {
        return 0;
    }
    for (oy = 0; oy < g->out_h; oy++) {
        for (ox = 0; ox < g->out_w; ox++) {
            int32_t first = n;
            for (ky = 0; ky < g->kernel; ky++) {
                int32_t iy = oy * g->stride + ky - g->pad_top;
                for (kx = 0; kx < g->kernel; kx++) {
                    int32_t ix = ox * g->stride + kx - g->pad_left;
                    if (iy >= 0 && iy < g->in_h && ix >= 0 && ix < g->in_w) {
                        entry[n++] = (uint16_t)((iy * g->in_w + ix) | (ky * g->kernel + kx) << 8);
                    }
                }
            }
            count[oy * g->out_w + ox] = (uint8_t)(n - first);
        }
    }
    return 1;
}

/* Channel c of a depthwise convolution from its listed taps (one multiply-accumulate per
 * entry, no plane to lay out, no weights to pair), requantised into y from y_idx0. The same
 * integer sums as the direct loop, bit for bit. */
TT_NOINLINE
static void tt_depthwise_taps_channel(const tt_conv_geom *g, const int8_t *xc,
                                      const tt_weight *w, const int32_t *bias,
                                      const tt_requant *q, int32_t c, const uint16_t *entry,
                                      const uint8_t *count, int8_t *y, int32_t y_idx0,
                                      uint8_t *mask) {
    int32_t kk = g->kernel * g->kernel, n_out = g->out_h * g->out_w;
    const int8_t *wc = c < w->k ? w->train + c * kk : w->frozen + (c - w->k) * kk;
    int32_t acc[TT_TILE];
    int32_t j, e;
    for (j = 0; j < n_out; j++) {
        int32_t a = bias[c];
        for (e = 0; e < count[j]; e++, entry++) {
            a += (xc[*entry & 0xFFu] - q->x_zero) * wc[*entry >> 8];
        }
        acc[j] = a;
    }
    tt_conv_store(q, c, acc, n_out, y_idx0, y, mask);
}

/* A depthwise convolution from its taps listed once: every channel into y. Returns 0 (nothing
 * done) when the list does not fit. */
TT_NOINLINE
static int32_t tt_conv_depthwise_taps(const tt_conv_geom *g, const int8_t *x,
                                      const tt_weight *w, const int32_t *bias,
                                      const tt_requant *q, int8_t *y,
                                      uint8_t *mask) {
    uint16_t entry[TT_DW_TAPS];
    uint8_t count[TT_TILE];
    int32_t n_out = g->out_h * g->out_w, c;
    if (!tt_depthwise_taps(g, entry, count)) {
        return 0;
    }
    for (c = 0; c < g->out_c; c++) {
        tt_depthwise_taps_channel(g, x + c * g->in_h * g->in_w, w, bias, q, c, entry, count, y,
                                  c * n_out, mask);
    }
    return 1;
}

/* The same in place (as tt_conv2d_inplace_s8): each channel into channel, then over its input's
 * place. Returns 0 (nothing done) when the list does not fit. */
TT_NOINLINE
static int32_t tt_conv_inplace_taps(const tt_conv_geom *g, int8_t *xy,
                                    const tt_weight *w, const int32_t *bias,
                                    const tt_requant *q, int8_t *channel,
                                    uint8_t *mask) {
    uint16_t entry[TT_DW_TAPS];
    uint8_t count[TT_TILE];
    int32_t n_in = g->in_h * g->in_w, n_out = g->out_h * g->out_w, c, i;
    if (!tt_depthwise_taps(g, entry, count)) {
        return 0;
    }
    for (c = 0; c < g->out_c; c++) {
        uint8_t *mc = mask ? mask + c * n_out / 8 : NULL;
        for (i = 0; mc && i < (n_out + 7) / 8; i++) {
            mc[i] = 0;
        }
        tt_depthwise_taps_channel(g, xy + c * n_in, w, bias, q, c, entry, count, channel, 0, mc);
        for (i = 0; i < n_out; i++) { /* over input channels 0 .. c, all read by now */
            xy[c * n_out + i] = channel[i];
        }
    }
    return 1;
}
#endif

#ifdef TT_DSP
/* n bytes from src to dst, a word at a time while four remain (short rows: no call to
 * memcpy, whose overhead a row of a few bytes would not repay; the function it is inlined in
 * keeps the compiler from turning the loop into one, TT_NO_LIBCALL_LOOPS). */
static inline void tt_copy_s8(int8_t *dst, const int8_t *src, int32_t n) {
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        int32_t v = tt_load4(src + i);
        memcpy(dst + i, &v, 4);
    }
    for (; i < n; i++) {
        dst[i] = src[i];
    }
}

/* Bytes of the padded int8 input plane the 3x3 depthwise kernel keeps on the stack (2 KiB),
 * and the output pixels up to which the listed taps (tt_conv_depthwise_taps) are faster: a
 * map of 3 x 3 or fewer has more rows' overheads than taps to add. */
#define TT_DW3_PLANE 2048
#define TT_DW3_FEWEST 9

/* The plane of tt_conv_dw3: (out_h - 1) s + 3 rows of (out_w - 1) s + 4 bytes (a column to
 * spare for the last word's fourth byte). Returns its bytes, 0 where it does not fit or the
 * convolution is not a square 3x3 depthwise one of stride 1 or 2. */
static int32_t tt_dw3_plane(const tt_conv_geom *g, int32_t *pw) {
    int32_t s = g->stride, ph = (g->out_h - 1) * s + 3;
    *pw = (g->out_w - 1) * s + 4;
    if (!tt_is_depthwise(g) || !tt_is_square(g) || g->kernel != 3 || s > 2 ||
        g->out_w > TT_TILE || ph * *pw > TT_DW3_PLANE) {
        return 0;
    }
    return ph * *pw;
}

/* One output row of tt_conv_dw3 into acc: the plane's rows at top, pw apart; wp[r] = (w[r][0],
 * w[r][2]) and w1 = (w[0][1], w[1][1]), w2 = (w[2][1], 0); a0 the bias less x_zero times the
 * weights' sum. A word of four inputs x0 .. x3 of a row, widened into e = (x0, x2) and
 * f = (x1, x3), gives x0 w0 + x2 w2 in one SMLAD and x1 w1 in one SMLABB (or SMLABT: the
 * weight's other half) and, at stride 1, the next output's x1 w0 + x3 w2 and x2 w1 in two
 * more. The weights stay in registers across the row. */
static inline void tt_dw3_row(const int8_t *in, int32_t pw, int32_t s, int32_t out_w,
                              const int32_t *w, int32_t a0, int32_t *acc) {
    int32_t wp0 = w[0], wp1 = w[1], wp2 = w[2], w1 = w[3], w2 = w[4], ox = 0;
    if (s == 1) {
        for (; ox + 2 <= out_w; ox += 2, in += 2) {
            int32_t b0 = a0, b1 = a0, v, e, f;
            v = tt_load4(in), e = __sxtb16(v), f = tt_sxtb16_odd(v);
            b0 = __smlabb(f, w1, __smlad(e, wp0, b0));
            b1 = __smlatb(e, w1, __smlad(f, wp0, b1));
            v = tt_load4(in + pw), e = __sxtb16(v), f = tt_sxtb16_odd(v);
            b0 = __smlabt(f, w1, __smlad(e, wp1, b0));
            b1 = __smlatt(e, w1, __smlad(f, wp1, b1));
            v = tt_load4(in + 2 * pw), e = __sxtb16(v), f = tt_sxtb16_odd(v);
            acc[ox] = __smlabb(f, w2, __smlad(e, wp2, b0));
            acc[ox + 1] = __smlatb(e, w2, __smlad(f, wp2, b1));
        }
    }
    for (; ox < out_w; ox++, in += s) {
        int32_t b0, v = tt_load4(in);
        b0 = __smlabb(tt_sxtb16_odd(v), w1, __smlad(__sxtb16(v), wp0, a0));
        v = tt_load4(in + pw);
        b0 = __smlabt(tt_sxtb16_odd(v), w1, __smlad(__sxtb16(v), wp1, b0));
        v = tt_load4(in + 2 * pw);
        acc[ox] = __smlabb(tt_sxtb16_odd(v), w2, __smlad(__sxtb16(v), wp2, b0));
    }
}

/* A 3x3 depthwise convolution of stride 1 or 2 on a core with the DSP extension, directly on
 * int8 values: each channel's input is copied into a plane whose padding holds the input's
 * zero point, so that every tap adds w (x - x_zero) = w x - w x_zero whether it falls in the
 * input or in the padding, and the bias takes the x_zero (sum of w) once. A band of whole
 * output rows (at most TT_TILE sums) is requantised at a time. In place (tt_conv2d_inplace_s8:
 * x is y), channel c is written over the input's first channels once its plane holds it, and
 * its mask bits start at mask + c out_h out_w / 8, as the other in-place paths put them.
 * Returns 0 (nothing done) where tt_dw3_plane does not take the convolution. The same integer
 * sums as the direct loop, bit for bit. */
TT_NOINLINE TT_NO_LIBCALL_LOOPS
static int32_t tt_conv_dw3(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                           const int32_t *bias, const tt_requant *q, int8_t *y, uint8_t *mask,
                           int32_t inplace) {
    int8_t plane[TT_DW3_PLANE];
    int32_t acc[TT_TILE];
    int32_t wr[5]; /* tt_dw3_row's weights */
    int32_t pw, bytes = tt_dw3_plane(g, &pw), s = g->stride;
    int32_t n_in = g->in_h * g->in_w, n_out = g->out_h * g->out_w;
    int32_t rows = TT_TILE / g->out_w, cols, c, r, i, oy, oy1;
    if (bytes == 0) {
        return 0;
    }
    memset(plane, q->x_zero, (size_t)bytes);
    cols = g->in_w < pw - g->pad_left ? g->in_w : pw - g->pad_left;
    for (c = 0; c < g->out_c; c++) {
        const int8_t *xc = x + c * n_in;
        const int8_t *wc = c < w->k ? w->train + c * 9 : w->frozen + (c - w->k) * 9;
        int8_t *yc = inplace ? y + c * n_out : y;
        uint8_t *mc = inplace && mask ? mask + c * n_out / 8 : mask;
        int32_t idx0 = inplace ? 0 : c * n_out, a0 = bias[c];
        for (r = 0; r < bytes / pw; r++) {
            int32_t iy = r - g->pad_top;
            if (iy >= 0 && iy < g->in_h) {
                tt_copy_s8(plane + r * pw + g->pad_left, xc + iy * g->in_w, cols);
            }
        }
        for (r = 0; r < 3; r++) {
            wr[r] = (int32_t)(((uint32_t)wc[3 * r] & 0xFFFFu) | ((uint32_t)wc[3 * r + 2] << 16));
            a0 -= q->x_zero * (wc[3 * r] + wc[3 * r + 1] + wc[3 * r + 2]);
        }
        wr[3] = (int32_t)(((uint32_t)wc[1] & 0xFFFFu) | ((uint32_t)wc[4] << 16));
        wr[4] = wc[7] & 0xFFFF;
        for (i = 0; inplace && mc && i < (n_out + 7) / 8; i++) {
            mc[i] = 0;
        }
        for (oy = 0; oy < g->out_h; oy = oy1) {
            oy1 = oy + rows < g->out_h ? oy + rows : g->out_h;
            for (i = oy; i < oy1; i++) {
                tt_dw3_row(plane + i * s * pw, pw, s, g->out_w, wr, a0, acc + (i - oy) * g->out_w);
            }
            tt_conv_store(q, c, acc, (oy1 - oy) * g->out_w, idx0 + oy * g->out_w, yc, mc);
        }
    }
    return 1;
}
#endif

#ifdef TT_DSP
/* int16 values of the padded input plane the channel-wise kernel keeps on the stack (2 KiB),
 * and the widest kernel it takes. */
#define TT_DW_PLANE 1024
#define TT_DW_KERNEL 7

/* Whether a convolution computes each output channel from its own input channel alone (a
 * depthwise one, or one channel of it), with a plane and kernel tt_conv_channelwise holds. */
static int32_t tt_channelwise_fits(const tt_conv_geom *g) {
    int32_t qw = (g->out_w - 1) * g->stride + g->kernel + 1;
    return g->in_c == g->groups && g->out_c == g->groups && g->kernel <= TT_DW_KERNEL &&
           g->out_w <= TT_TILE && g->kernel * qw <= TT_DW_PLANE;
}

/* A channel-wise convolution with the DSP extension: each channel's input, less its zero
 * point, is laid out as int16 in a zero-padded plane, a band of output rows at a time, so that
 * two neighbouring taps of a kernel row are one word, paired with their two weights in one
 * SMLAD (an odd last tap paired with a zero weight: the plane has a column to spare). No
 * bounds in the inner loop; the same integer sums as the direct loop, bit for bit. */
TT_NOINLINE
static void tt_conv_channelwise(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                                const int32_t *bias, const tt_requant *q, int8_t *y,
                                uint8_t *mask) {
    int32_t k = g->kernel, s = g->stride, kk = k * k, pairs = (k + 1) / 2;
    int32_t qw = (g->out_w - 1) * s + k + 1;
    int32_t band = (TT_DW_PLANE / qw - k) / s + 1; /* output rows whose plane rows fit */
    int16_t plane[TT_DW_PLANE];
    int32_t wp[TT_DW_KERNEL * ((TT_DW_KERNEL + 1) / 2)]; /* [ky][pair]: (w[kx], w[kx + 1]) */
    int32_t sums[TT_TILE];
    int32_t whole = g->out_h * g->out_w <= TT_TILE;
    /* the plane's columns that hold input: j0 .. j1 - 1 */
    int32_t j0 = g->pad_left > 0 ? g->pad_left : 0;
    int32_t j1 = g->pad_left + g->in_w < qw ? g->pad_left + g->in_w : qw;
    /* one band for all rows: the padding is the same for every channel, zeroed once */
    int32_t single = band >= g->out_h;
    int32_t c, r, j, oy, oy0, oy1, ox, ky, t;
    if (single) {
        for (j = 0; j < ((g->out_h - 1) * s + k) * qw; j++) {
            plane[j] = 0;
        }
    }
    for (c = 0; c < g->out_c; c++) {
        const int8_t *xc = x + c * g->in_h * g->in_w;
        const int8_t *wc = c < w->k ? w->train + c * kk : w->frozen + (c - w->k) * kk;
        for (ky = 0; ky < k; ky++) {
            for (t = 0; t < pairs; t++) {
                int32_t lo = wc[ky * k + 2 * t], hi = 2 * t + 1 < k ? wc[ky * k + 2 * t + 1] : 0;
                wp[ky * pairs + t] = (int32_t)(((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16));
            }
        }
        for (oy0 = 0; oy0 < g->out_h; oy0 = oy1) {
            oy1 = oy0 + band < g->out_h ? oy0 + band : g->out_h;
            for (r = 0; r < (oy1 - oy0 - 1) * s + k; r++) {
                int32_t iy = oy0 * s + r - g->pad_top;
                int16_t *out = plane + r * qw;
                if (iy < 0 || iy >= g->in_h) {
                    for (j = 0; j < qw && !single; j++) {
                        out[j] = 0;
                    }
                    continue;
                }
                for (j = 0; j < j0 && !single; j++) {
                    out[j] = 0;
                }
                for (j = j0; j < j1; j++) {
                    out[j] = (int16_t)(xc[iy * g->in_w + j - g->pad_left] - q->x_zero);
                }
                for (; j < qw && !single; j++) {
                    out[j] = 0;
                }
            }
            for (oy = oy0; oy < oy1; oy++) {
                const int16_t *top = plane + (oy - oy0) * s * qw;
                /* a channel of at most TT_TILE outputs is stored at once, else row by row */
                int32_t *acc = whole ? sums + oy * g->out_w : sums;
                for (ox = 0; ox < g->out_w && k == 3; ox++) { /* the common 3x3, unrolled */
                    const int16_t *p0 = top + ox * s;
                    int32_t a = bias[c], v;
                    memcpy(&v, p0, 4), a = __smlad(v, wp[0], a);
                    memcpy(&v, p0 + 2, 4), a = __smlad(v, wp[1], a);
                    memcpy(&v, p0 + qw, 4), a = __smlad(v, wp[2], a);
                    memcpy(&v, p0 + qw + 2, 4), a = __smlad(v, wp[3], a);
                    memcpy(&v, p0 + 2 * qw, 4), a = __smlad(v, wp[4], a);
                    memcpy(&v, p0 + 2 * qw + 2, 4), a = __smlad(v, wp[5], a);
                    acc[ox] = a;
                }
                for (ox = 0; ox < g->out_w && k != 3; ox++) {
                    int32_t a = bias[c];
                    for (ky = 0; ky < k; ky++) {
                        const int16_t *row = top + ky * qw + ox * s;
                        const int32_t *wr = wp + ky * pairs;
                        for (t = 0; t < pairs; t++) {
                            int32_t v;
                            memcpy(&v, row + 2 * t, 4);
                            a = __smlad(v, wr[t], a);
                        }
                    }
                    acc[ox] = a;
                }
                if (!whole) {
                    tt_conv_store(q, c, acc, g->out_w, (c * g->out_h + oy) * g->out_w, y, mask);
                }
            }
        }
        if (whole) {
            tt_conv_store(q, c, sums, g->out_h * g->out_w, c * g->out_h * g->out_w, y, mask);
        }
    }
}
#endif


#ifdef TT_DSP
/* Taps (input channels x kernel x kernel) of the widest dense convolution whose columns the
 * DSP path lays out (3 x 5 x 5 is 75). */
#define TT_COL_TAPS 80

/* A dense convolution (one group: the stem) with few taps on a core with the DSP extension:
 * for a tile of whole output rows, each pixel's taps less the input's zero point (0 where they
 * fall in the padding) are laid out once as int16 pairs (an odd last tap paired with 0), a tap
 * at a time over the tile's rows, and each output channel's taps are paired alike, so that one
 * SMLAD adds two multiply-accumulates; four pixels' sums stay in registers. Returns 0 (nothing
 * done) for more than TT_COL_TAPS taps or a row wider than a tile. The integer sums are those
 * of the direct loop, bit for bit. */
TT_NOINLINE
static int32_t tt_conv_columns_dsp(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                                   const int32_t *bias, const tt_requant *q, int8_t *y,
                                   uint8_t *mask) {
    int32_t k = g->kernel, kk = k * k, taps = g->in_c * kk, words = (taps + 1) / 2;
    int32_t hw = g->out_h * g->out_w, s = g->stride;
    int32_t rows = (TT_PW_WORDS / words < TT_TILE ? TT_PW_WORDS / words : TT_TILE) / g->out_w;
    int16_t col[2 * TT_PW_WORDS]; /* [tap pair][pixel][tap 2 i, tap 2 i + 1] */
    int32_t wp[TT_COL_TAPS / 2];
    int32_t acc[TT_TILE];
    int32_t o, ci, ky, kx, t, i, p, p0, oy, oy0, ox;
    if (taps > TT_COL_TAPS || rows < 1) {
        return 0;
    }
    for (oy0 = 0; oy0 < g->out_h; oy0 += rows) {
        int32_t n = (g->out_h - oy0 < rows ? g->out_h - oy0 : rows) * g->out_w;
        p0 = oy0 * g->out_w;
        if (taps & 1) {
            for (p = 0; p < n; p++) {
                col[2 * ((words - 1) * n + p) + 1] = 0;
            }
        }
        for (t = 0, ci = 0; ci < g->in_c; ci++) {
            const int8_t *xc = x + ci * g->in_h * g->in_w;
            for (ky = 0; ky < k; ky++) {
                for (kx = 0; kx < k; kx++, t++) {
                    /* tap t of every pixel of the tile, pixel by pixel two halves apart */
                    int16_t *dst = col + 2 * (t >> 1) * n + (t & 1);
                    int32_t off = kx - g->pad_left, lo, hi;
                    tt_tap_range(g, off, &lo, &hi);
                    for (oy = oy0; oy < oy0 + n / g->out_w; oy++, dst += 2 * g->out_w) {
                        int32_t iy = oy * s + ky - g->pad_top;
                        const int8_t *row;
                        if (iy < 0 || iy >= g->in_h) {
                            for (ox = 0; ox < g->out_w; ox++) {
                                dst[2 * ox] = 0;
                            }
                            continue;
                        }
                        row = xc + iy * g->in_w;
                        for (ox = 0; ox < lo; ox++) {
                            dst[2 * ox] = 0;
                        }
                        for (; ox <= hi; ox++) {
                            dst[2 * ox] = (int16_t)(row[ox * s + off] - q->x_zero);
                        }
                        for (; ox < g->out_w; ox++) {
                            dst[2 * ox] = 0;
                        }
                    }
                }
            }
        }
        for (o = 0; o < g->out_c; o++) {
            int16_t *wh = (int16_t *)(void *)wp; /* tap pairs, written through memcpy */
            wp[words - 1] = 0;                   /* an odd last tap's partner */
            for (t = 0, ci = 0; ci < g->in_c; ci++) {
                const int8_t *wo = tt_kernel_taps(g, w, o, ci);
                for (i = 0; i < kk; i++, t++) {
                    int16_t v = wo[i];
                    memcpy(wh + t, &v, sizeof v);
                }
            }
            for (p = 0; p + 4 <= n; p += 4) {
                int32_t a0 = bias[o], a1 = a0, a2 = a0, a3 = a0;
                const int16_t *c = col + 2 * p;
                for (i = 0; i < words; i++, c += 2 * n) {
                    int32_t wi = wp[i];
                    a0 = __smlad(tt_load_pair(c), wi, a0);
                    a1 = __smlad(tt_load_pair(c + 2), wi, a1);
                    a2 = __smlad(tt_load_pair(c + 4), wi, a2);
                    a3 = __smlad(tt_load_pair(c + 6), wi, a3);
                }
                acc[p] = a0;
                acc[p + 1] = a1;
                acc[p + 2] = a2;
                acc[p + 3] = a3;
            }
            for (; p < n; p++) {
                int32_t a = bias[o];
                for (i = 0; i < words; i++) {
                    a = __smlad(tt_load_pair(col + 2 * (i * n + p)), wp[i], a);
                }
                acc[p] = a;
            }
            tt_conv_store(q, o, acc, n, o * hw + p0, y, mask);
        }
    }
    return 1;
}
#endif

void tt_conv2d_s8(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                  const int32_t *bias, const tt_requant *q, int8_t *y, uint8_t *mask) {
    int32_t cg = g->in_c / g->groups;
    int32_t og = g->out_c / g->groups;
    int32_t n_out = g->out_c * g->out_h * g->out_w;
    int32_t o, oy, ox, ci, ky, kx, i;
    if (mask) {
        for (i = 0; i < (n_out + 7) / 8; i++) {
            mask[i] = 0;
        }
    }
    if (tt_is_pointwise(g)) {
#ifdef TT_DSP
        if (tt_conv_pointwise_dsp(g, x, w, bias, q, y, mask)) {
            return;
        }
#endif
        tt_conv_pointwise(g, x, w, bias, q, y, mask);
        return;
    }
    if (!tt_is_square(g)) {
        goto direct;
    }
#ifdef TT_DSP
    if (g->out_h * g->out_w > TT_DW3_FEWEST && tt_conv_dw3(g, x, w, bias, q, y, mask, 0)) {
        return;
    }
    if (tt_is_depthwise(g) && tt_conv_depthwise_taps(g, x, w, bias, q, y, mask)) {
        return;
    }
    if (tt_channelwise_fits(g)) {
        tt_conv_channelwise(g, x, w, bias, q, y, mask);
        return;
    }
    if (g->groups == 1 && tt_conv_columns_dsp(g, x, w, bias, q, y, mask)) {
        return;
    }
#endif
#ifndef TT_CORTEX_M
    if (tt_depthwise_few(g)) {
        tt_conv_depthwise_few(g, x, w, bias, q, y, mask);
        return;
    }
    {
        int32_t rh, qw;
        if (g->out_w <= TT_TILE && tt_plane_size(g, TT_PLANE_VALUES, TT_PLANE_SUMS, &rh, &qw) > 0) {
            tt_conv_planes(g, x, w, bias, q, y, mask);
            return;
        }
    }
#endif
    if (g->out_w <= TT_TILE) {
        tt_conv_rows(g, x, w, bias, q, y, mask);
        return;
    }
direct: /* the direct loop: convolutions with output rows wider than a tile, and rectangular
         * kernels or strides */
    for (o = 0; o < g->out_c; o++) {
        int32_t c0 = (o / og) * cg;
        for (oy = 0; oy < g->out_h; oy++) {
            for (ox = 0; ox < g->out_w; ox++) {
                int32_t acc = bias[o];
                int64_t v;
                int32_t idx = (o * g->out_h + oy) * g->out_w + ox;
                for (ci = 0; ci < cg; ci++) {
                    const int8_t *xc = x + (c0 + ci) * g->in_h * g->in_w;
                    for (ky = 0; ky < g->kernel; ky++) {
                        int32_t iy = oy * g->stride + ky - g->pad_top;
                        if (iy < 0 || iy >= g->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < g->kernel_w; kx++) {
                            int32_t ix = ox * g->stride_w + kx - g->pad_left;
                            if (ix < 0 || ix >= g->in_w) {
                                continue;
                            }
                            acc += (xc[iy * g->in_w + ix] - q->x_zero) *
                                   tt_weight_at(g, w, o, ci, ky * g->kernel_w + kx);
                        }
                    }
                }
                v = q->y_zero + tt_scale_round(acc, q->mult[o], q->shift[o]);
                if (mask && v >= q->act_min && v <= q->act_max) {
                    mask[idx >> 3] = (uint8_t)(mask[idx >> 3] | (1u << (idx & 7)));
                }
                y[idx] = (int8_t)tt_clamp64(v, q->act_min, q->act_max);
            }
        }
    }
}

#ifndef TT_CORTEX_M
/* Bytes of output an in-place depthwise convolution on a Linux target computes on the stack
 * whole, before it overwrites its input with them; a larger one goes a channel at a time. */
#define TT_INPLACE_BYTES 16384

/* An in-place depthwise convolution computed whole into a buffer of its own, then copied over
 * its input: where its output fits TT_INPLACE_BYTES and it takes the few-pixel path or the
 * small planes (so that this buffer never sits above the large planes' 96 KiB). Returns 0,
 * having done nothing, otherwise. The same bytes as tt_conv2d_s8 (mask included). */
TT_NOINLINE
static int32_t tt_inplace_whole(const tt_conv_geom *g, int8_t *xy, const tt_weight *w,
                                const int32_t *bias, const tt_requant *q, uint8_t *mask) {
    int32_t n = g->out_c * g->out_h * g->out_w, rh, qw, i;
    int8_t out[TT_INPLACE_BYTES];
    int32_t few = tt_depthwise_few(g);
    if (n > TT_INPLACE_BYTES ||
        (!few && !(tt_is_square(g) && g->out_w <= TT_TILE &&
                   tt_plane_size(g, TT_SMALL_PLANE_VALUES, TT_SMALL_PLANE_SUMS, &rh, &qw) > 0))) {
        return 0;
    }
    for (i = 0; mask && i < (n + 7) / 8; i++) {
        mask[i] = 0;
    }
    if (few) {
        tt_conv_depthwise_few(g, xy, w, bias, q, out, mask);
    } else {
        tt_conv_planes_small(g, xy, w, bias, q, out, mask);
    }
    memcpy(xy, out, (size_t)n);
    return 1;
}
#endif

void tt_conv2d_inplace_s8(const tt_conv_geom *g, int8_t *xy, const tt_weight *w,
                          const int32_t *bias, const tt_requant *q, int8_t *channel,
                          uint8_t *mask) {
    int32_t kk = tt_taps(g);
    int32_t n_in = g->in_h * g->in_w, n_out = g->out_h * g->out_w;
    tt_conv_geom one = *g;
    tt_requant qc = *q;
    tt_weight wc;
    int32_t c, i;
#ifdef TT_DSP
    if (g->out_h * g->out_w > TT_DW3_FEWEST && tt_conv_dw3(g, xy, w, bias, q, xy, mask, 1)) {
        return;
    }
    if (tt_is_square(g) && tt_conv_inplace_taps(g, xy, w, bias, q, channel, mask)) {
        return;
    }
#endif
#ifndef TT_CORTEX_M
    if (tt_inplace_whole(g, xy, w, bias, q, mask)) {
        return;
    }
#endif
    one.in_c = one.out_c = one.groups = 1;
    for (c = 0; c < g->out_c; c++) {
        wc.k = c < w->k;
        wc.train = wc.k ? w->train + c * kk : NULL;
        wc.frozen = wc.k ? NULL : w->frozen + (c - w->k) * kk;
        qc.mult = q->mult + c;
        qc.shift = q->shift + c;
        tt_conv2d_s8(&one, xy + c * n_in, &wc, bias + c, &qc, channel,
                     mask ? mask + c * n_out / 8 : NULL);
        for (i = 0; i < n_out; i++) { /* over input channels 0 .. c, all read by now */
            xy[c * n_out + i] = channel[i];
        }
    }
}

TT_VECTOR_CLONES
void tt_window_s8(const int8_t *src, int32_t channels, int32_t src_h, int32_t src_w,
                  int32_t src_r, int32_t src_c, int32_t h, int32_t w, int8_t *dst,
                  int32_t dst_h, int32_t dst_w, int32_t dst_r, int32_t dst_c) {
    int32_t c, r, j;
    for (c = 0; c < channels; c++) {
        for (r = 0; r < h; r++) {
            const int8_t *from = src + (c * src_h + src_r + r) * src_w + src_c;
            int8_t *to = dst + (c * dst_h + dst_r + r) * dst_w + dst_c;
            for (j = 0; j < w; j++) {
                to[j] = from[j];
            }
        }
    }
}

TT_VECTOR_CLONES
void tt_add_s8(const int8_t *a, const int8_t *b, int32_t n, int32_t a_zero, int32_t b_zero,
               int32_t a_mult, int32_t b_mult, int32_t shift, int32_t y_zero, int8_t *y) {
    int32_t i;
    for (i = 0; i < n; i++) {
        int64_t acc = (int64_t)(a[i] - a_zero) * a_mult + (int64_t)(b[i] - b_zero) * b_mult;
        y[i] = (int8_t)tt_clamp64(y_zero + tt_rshift_round(acc, shift), -128, 127);
    }
}

TT_VECTOR_CLONES
void tt_add_act_s8(const int8_t *a, const int8_t *b, int32_t n, int32_t a_zero, int32_t b_zero,
                   int32_t a_mult, int32_t b_mult, int32_t shift, int32_t y_zero,
                   int32_t act_min, int32_t act_max, int8_t *y, uint8_t *mask) {
    int32_t i;
    if (mask != NULL) {
        for (i = 0; i < (n + 7) / 8; i++) {
            mask[i] = 0;
        }
    }
    for (i = 0; i < n; i++) {
        int64_t acc = (int64_t)(a[i] - a_zero) * a_mult + (int64_t)(b[i] - b_zero) * b_mult;
        int64_t v = y_zero + tt_rshift_round(acc, shift);
        if (mask != NULL && v >= act_min && v <= act_max) {
            mask[i >> 3] |= (uint8_t)(1u << (i & 7));
        }
        y[i] = (int8_t)tt_clamp64(v, act_min, act_max);
    }
}

TT_VECTOR_CLONES
void tt_act_table_s8(const int8_t *pre, const int8_t *table, int32_t n, int8_t *y) {
    int32_t i;
    for (i = 0; i < n; i++) {
        y[i] = table[pre[i] + 128];
    }
}

TT_VECTOR_CLONES
void tt_mul_s8(const int8_t *x, const int8_t *s, int32_t channels, int32_t hw, int32_t x_zero,
               int32_t s_zero, int32_t mult, int32_t shift, int32_t y_zero, int8_t *y) {
    int32_t c, p;
    for (c = 0; c < channels; c++) {
        int32_t sc = s[c] - s_zero;
        for (p = 0; p < hw; p++) {
            int64_t v = y_zero + tt_scale_round((x[c * hw + p] - x_zero) * sc, mult, shift);
            y[c * hw + p] = (int8_t)tt_clamp64(v, -128, 127);
        }
    }
}

TT_VECTOR_CLONES
void tt_gap_s8(const int8_t *x, int32_t channels, int32_t hw, int32_t x_zero, int32_t mult,
               int32_t shift, int32_t y_zero, int8_t *y) {
    int32_t c, p;
    for (c = 0; c < channels; c++) {
        int32_t acc = 0;
        for (p = 0; p < hw; p++) {
            acc += x[c * hw + p] - x_zero;
        }
        y[c] = (int8_t)tt_clamp64(y_zero + tt_scale_round(acc, mult, shift), -128, 127);
    }
}

TT_VECTOR_CLONES
void tt_maxpool_s8(const int8_t *x, const tt_pool_geom *g, int8_t *y) {
    int32_t c, oy, ox;
    for (c = 0; c < g->channels; c++) {
        const int8_t *xc = x + c * g->in_h * g->in_w;
        int8_t *yc = y + c * g->out_h * g->out_w;
        for (oy = 0; oy < g->out_h; oy++) {
            for (ox = 0; ox < g->out_w; ox++) {
                yc[oy * g->out_w + ox] = xc[tt_pool_argmax(xc, g, oy, ox)];
            }
        }
    }
}
