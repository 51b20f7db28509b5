/* Backward kernels: activation masks, input gradients, QAS-scaled SGD updates. */
#include "tt_arith.h"
#include "tt_int8.h"

/* Pixels of int32/int64 partial sums a kernel keeps on the stack at a time. */
#define TT_TILE 64

#ifndef TT_CORTEX_M
/* tt_emit_put of elements i0 .. i0 + n - 1, their exact values v[0 .. n - 1] (|v| < 2^62), on a
 * Linux target: where the destination is written afresh, in loops the compiler vectorises (the
 * largest magnitude; the rounding shift, for s in 1 .. 62, as floor((v + 2^(s-1) + 2^62) / 2^s)
 * - 2^(62-s) with an unsigned shift). The same bytes as tt_emit_put, value by value. Out of
 * line: one copy serves every kernel. */
TT_NOINLINE TT_VECTOR_CLONES
static void tt_emit_put_run(tt_emit *st, const tt_grad *dst, int32_t i0, const int64_t *v,
                            int32_t n) {
    int32_t j, s = st->shift;
    if (dst->accumulate) { /* with the buffer's own values, in blocks of a few */
        int32_t d_new = st->e_new - st->e_c, d_prev = st->e_prev - st->e_c, b, m;
        int64_t t[16];
        for (b = 0; b < n; b += m) {
            m = n - b < 16 ? n - b : 16;
            for (j = 0; j < m; j++) {
                t[j] = tt_shift_exp(v[b + j], d_new) + tt_shift_exp(dst->data[i0 + b + j], d_prev);
            }
            if (st->pass == 0) {
                int64_t top = st->max_abs;
                for (j = 0; j < m; j++) {
                    int64_t a = t[j] < 0 ? -t[j] : t[j];
                    top = a > top ? a : top;
                }
                st->max_abs = top;
            } else {
                for (j = 0; j < m; j++) {
                    dst->data[i0 + b + j] = (int8_t)tt_rshift_round(t[j], s);
                }
            }
        }
    } else if (st->pass == 0) {
        int64_t m = st->max_abs;
        for (j = 0; j < n; j++) {
            int64_t a = v[j] < 0 ? -v[j] : v[j];
            m = a > m ? a : m;
        }
        st->max_abs = m;
    } else if (s >= 1 && s <= 62) {
        uint64_t c = ((uint64_t)1 << 62) + ((uint64_t)1 << (s - 1));
        int64_t back = (int64_t)1 << (62 - s);
        for (j = 0; j < n; j++) {
            dst->data[i0 + j] = (int8_t)((int64_t)(((uint64_t)v[j] + c) >> s) - back);
        }
    } else {
        for (j = 0; j < n; j++) {
            dst->data[i0 + j] = (int8_t)tt_rshift_round(v[j], s);
        }
    }
}
#endif

TT_VECTOR_CLONES
void tt_grad_mask(int8_t *g, const uint8_t *mask, int32_t n) {
    int32_t i = 0;
#ifndef TT_CORTEX_M
    int32_t j;
    /* eight values a mask byte, without a branch on each bit (the bits follow the data) */
    for (; i + 8 <= n; i += 8) {
        uint32_t bits = mask[i >> 3];
        for (j = 0; j < 8; j++) {
            g[i + j] = (int8_t)(g[i + j] & -(int32_t)((bits >> j) & 1u));
        }
    }
#endif
    for (; i < n; i++) {
        if (!((mask[i >> 3] >> (i & 7)) & 1u)) {
            g[i] = 0;
        }
    }
}

TT_VECTOR_CLONES
void tt_grad_act_table(int8_t *g, int32_t *g_exp, const int8_t *pre, const int16_t *table,
                       int32_t frac_bits, int32_t n) {
    int32_t i;
    tt_grad dst;
    tt_emit st;
    dst.data = g;
    dst.exp = g_exp;
    dst.accumulate = 0;
    tt_emit_begin(&st, &dst, *g_exp - frac_bits, 0); /* written afresh: no bound needed */
    do {
#ifndef TT_CORTEX_M
        int64_t run[TT_TILE];
        int32_t i0, m;
        for (i0 = 0; i0 < n; i0 += m) { /* a run of values read before it is written */
            m = n - i0 < TT_TILE ? n - i0 : TT_TILE;
            for (i = 0; i < m; i++) {
                run[i] = (int64_t)g[i0 + i] * table[pre[i0 + i] + 128];
            }
            tt_emit_put_run(&st, &dst, i0, run, m);
        }
#else
        for (i = 0; i < n; i++) {
            tt_emit_put(&st, &dst, i, (int64_t)g[i] * table[pre[i] + 128]);
        }
#endif
    } while (tt_emit_advance(&st));
    tt_emit_end(&st, &dst);
}

TT_VECTOR_CLONES
void tt_mul_grad_x(const int8_t *gy, int32_t gy_exp, const int8_t *s, int32_t channels,
                   int32_t hw, int32_t s_zero, int32_t s_mult, int32_t frac_bits,
                   const tt_grad *gx) {
    int32_t c, p;
    tt_emit st;
    tt_emit_begin(&st, gx, gy_exp - frac_bits,
                  tt_bitlen((uint64_t)TT_GRAD_MAX * 255u * (uint64_t)s_mult));
    do {
        for (c = 0; c < channels; c++) {
            int64_t sc = (int64_t)(s[c] - s_zero) * s_mult;
#ifndef TT_CORTEX_M
            int64_t run[TT_TILE];
            int32_t p0, m;
            for (p0 = 0; p0 < hw; p0 += m) {
                m = hw - p0 < TT_TILE ? hw - p0 : TT_TILE;
                for (p = 0; p < m; p++) {
                    run[p] = gy[c * hw + p0 + p] * sc;
                }
                tt_emit_put_run(&st, gx, c * hw + p0, run, m);
            }
#else
            for (p = 0; p < hw; p++) {
                tt_emit_put(&st, gx, c * hw + p, gy[c * hw + p] * sc);
            }
#endif
        }
    } while (tt_emit_advance(&st));
    tt_emit_end(&st, gx);
}

TT_VECTOR_CLONES
void tt_mul_grad_scale(const int8_t *gy, int32_t gy_exp, const int8_t *x, int32_t channels,
                       int32_t hw, int32_t x_zero, int32_t x_mult, int32_t frac_bits,
                       const tt_grad *gs) {
    int32_t c, p;
    tt_emit st;
    tt_emit_begin(&st, gs, gy_exp - frac_bits,
                  tt_bitlen((uint64_t)TT_GRAD_MAX * 255u * (uint64_t)hw * (uint64_t)x_mult));
    do {
        for (c = 0; c < channels; c++) {
            int64_t total = 0;
            for (p = 0; p < hw; p++) {
                total += (int64_t)gy[c * hw + p] * (x[c * hw + p] - x_zero);
            }
            tt_emit_put(&st, gs, c, total * x_mult);
        }
    } while (tt_emit_advance(&st));
    tt_emit_end(&st, gs);
}

#ifdef TT_CORTEX_M
/* Two pixels' sums over n output channels of gy (w m): gy at go, go + hw, ...; the weights
 * at wc, wc + ws, ...; kept out of line, so that its few live values stay in registers. Four
 * output channels' products are added in 32 bits before each 64-bit addition: |gy| <= 128,
 * |w| <= 127 and m <= 2^15 bound each product by 532 676 608, four of them below 2^31. On a
 * core without a 64-bit multiply-accumulate (a Cortex-M0+) each product is then one 32-bit
 * multiply. The same integers as the direct loop, bit for bit. */
TT_NOINLINE
static void tt_dot2_long(const int8_t *go, int32_t hw, const int8_t *wc, int32_t ws,
                         const int32_t *m, int32_t n, int64_t *s) {
    int64_t s0 = 0, s1 = 0;
    int32_t o = 0;
    for (; o + 4 <= n; o += 4, go += 4 * hw, wc += 4 * ws) {
        int32_t c0 = wc[0] * m[o], c1 = wc[ws] * m[o + 1];
        int32_t c2 = wc[2 * ws] * m[o + 2], c3 = wc[3 * ws] * m[o + 3];
        s0 += go[0] * c0 + go[hw] * c1 + go[2 * hw] * c2 + go[3 * hw] * c3;
        s1 += go[1] * c0 + go[hw + 1] * c1 + go[2 * hw + 1] * c2 + go[3 * hw + 1] * c3;
    }
    for (; o < n; o++, go += hw, wc += ws) {
        int32_t coef = wc[0] * m[o];
        s0 += go[0] * coef;
        s1 += go[1] * coef;
    }
    s[0] = s0;
    s[1] = s1;
}

#ifdef __riscv
/* tt_dot2_long for four pixels (go .. go + 3), on a core with registers for their sums (32 on
 * RISC-V): each coefficient w m taken by four products. */
TT_NOINLINE
static void tt_dot4px_long(const int8_t *go, int32_t hw, const int8_t *wc, int32_t ws,
                           const int32_t *m, int32_t n, int64_t *s) {
    int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int32_t o = 0;
    for (; o + 4 <= n; o += 4, go += 4 * hw, wc += 4 * ws) {
        int32_t c0 = wc[0] * m[o], c1 = wc[ws] * m[o + 1];
        int32_t c2 = wc[2 * ws] * m[o + 2], c3 = wc[3 * ws] * m[o + 3];
        const int8_t *g1 = go + hw, *g2 = g1 + hw, *g3 = g2 + hw;
        s0 += go[0] * c0 + g1[0] * c1 + g2[0] * c2 + g3[0] * c3;
        s1 += go[1] * c0 + g1[1] * c1 + g2[1] * c2 + g3[1] * c3;
        s2 += go[2] * c0 + g1[2] * c1 + g2[2] * c2 + g3[2] * c3;
        s3 += go[3] * c0 + g1[3] * c1 + g2[3] * c2 + g3[3] * c3;
    }
    for (; o < n; o++, go += hw, wc += ws) {
        int32_t coef = wc[0] * m[o];
        s0 += go[0] * coef;
        s1 += go[1] * coef;
        s2 += go[2] * coef;
        s3 += go[3] * coef;
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}
#endif

/* grad_input of a 1x1 convolution on a Cortex-M (no vector unit): per input channel, two
 * pixels' 64-bit sums over the output channels live in registers (tt_dot2_long; four on
 * RISC-V, tt_dot4px_long); the products gy (w m) are int32 (|w m| < 2^22). Same integers as
 * the direct loop, bit for bit. */
static void tt_grad_input_pointwise(const tt_conv_geom *g, const int8_t *gy,
                                    const tt_weight *w, const int32_t *w_mult, tt_emit *st,
                                    const tt_grad *gx) {
    int32_t hw = g->in_h * g->in_w, cin = g->in_c, k = w->k, out_c = g->out_c;
    int32_t c, o, p;
    for (c = 0; c < cin; c++) {
        const int8_t *wc = c < k ? w->train + c : w->frozen + (c - k);
        int32_t ws = c < k ? k : cin - k; /* from one output channel's weight to the next */
        p = 0;
#ifdef __riscv
        for (; p + 4 <= hw; p += 4) {
            int64_t s[4];
            tt_dot4px_long(gy + p, hw, wc, ws, w_mult, out_c, s);
            for (o = 0; o < 4; o++) {
                tt_emit_put(st, gx, c * hw + p + o, s[o]);
            }
        }
#endif
        for (; p + 2 <= hw; p += 2) {
            int64_t s[2];
            tt_dot2_long(gy + p, hw, wc, ws, w_mult, out_c, s);
            tt_emit_put(st, gx, c * hw + p, s[0]);
            tt_emit_put(st, gx, c * hw + p + 1, s[1]);
        }
        if (p < hw) {
            const int8_t *go = gy + p;
            int64_t s0 = 0;
            o = 0;
            for (; o + 4 <= out_c; o += 4, go += 4 * hw) { /* as tt_dot2_long */
                s0 += go[0] * (wc[o * ws] * w_mult[o]) + go[hw] * (wc[(o + 1) * ws] * w_mult[o + 1]) +
                      go[2 * hw] * (wc[(o + 2) * ws] * w_mult[o + 2]) +
                      go[3 * hw] * (wc[(o + 3) * ws] * w_mult[o + 3]);
            }
            for (; o < out_c; o++, go += hw) {
                s0 += go[0] * (wc[o * ws] * w_mult[o]);
            }
            tt_emit_put(st, gx, c * hw + p, s0);
        }
    }
}

#ifdef TT_DSP
/* Four consecutive input channels' sums over n output channels: their weights a word at wo,
 * the next output channel's ws bytes on; g[o] = gy[o] m[o] (|g| < 2^22). */
TT_NOINLINE
static void tt_dot4_long(const int8_t *wo, int32_t ws, const int32_t *g, int32_t n,
                         int64_t *s) {
    int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const int32_t *end = g + n;
    for (; g < end; g++, wo += ws) {
        int32_t v = tt_load4(wo), c = *g;
        s0 += (int64_t)(int8_t)v * c;
        s1 += (int64_t)(int8_t)(v >> 8) * c;
        s2 += (int64_t)(int8_t)(v >> 16) * c;
        s3 += (int64_t)(v >> 24) * c;
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}

/* grad_input of a 1x1 convolution on a core with the DSP extension: per pixel, the products
 * g[o] = gy[o] m[o] once (in coef, of words int32 values), then four input channels at a time
 * (their weights one word of each output channel's row) in 64-bit sums. Returns 0 (nothing
 * done) for more output channels than words. The same integers as the direct loop, bit for
 * bit. */
TT_NOINLINE
static int32_t tt_grad_input_pointwise_dsp(const tt_conv_geom *g, const int8_t *gy,
                                           const tt_weight *w, const int32_t *w_mult,
                                           tt_emit *st, const tt_grad *gx,
                                           int32_t *coef, int32_t words) {
    int32_t hw = g->in_h * g->in_w, cin = g->in_c, k = w->k, out_c = g->out_c;
    int32_t c, o, p, j;
    if (out_c > words) {
        return 0;
    }
    do {
        for (p = 0; p < hw; p++) {
            for (o = 0; o < out_c; o++) {
                coef[o] = gy[o * hw + p] * w_mult[o];
            }
            for (c = 0; c < cin;) {
                /* the run of channels in the weight part of c: trained (rows of k) or frozen */
                int32_t part_end = c < k ? k : cin;
                int32_t ws = c < k ? k : cin - k;
                const int8_t *wc = c < k ? w->train + c : w->frozen + (c - k);
                int64_t s[4];
                int32_t n = part_end - c >= 4 ? 4 : 1;
                if (n == 4) {
                    tt_dot4_long(wc, ws, coef, out_c, s);
                } else {
                    int64_t s0 = 0;
                    for (o = 0; o < out_c; o++) {
                        s0 += (int64_t)wc[o * ws] * coef[o];
                    }
                    s[0] = s0;
                }
                for (j = 0; j < n; j++, c++) {
                    tt_emit_put(st, gx, c * hw + p, s[j]);
                }
            }
        }
    } while (tt_emit_advance(st));
    return 1;
}
#endif
#else
/* Sums of the input gradient a 1x1 convolution on few pixels keeps on the stack (8 KiB). */
#define TT_FEW_SUMS 1024

/* One pixel's row of input-gradient sums (cin of them) plus four output channels' weight rows
 * times their coefficients: the four products of a channel are added in 32 bits (each below
 * 127 2^22 in magnitude, so four below 2^31), then to the 64-bit sum, in loops the compiler
 * vectorises. wt[j] and wf[j]: output channel j's trained (k values) and frozen weights. */
static inline void tt_add_rows4(int64_t *row, const int8_t *const *wt, const int8_t *const *wf,
                                const int32_t *coef, int32_t k, int32_t cin) {
    int32_t c;
    for (c = 0; c < k; c++) {
        row[c] += wt[0][c] * coef[0] + wt[1][c] * coef[1] + wt[2][c] * coef[2] +
                  wt[3][c] * coef[3];
    }
    for (c = k; c < cin; c++) {
        row[c] += wf[0][c - k] * coef[0] + wf[1][c - k] * coef[1] + wf[2][c - k] * coef[2] +
                  wf[3][c - k] * coef[3];
    }
}

/* grad_input of a 1x1 convolution whose cin x hw sums fit TT_FEW_SUMS (the late layers of a
 * small input): each output channel's weight row, contiguous over the input channels, adds
 * w (gy m) to every pixel's row of sums (|gy m| < 2^22, |w gy m| < 2^29: an int32 product),
 * four output channels at a time (tt_add_rows4; a last block padded with zero coefficients),
 * so the loops run over contiguous memory; the sums are computed once and put in both passes
 * of the block exponent. The same exact integers as the direct loop. */
TT_VECTOR_CLONES
static void tt_grad_input_pointwise_rows(const tt_conv_geom *g, const int8_t *gy,
                                         const tt_weight *w, const int32_t *w_mult,
                                         tt_emit *st, const tt_grad *gx) {
    int32_t hw = g->in_h * g->in_w, cin = g->in_c, k = w->k;
    int64_t sums[TT_FEW_SUMS]; /* [pixel][input channel] */
    int32_t c, o, p, j;
    for (c = 0; c < cin * hw; c++) {
        sums[c] = 0;
    }
    for (o = 0; o < g->out_c; o += 4) {
        const int8_t *wt[4], *wf[4];
        int32_t coef[4];
        for (j = 0; j < 4; j++) { /* past the last channel: its rows again, times zero */
            int32_t oj = o + j < g->out_c ? o + j : o;
            wt[j] = k > 0 ? w->train + oj * k : NULL;
            wf[j] = k < cin ? w->frozen + oj * (cin - k) : NULL;
        }
        for (p = 0; p < hw; p++) {
            int32_t any = 0;
            for (j = 0; j < 4; j++) {
                coef[j] = o + j < g->out_c ? gy[(o + j) * hw + p] * w_mult[o + j] : 0;
                any |= coef[j];
            }
            if (any) {
                tt_add_rows4(sums + p * cin, wt, wf, coef, k, cin);
            }
        }
    }
    do {
        if (hw == 1) {
            tt_emit_put_run(st, gx, 0, sums, cin);
            continue;
        }
        for (c = 0; c < cin; c++) {
            int64_t run[TT_TILE];
            int32_t p0, n;
            for (p0 = 0; p0 < hw; p0 += n) {
                n = hw - p0 < TT_TILE ? hw - p0 : TT_TILE;
                for (p = 0; p < n; p++) {
                    run[p] = sums[(p0 + p) * cin + c];
                }
                tt_emit_put_run(st, gx, c * hw + p0, run, n);
            }
        }
    } while (tt_emit_advance(st));
}

/* grad_input of a 1x1 convolution, stride 1, no padding, one group: per input channel and
 * tile of pixels, sum over the output channels of gy * w * w_mult over contiguous rows. The
 * same exact integers as the direct loop, put in the same order. */
TT_VECTOR_CLONES
static void tt_grad_input_pointwise(const tt_conv_geom *g, const int8_t *gy,
                                    const tt_weight *w, const int32_t *w_mult, tt_emit *st,
                                    const tt_grad *gx) {
    int32_t hw = g->in_h * g->in_w, cin = g->in_c, k = w->k;
    int64_t acc[TT_TILE];
    int32_t c, o, p, p0;
    for (c = 0; c < cin; c++) {
        for (p0 = 0; p0 < hw; p0 += TT_TILE) {
            int32_t n = hw - p0 < TT_TILE ? hw - p0 : TT_TILE;
            for (p = 0; p < n; p++) {
                acc[p] = 0;
            }
            for (o = 0; o < g->out_c; o++) {
                int32_t wv = c < k ? w->train[o * k + c] : w->frozen[o * (cin - k) + (c - k)];
                const int8_t *go = gy + o * hw + p0;
                /* (gy w) m = gy (w m), exactly; |w m| < 2^22 and |gy w m| < 2^29 (m < 2^15,
                 * the Q-format of gradient multipliers), so each product is an int32 */
                int32_t coef = wv * w_mult[o];
                if (wv == 0) {
                    continue;
                }
                for (p = 0; p < n; p++) {
                    acc[p] += (int64_t)(go[p] * coef);
                }
            }
            tt_emit_put_run(st, gx, c * hw + p0, acc, n);
        }
    }
}
#endif

/* grad_input of a depthwise convolution whose input rows fit a tile: per channel and input
 * row, each kernel tap scatters a strided run of an output-gradient row. Same integers, same
 * order of puts as the direct loop. */
TT_VECTOR_CLONES
static void tt_grad_input_depthwise(const tt_conv_geom *g, const int8_t *gy,
                                    const tt_weight *w, const int32_t *w_mult, tt_emit *st,
                                    const tt_grad *gx) {
    int32_t kk = g->kernel * g->kernel, s = g->stride;
    int32_t part[TT_TILE];
    int32_t c, iy, ix, ky, kx, ox;
    for (c = 0; c < g->in_c; c++) {
        const int8_t *wc = c < w->k ? w->train + c * kk : w->frozen + (c - w->k) * kk;
        const int8_t *gc = gy + c * g->out_h * g->out_w;
        for (iy = 0; iy < g->in_h; iy++) {
            for (ix = 0; ix < g->in_w; ix++) {
                part[ix] = 0;
            }
            for (ky = 0; ky < g->kernel; ky++) {
                int32_t ty = iy + g->pad_top - ky;
                const int8_t *grow;
                if (ty < 0 || ty % s || ty / s >= g->out_h) {
                    continue;
                }
                grow = gc + (ty / s) * g->out_w;
                for (kx = 0; kx < g->kernel; kx++) {
                    int32_t wv = wc[ky * g->kernel + kx];
                    int32_t off = kx - g->pad_left; /* ix = ox * s + off */
                    int32_t lo, hi;
                    if (wv == 0) {
                        continue;
                    }
                    tt_tap_range(g, off, &lo, &hi);
                    for (ox = lo; ox <= hi; ox++) {
                        part[ox * s + off] += grow[ox] * wv;
                    }
                }
            }
#ifndef TT_CORTEX_M
            {
                int64_t run[TT_TILE];
                for (ix = 0; ix < g->in_w; ix++) {
                    run[ix] = (int64_t)part[ix] * w_mult[c];
                }
                tt_emit_put_run(st, gx, (c * g->in_h + iy) * g->in_w, run, g->in_w);
            }
#else
            for (ix = 0; ix < g->in_w; ix++) {
                tt_emit_put(st, gx, (c * g->in_h + iy) * g->in_w + ix,
                            (int64_t)part[ix] * w_mult[c]);
            }
#endif
        }
    }
}


#ifdef TT_DSP
/* The widest kernel the plane path of a depthwise input gradient takes. */
#define TT_DW_KERNEL 7

/* grad_input of a depthwise convolution on a core with the DSP extension, a channel at a time:
 * gy is laid out in a zero-padded int16 plane, at rows k - 1 - pad_top + stride oy and columns
 * k - 1 - pad_left + stride ox (zeros between them for a stride of 2), so that the input
 * gradient is that plane's correlation with the flipped kernel at stride 1: two neighbouring
 * taps per SMLAD, no bounds in the inner loop; the plane lies in work (words int32 values).
 * Returns 0 (nothing done) where the plane or the kernel does not fit. Same integers as the
 * direct loop, bit for bit. */
TT_NOINLINE
static int32_t tt_grad_input_depthwise_plane(const tt_conv_geom *g,
                                             const int8_t *gy, const tt_weight *w,
                                             const int32_t *w_mult, tt_emit *st,
                                             const tt_grad *gx, int32_t *work,
                                             int32_t words) {
    int32_t k = g->kernel, kk = k * k, pairs = (k + 1) / 2, s = g->stride;
    int32_t rows = g->in_h + k - 1, qw = g->in_w + k;
    int32_t r0 = k - 1 - g->pad_top, j0 = k - 1 - g->pad_left;
    /* int16 values in the int32 words of work: written and read through memcpy */
    int16_t *plane = (int16_t *)(void *)work;
    int32_t wp[TT_DW_KERNEL * ((TT_DW_KERNEL + 1) / 2)]; /* [ky][pair] of the flipped kernel */
    int32_t c, t, oy, ox, iy, ix, ky;
    if (k > TT_DW_KERNEL || rows * qw > 2 * words || r0 < 0 || j0 < 0) {
        return 0;
    }
    memset(work, 0, (size_t)(rows * qw) * sizeof(int16_t));
    do {
        for (c = 0; c < g->in_c; c++) {
            const int8_t *wc = c < w->k ? w->train + c * kk : w->frozen + (c - w->k) * kk;
            const int8_t *gc = gy + c * g->out_h * g->out_w;
            for (ky = 0; ky < k; ky++) {
                const int8_t *wr = wc + (k - 1 - ky) * k; /* flipped row, read backwards */
                for (t = 0; t < pairs; t++) {
                    int32_t lo = wr[k - 1 - 2 * t], hi = 2 * t + 1 < k ? wr[k - 2 - 2 * t] : 0;
                    wp[ky * pairs + t] =
                        (int32_t)(((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16));
                }
            }
            for (oy = 0; oy < g->out_h; oy++) { /* the plane's zeros stay where they are */
                int16_t *row = plane + (r0 + s * oy) * qw + j0;
                for (ox = 0; ox < g->out_w; ox++) {
                    int16_t v = gc[oy * g->out_w + ox];
                    memcpy(row + s * ox, &v, sizeof v);
                }
            }
            for (iy = 0; iy < g->in_h; iy++) {
                for (ix = 0; ix < g->in_w; ix++) {
                    const int16_t *p0 = plane + iy * qw + ix;
                    int32_t a = 0;
                    for (ky = 0; ky < k; ky++, p0 += qw) {
                        const int32_t *wr = wp + ky * pairs;
                        for (t = 0; t < pairs; t++) {
                            a = __smlad(tt_load_pair(p0 + 2 * t), wr[t], a);
                        }
                    }
                    tt_emit_put(st, gx, (c * g->in_h + iy) * g->in_w + ix,
                                (int64_t)a * w_mult[c]);
                }
            }
        }
    } while (tt_emit_advance(st));
    return 1;
}

/* grad_input of a depthwise convolution on a small map, on a core with the DSP extension: which
 * input pixel, output pixel and tap every product joins is the same for all channels, so it is
 * listed once (input pixel, output pixel and tap packed in a word); each channel's int32
 * partial sums then take one multiply-accumulate per entry. The list and a channel's sums lie in
 * work (words int32 values); returns 0 (nothing done) when they do not fit. Same integers as
 * the direct loop, bit for bit. */
TT_NOINLINE
static int32_t tt_grad_input_depthwise_dsp(const tt_conv_geom *g, const int8_t *gy,
                                           const tt_weight *w, const int32_t *w_mult,
                                           tt_emit *st, const tt_grad *gx,
                                           int32_t *work, int32_t words) {
    int32_t kk = g->kernel * g->kernel, n_in = g->in_h * g->in_w, n_out = g->out_h * g->out_w;
    int32_t *part = work;                          /* n_in sums */
    uint32_t *entry = (uint32_t *)(work + n_in);   /* up to n_out k k taps */
    int32_t n = 0, c, i, e, oy, ox, ky, kx;
    if (n_in + n_out * kk > words || n_in > 4096 || n_out > 4096 || kk > 255) {
        return 0;
    }
    for (oy = 0; oy < g->out_h; oy++) {
        for (ox = 0; ox < g->out_w; ox++) {
            for (ky = 0; ky < g->kernel; ky++) {
                int32_t iy = oy * g->stride + ky - g->pad_top;
                for (kx = 0; kx < g->kernel; kx++) {
                    int32_t ix = ox * g->stride + kx - g->pad_left;
                    if (iy >= 0 && iy < g->in_h && ix >= 0 && ix < g->in_w) {
                        entry[n++] = (uint32_t)(iy * g->in_w + ix) |
                                     (uint32_t)(oy * g->out_w + ox) << 12 |
                                     (uint32_t)(ky * g->kernel + kx) << 24;
                    }
                }
            }
        }
    }
    do {
        for (c = 0; c < g->in_c; c++) {
            const int8_t *wc = c < w->k ? w->train + c * kk : w->frozen + (c - w->k) * kk;
            const int8_t *gc = gy + c * n_out;
            for (i = 0; i < n_in; i++) {
                part[i] = 0;
            }
            for (e = 0; e < n; e++) { /* |part| <= 127 127 k k */
                uint32_t v = entry[e];
                part[v & 0xFFFu] += gc[(v >> 12) & 0xFFFu] * wc[v >> 24];
            }
            for (i = 0; i < n_in; i++) {
                tt_emit_put(st, gx, c * n_in + i, (int64_t)part[i] * w_mult[c]);
            }
        }
    } while (tt_emit_advance(st));
    return 1;
}
#endif

#ifndef TT_CORTEX_M
/* grad_input of a depthwise convolution on few pixels (the late layers of a small input),
 * channels as the contiguous axis: each kernel tap adds, at each output pixel, one run over
 * all channels of gy w into the input pixel it came from; the int32 partial sums (those of the
 * direct loop) are computed once and put, times the channel's multiplier, in both passes of
 * the block exponent. Same integers, bit for bit. */
TT_VECTOR_CLONES
static void tt_grad_input_depthwise_few(const tt_conv_geom *g, const int8_t *gy,
                                        const tt_weight *w, const int32_t *w_mult,
                                        tt_emit *st, const tt_grad *gx) {
    int32_t ch = g->in_c, kk = g->kernel * g->kernel;
    int32_t n_in = g->in_h * g->in_w, n_out = g->out_h * g->out_w;
    int16_t gt[TT_FEW_VALUES];   /* [output pixel][channel] */
    int32_t part[TT_FEW_VALUES]; /* [input pixel][channel] */
    int16_t wcol[TT_FEW_VALUES];
    int32_t c, i, p, oy, ox, ky, kx;
    for (c = 0; c < ch; c++) {
        for (p = 0; p < n_out; p++) {
            gt[p * ch + c] = gy[c * n_out + p];
        }
    }
    for (i = 0; i < n_in * ch; i++) {
        part[i] = 0;
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
                    int32_t *a = part + (iy * g->in_w + ix) * ch;
                    const int16_t *gr = gt + (oy * g->out_w + ox) * ch;
                    if (ix < 0 || ix >= g->in_w) {
                        continue;
                    }
                    for (c = 0; c < ch; c++) { /* |product| <= 127 127 */
                        a[c] += (int16_t)(gr[c] * wcol[c]);
                    }
                }
            }
        }
    }
    do {
        for (c = 0; c < ch; c++) {
            int64_t run[TT_TILE];
            int32_t i0, n;
            for (i0 = 0; i0 < n_in; i0 += n) {
                n = n_in - i0 < TT_TILE ? n_in - i0 : TT_TILE;
                for (i = 0; i < n; i++) {
                    run[i] = (int64_t)part[(i0 + i) * ch + c] * w_mult[c];
                }
                tt_emit_put_run(st, gx, c * n_in + i0, run, n);
            }
        }
    } while (tt_emit_advance(st));
}
#endif

void tt_conv2d_grad_input(const tt_conv_geom *g, const int8_t *gy, int32_t gy_exp,
                          const tt_weight *w, const int32_t *w_mult, int32_t frac_bits,
                          const tt_grad *gx) {
    int32_t cg = g->in_c / g->groups;
    int32_t og = g->out_c / g->groups;
    int32_t o, c, iy, ix, ky, kx;
    int32_t max_mult = 0;
    tt_emit st;
#ifdef TT_DSP
    int32_t scratch[TT_KEEP];
    int32_t *work, free_words;
#elif defined(TT_CORTEX_M)
    uint8_t bits[TT_FEW_BITS];
    int32_t n_in = g->in_c * g->in_h * g->in_w;
#endif
    for (o = 0; o < g->out_c; o++) {
        if (w_mult[o] > max_mult) {
            max_mult = w_mult[o];
        }
    }
    tt_emit_begin(&st, gx, gy_exp - frac_bits,
                  tt_bitlen((uint64_t)TT_GRAD_MAX * 127u * (uint64_t)max_mult * (uint64_t)og *
                            (uint64_t)tt_taps(g)));
#ifdef TT_DSP
    /* the scratch's words that the one pass leaves free take the kernel's own buffers */
    free_words = tt_emit_scratch(&st, gx, g->in_c * g->in_h * g->in_w, scratch);
    work = scratch + (TT_KEEP - free_words);
#elif defined(TT_CORTEX_M)
    if ((gx->accumulate ? 2 : 1) * ((n_in + 7) / 8) <= TT_FEW_BITS) {
        tt_emit_one_pass(&st, gx, n_in, bits);
    }
#endif
    if (tt_is_pointwise(g)) {
#ifndef TT_CORTEX_M
        if (g->in_c * g->in_h * g->in_w <= TT_FEW_SUMS) { /* both passes inside */
            tt_grad_input_pointwise_rows(g, gy, w, w_mult, &st, gx);
            tt_emit_end(&st, gx);
            return;
        }
#endif
#ifdef TT_DSP
        if (tt_grad_input_pointwise_dsp(g, gy, w, w_mult, &st, gx, work, free_words)) {
            tt_emit_end(&st, gx);
            return;
        }
#endif
        do {
            tt_grad_input_pointwise(g, gy, w, w_mult, &st, gx);
        } while (tt_emit_advance(&st));
        tt_emit_end(&st, gx);
        return;
    }
    if (!tt_is_square(g)) {
        goto direct;
    }
#ifndef TT_CORTEX_M
    if (tt_depthwise_few(g)) { /* both passes inside */
        tt_grad_input_depthwise_few(g, gy, w, w_mult, &st, gx);
        tt_emit_end(&st, gx);
        return;
    }
#endif
#ifdef TT_DSP
    if (tt_is_depthwise(g) &&
        (tt_grad_input_depthwise_dsp(g, gy, w, w_mult, &st, gx, work, free_words) ||
         tt_grad_input_depthwise_plane(g, gy, w, w_mult, &st, gx, work, free_words))) {
        tt_emit_end(&st, gx);
        return;
    }
#endif
    if (tt_is_depthwise(g) && g->in_w <= TT_TILE) {
        do {
            tt_grad_input_depthwise(g, gy, w, w_mult, &st, gx);
        } while (tt_emit_advance(&st));
        tt_emit_end(&st, gx);
        return;
    }
direct:
    do { /* the direct loop: every other convolution, and rectangular kernels or strides */
        for (c = 0; c < g->in_c; c++) {
            int32_t o0 = (c / cg) * og;
            int32_t ci = c % cg;
            for (iy = 0; iy < g->in_h; iy++) {
                for (ix = 0; ix < g->in_w; ix++) {
                    int64_t s = 0;
                    for (o = o0; o < o0 + og; o++) {
                        const int8_t *go = gy + o * g->out_h * g->out_w;
                        int32_t part = 0;
                        for (ky = 0; ky < g->kernel; ky++) {
                            int32_t ty = iy + g->pad_top - ky;
                            int32_t oy;
                            if (ty < 0 || ty % g->stride) {
                                continue;
                            }
                            oy = ty / g->stride;
                            if (oy >= g->out_h) {
                                continue;
                            }
                            for (kx = 0; kx < g->kernel_w; kx++) {
                                int32_t tx = ix + g->pad_left - kx;
                                int32_t ox;
                                if (tx < 0 || tx % g->stride_w) {
                                    continue;
                                }
                                ox = tx / g->stride_w;
                                if (ox >= g->out_w) {
                                    continue;
                                }
                                part += go[oy * g->out_w + ox] *
                                        tt_weight_at(g, w, o, ci, ky * g->kernel_w + kx);
                            }
                        }
                        s += (int64_t)part * w_mult[o];
                    }
                    tt_emit_put(&st, gx, (c * g->in_h + iy) * g->in_w + ix, s);
                }
            }
        }
    } while (tt_emit_advance(&st));
    tt_emit_end(&st, gx);
}

TT_VECTOR_CLONES
void tt_gap_grad_input(const int8_t *gy, int32_t gy_exp, int32_t channels, int32_t hw,
                       int32_t hw_mult, int32_t frac_bits, const tt_grad *gx) {
    int32_t c, p;
    tt_emit st;
    tt_emit_begin(&st, gx, gy_exp - frac_bits,
                  tt_bitlen((uint64_t)TT_GRAD_MAX * (uint64_t)hw_mult));
    do {
#ifndef TT_CORTEX_M
        if (hw == 1) { /* one value a channel: a run over the channels */
            int64_t run[TT_TILE];
            int32_t c0, m;
            for (c0 = 0; c0 < channels; c0 += m) {
                m = channels - c0 < TT_TILE ? channels - c0 : TT_TILE;
                for (c = 0; c < m; c++) {
                    run[c] = (int64_t)gy[c0 + c] * hw_mult;
                }
                tt_emit_put_run(&st, gx, c0, run, m);
            }
            continue;
        }
        for (c = 0; c < channels; c++) { /* a channel's value over its pixels */
            int64_t run[TT_TILE];
            int32_t p0, m;
            for (p0 = 0; p0 < hw; p0 += m) {
                m = hw - p0 < TT_TILE ? hw - p0 : TT_TILE;
                for (p = 0; p < m; p++) {
                    run[p] = (int64_t)gy[c] * hw_mult;
                }
                tt_emit_put_run(&st, gx, c * hw + p0, run, m);
            }
        }
#else
        for (c = 0; c < channels; c++) {
            int64_t s = (int64_t)gy[c] * hw_mult;
            for (p = 0; p < hw; p++) {
                tt_emit_put(&st, gx, c * hw + p, s);
            }
        }
#endif
    } while (tt_emit_advance(&st));
    tt_emit_end(&st, gx);
}

TT_VECTOR_CLONES
void tt_maxpool_grad_input(const int8_t *gy, int32_t gy_exp, const int8_t *x,
                           const tt_pool_geom *g, const tt_grad *gx) {
    /* each input sums the gradients of the outputs whose window it wins: those of rows
     * oy0 .. oy1 and columns ox0 .. ox1, the windows that hold it */
    int32_t cover_h = (g->kernel_h + g->stride_h - 1) / g->stride_h;
    int32_t cover_w = (g->kernel_w + g->stride_w - 1) / g->stride_w;
    int32_t c, iy, ix, oy, ox;
    tt_emit st;
    tt_emit_begin(&st, gx, gy_exp,
                  tt_bitlen((uint64_t)TT_GRAD_MAX * (uint64_t)(cover_h * cover_w)));
    do {
        for (c = 0; c < g->channels; c++) {
            const int8_t *xc = x + c * g->in_h * g->in_w;
            const int8_t *gc = gy + c * g->out_h * g->out_w;
            for (iy = 0; iy < g->in_h; iy++) {
                int32_t ry = iy + g->pad_top;
                int32_t oy0 = ry < g->kernel_h ? 0 : (ry - g->kernel_h) / g->stride_h + 1;
                int32_t oy1 = ry / g->stride_h < g->out_h - 1 ? ry / g->stride_h : g->out_h - 1;
                for (ix = 0; ix < g->in_w; ix++) {
                    int32_t rx = ix + g->pad_left;
                    int32_t ox0 = rx < g->kernel_w ? 0 : (rx - g->kernel_w) / g->stride_w + 1;
                    int32_t ox1 =
                        rx / g->stride_w < g->out_w - 1 ? rx / g->stride_w : g->out_w - 1;
                    int32_t at = iy * g->in_w + ix;
                    int64_t s = 0;
                    for (oy = oy0; oy <= oy1; oy++) {
                        for (ox = ox0; ox <= ox1; ox++) {
                            if (tt_pool_argmax(xc, g, oy, ox) == at) {
                                s += gc[oy * g->out_w + ox];
                            }
                        }
                    }
                    tt_emit_put(&st, gx, c * g->in_h * g->in_w + at, s);
                }
            }
        }
    } while (tt_emit_advance(&st));
    tt_emit_end(&st, gx);
}

TT_VECTOR_CLONES
void tt_grad_accumulate(const int8_t *g, int32_t g_exp, int32_t n, const tt_grad *dst) {
    int32_t i;
    tt_emit st;
    tt_emit_begin(&st, dst, g_exp, tt_bitlen(TT_GRAD_MAX));
    do {
        for (i = 0; i < n; i++) {
            tt_emit_put(&st, dst, i, g[i]);
        }
    } while (tt_emit_advance(&st));
    tt_emit_end(&st, dst);
}

TT_VECTOR_CLONES
void tt_update_bias(const int8_t *gy, int32_t gy_exp, int32_t channels, int32_t hw,
                    int32_t *bias, const int32_t *upd_mult, const int32_t *upd_shift) {
    int32_t o, p;
#ifndef TT_CORTEX_M
    if (hw == 1) { /* one gradient a channel: the steps in a loop without branches */
        int32_t t_min = 62, t_max = 1;
        for (o = 0; o < channels; o++) {
            int32_t t = upd_shift[o] - gy_exp;
            t_min = t < t_min ? t : t_min;
            t_max = t > t_max ? t : t_max;
        }
        if (channels > 0 && t_min >= 1 && t_max <= 62) { /* rounded as tt_step_row */
            for (o = 0; o < channels; o++) {
                int32_t t = upd_shift[o] - gy_exp;
                uint64_t offset = ((uint64_t)1 << 62) + ((uint64_t)1 << (t - 1));
                uint64_t top = ((uint64_t)((int64_t)gy[o] * upd_mult[o]) + offset) >> t;
                int64_t delta = (int64_t)top - ((int64_t)1 << (62 - t));
                int64_t v = (int64_t)bias[o] - delta;
                bias[o] = (int32_t)(v < INT32_MIN ? INT32_MIN : (v > INT32_MAX ? INT32_MAX : v));
            }
            return;
        }
    }
#endif
    for (o = 0; o < channels; o++) {
        int32_t total = 0;
        int64_t delta;
        for (p = 0; p < hw; p++) {
            total += gy[o * hw + p];
        }
        delta = tt_scale_round(total, upd_mult[o], upd_shift[o] - gy_exp);
        bias[o] = (int32_t)tt_clamp64((int64_t)bias[o] - delta, INT32_MIN, INT32_MAX);
    }
}

/* A trained weight after its step: w - round(total m 2^-t), clamped to [-127, 127]. With the
 * 32 x 32-bit product's top word in one instruction (SMMUL, RISC-V's MULH: tt_mulhi) and t in
 * 33 .. 62 (the common case: a step of a few units from a large total), in 32-bit arithmetic,
 * as tt_conv_store's requantisation (the floors nest; |total m| < 2^62, so the top word is in
 * [-2^30, 2^30) and adding 2^30 makes the numerator of the unsigned shift non-negative). The
 * same value as tt_scale_round, bit for bit. */
static inline int8_t tt_stepped_weight(int32_t w, int32_t total, int32_t m, int32_t t) {
    int64_t delta;
#ifdef TT_MULHI
    if (t >= 33 && t <= 62) {
        int32_t sh = t - 32, v;
        uint32_t c = (1u << 30) + (1u << (sh - 1));
        v = w - ((int32_t)(((uint32_t)tt_mulhi(total, m) + c) >> sh) - ((int32_t)1 << (30 - sh)));
        return (int8_t)(v < -127 ? -127 : (v > 127 ? 127 : v));
    }
#endif
    delta = tt_scale_round(total, m, t);
    return (int8_t)tt_clamp64((int64_t)w - delta, -127, 127);
}

#ifndef TT_CORTEX_M
/* n trained weights of one output channel after their step (tt_stepped_weight), on a Linux
 * target: for t in 1 .. 62, round(total m 2^-t) = floor((total m + 2^(t-1) + 2^62) / 2^t) -
 * 2^(62-t) with an unsigned shift (|total m| < 2^62), as tt_conv_store requantises, without a
 * branch per weight: a loop the compiler vectorises. The same weights, bit for bit. */
static inline void tt_step_row(int8_t *wo, const int32_t *total, int32_t n, int32_t m,
                               int32_t t) {
    int32_t c;
    if (t >= 1 && t <= 62) {
        uint64_t offset = ((uint64_t)1 << 62) + ((uint64_t)1 << (t - 1));
        int64_t back = (int64_t)1 << (62 - t);
        for (c = 0; c < n; c++) {
            int64_t delta = (int64_t)((((uint64_t)((int64_t)total[c] * m)) + offset) >> t) - back;
            int64_t v = (int64_t)wo[c] - delta;
            wo[c] = (int8_t)(v < -127 ? -127 : (v > 127 ? 127 : v));
        }
        return;
    }
    for (c = 0; c < n; c++) {
        wo[c] = tt_stepped_weight(wo[c], total[c], m, t);
    }
}
#endif

#ifdef TT_DSP
/* int32 words the DSP weight update of a 1x1 convolution lays out on the stack (4 KiB). */
#define TT_UPDATE_WORDS 1024

/* n int8 values less zero as int16 pairs, as tt_conv_pointwise_dsp pairs channels: for each
 * block of four, (v0, v2) then (v1, v3) (SXTB16 and a subtraction of both halves); a tail of
 * one to three as (v0, v1) and (v2, 0). (n + 1) / 2 words. */
static void tt_pairs_s8(const int8_t *v, int32_t n, int32_t zero, int32_t *out) {
    int32_t zz = (int32_t)(((uint32_t)zero & 0xFFFFu) | ((uint32_t)zero << 16)), i = 0;
    for (; i + 4 <= n; i += 4) {
        int32_t a = tt_load4(v + i);
        *out++ = __ssub16(__sxtb16(a), zz);
        *out++ = __ssub16(tt_sxtb16_odd(a), zz);
    }
    for (; i < n; i += 2) {
        int32_t lo = v[i] - zero, hi = i + 1 < n ? v[i + 1] - zero : 0;
        *out++ = (int32_t)(((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16));
    }
}

/* The sum of n SMLADs of a[j] and b[j]: four a loop, the rest unrolled. */
static inline int32_t tt_smlad_sum(const int32_t *a, const int32_t *b, int32_t n) {
    int32_t s = 0, j = 0;
    for (; j + 4 <= n; j += 4) {
        s = __smlad(a[j], b[j], s);
        s = __smlad(a[j + 1], b[j + 1], s);
        s = __smlad(a[j + 2], b[j + 2], s);
        s = __smlad(a[j + 3], b[j + 3], s);
    }
    switch (n - j) {
    case 3:
        s = __smlad(a[j + 2], b[j + 2], s);
        /* fall through */
    case 2:
        s = __smlad(a[j + 1], b[j + 1], s);
        /* fall through */
    case 1:
        s = __smlad(a[j], b[j], s);
        break;
    default:
        break;
    }
    return s;
}

/* tt_stepped_weight's 32-bit case for n channels whose totals take `words` (a constant where
 * tt_step_few inlines it) SMLADs: the gradient's words stay in registers across the
 * channels, and the rounding's constants are computed once. */
TT_INLINE_ALWAYS
static void tt_step_words(int8_t *wo, const int32_t *a, const int32_t *gp, int32_t words,
                          int32_t n, int32_t m, int32_t t) {
    int32_t g0 = gp[0], g1 = words > 1 ? gp[1] : 0, g2 = words > 2 ? gp[2] : 0;
    int32_t g3 = words > 3 ? gp[3] : 0, g4 = words > 4 ? gp[4] : 0, g5 = words > 5 ? gp[5] : 0;
    int32_t sh = t - 32, back = (int32_t)1 << (30 - sh), c;
    uint32_t half = (1u << 30) + (1u << (sh - 1));
    for (c = 0; c < n; c++, a += words) {
        int32_t s = __smlad(a[0], g0, 0), v;
        s = words > 1 ? __smlad(a[1], g1, s) : s;
        s = words > 2 ? __smlad(a[2], g2, s) : s;
        s = words > 3 ? __smlad(a[3], g3, s) : s;
        s = words > 4 ? __smlad(a[4], g4, s) : s;
        s = words > 5 ? __smlad(a[5], g5, s) : s;
        v = __ssat(wo[c] + back - (int32_t)(((uint32_t)tt_smmul(s, m) + half) >> sh), 8);
        wo[c] = (int8_t)(v < -127 ? -127 : v);
    }
}

/* The updates of n channels of few pixels (1 .. 6 words) with t in 33 .. 62. */
TT_NOINLINE
static void tt_step_few(int8_t *wo, const int32_t *a, const int32_t *gp, int32_t words,
                        int32_t n, int32_t m, int32_t t) {
    switch (words) {
    case 1:
        tt_step_words(wo, a, gp, 1, n, m, t);
        break;
    case 2:
        tt_step_words(wo, a, gp, 2, n, m, t);
        break;
    case 3:
        tt_step_words(wo, a, gp, 3, n, m, t);
        break;
    case 4:
        tt_step_words(wo, a, gp, 4, n, m, t);
        break;
    case 5:
        tt_step_words(wo, a, gp, 5, n, m, t);
        break;
    default:
        tt_step_words(wo, a, gp, 6, n, m, t);
        break;
    }
}

/* The weight update of a 1x1 convolution on a core with the DSP extension: a block of the
 * trained channels' saved inputs, less the zero point, is laid out once as int16 pairs of
 * pixels (tt_pairs_s8), and each output channel's gradient row alike, so that one SMLAD adds
 * two products of a total. Returns 0 (nothing done) where not even two channels' layouts fit.
 * The same totals (each an int32, |total| <= hw 127 255) and updates as the direct loop, bit
 * for bit. */
TT_NOINLINE
static int32_t tt_update_weight_pointwise_dsp(const tt_conv_geom *g, const int8_t *gy,
                                              int32_t gy_exp, const int8_t *x_saved,
                                              int32_t x_zero, int8_t *w_train, int32_t k,
                                              const int32_t *upd_mult,
                                              const int32_t *upd_shift) {
    int32_t hw = g->out_h * g->out_w, words = (hw + 1) / 2;
    int32_t block = TT_UPDATE_WORDS / words - 1; /* channels laid out at a time */
    int32_t xp[TT_UPDATE_WORDS];
    int32_t *gp = xp + (TT_UPDATE_WORDS - words);
    int32_t c0, nb, c, o;
    if (block < 2) {
        return 0;
    }
    for (c0 = 0; c0 < k; c0 += nb) {
        nb = k - c0 < block ? k - c0 : block;
        for (c = 0; c < nb; c++) {
            tt_pairs_s8(x_saved + (c0 + c) * hw, hw, x_zero, xp + c * words);
        }
        for (o = 0; o < g->out_c; o++) {
            int32_t m = upd_mult[o], t = upd_shift[o] - gy_exp;
            int8_t *wo = w_train + o * k + c0;
            const int32_t *a = xp;
            tt_pairs_s8(gy + o * hw, hw, 0, gp);
            if (t >= 33 && t <= 62 && words <= 6) {
                tt_step_few(wo, xp, gp, words, nb, m, t);
                continue;
            }
            for (c = 0; c < nb; c++, a += words) {
                wo[c] = tt_stepped_weight(wo[c], tt_smlad_sum(a, gp, words), m, t);
            }
        }
    }
    return 1;
}
#endif

#ifndef TT_CORTEX_M
/* The weight update of a 1x1 convolution on few pixels: the saved inputs x - x_zero with the
 * trained channels as the contiguous axis, so that an output channel's k totals
 * sum_p gy[o, p] (x[c, p] - x_zero) are runs over the channels that the compiler vectorises.
 * Same totals, same updates, bit for bit. */
TT_VECTOR_CLONES
static void tt_update_weight_pointwise_few(const tt_conv_geom *g, const int8_t *gy,
                                           int32_t gy_exp, const int8_t *x_saved,
                                           int32_t x_zero, int8_t *w_train, int32_t k,
                                           const int32_t *upd_mult, const int32_t *upd_shift) {
    int32_t hw = g->out_h * g->out_w;
    int16_t xt[TT_FEW_VALUES]; /* [pixel][trained input channel] */
    int32_t total[TT_FEW_VALUES];
    int32_t o, c, p;
    for (c = 0; c < k; c++) {
        for (p = 0; p < hw; p++) {
            xt[p * k + c] = (int16_t)(x_saved[c * hw + p] - x_zero);
        }
    }
    for (o = 0; o < g->out_c; o++) {
        int8_t *wo = w_train + o * k;
        for (c = 0; c < k; c++) {
            total[c] = 0;
        }
        for (p = 0; p < hw; p++) {
            int32_t gv = gy[o * hw + p];
            const int16_t *xr = xt + p * k;
            if (gv == 0) {
                continue;
            }
            for (c = 0; c < k; c++) { /* |product| <= 127 255 */
                total[c] += xr[c] * gv;
            }
        }
        tt_step_row(wo, total, k, upd_mult[o], upd_shift[o] - gy_exp);
    }
}
#endif

TT_VECTOR_CLONES
void tt_conv2d_update_weight(const tt_conv_geom *g, const int8_t *gy, int32_t gy_exp,
                             const int8_t *x_saved, int32_t x_zero, int8_t *w_train,
                             int32_t k, const int32_t *upd_mult, const int32_t *upd_shift) {
    int32_t kk = tt_taps(g);
    int32_t cg = g->in_c / g->groups;
    int32_t og = g->out_c / g->groups;
    int32_t depthwise = tt_is_depthwise(g);
    int32_t n_out = depthwise ? k : g->out_c;
    int32_t n_in = depthwise ? 1 : k;
    int32_t o, ci, ky, kx, oy, ox;
#ifndef TT_CORTEX_M
    if (tt_is_pointwise(g) &&
        g->out_h * g->out_w <= TT_CHANNELS_LAST_PIXELS &&
        k * g->out_h * g->out_w <= TT_FEW_VALUES) {
        tt_update_weight_pointwise_few(g, gy, gy_exp, x_saved, x_zero, w_train, k, upd_mult,
                                       upd_shift);
        return;
    }
#endif
#ifdef TT_DSP
    if (tt_is_pointwise(g) && tt_update_weight_pointwise_dsp(g, gy, gy_exp, x_saved, x_zero,
                                                             w_train, k, upd_mult, upd_shift)) {
        return;
    }
#endif
    if (tt_is_pointwise(g)) {
        int32_t hw = g->out_h * g->out_w, p;
        for (o = 0; o < n_out; o++) { /* contiguous dot products: same integer totals */
            const int8_t *go = gy + o * hw;
#ifdef TT_DSP
            /* sum gy (x - x_zero) = sum gy x - x_zero sum gy, four pixels per two SMLADs
             * (pixels 0 and 2 paired in one, 1 and 3 in the other) */
            int32_t gsum = 0;
            for (p = 0; p < hw; p++) {
                gsum += go[p];
            }
#endif
            for (ci = 0; ci < n_in; ci++) {
                const int8_t *xc = x_saved + ci * hw;
                int8_t *wp = w_train + o * n_in + ci;
                int32_t total = 0;
                p = 0;
#ifdef TT_DSP
                total = -x_zero * gsum;
                for (; p + 4 <= hw; p += 4) {
                    int32_t gv = tt_load4(go + p), xv = tt_load4(xc + p);
                    total = __smlad(__sxtb16(gv), __sxtb16(xv), total);
                    total = __smlad(tt_sxtb16_odd(gv), tt_sxtb16_odd(xv), total);
                }
                for (; p < hw; p++) {
                    total += go[p] * xc[p];
                }
#endif
                for (; p < hw; p++) {
                    total += go[p] * ((int32_t)xc[p] - x_zero);
                }
                *wp = tt_stepped_weight(*wp, total, upd_mult[o], upd_shift[o] - gy_exp);
            }
        }
        return;
    }
    for (o = 0; o < n_out; o++) {
        const int8_t *go = gy + o * g->out_h * g->out_w;
        int32_t c0 = depthwise ? o : (o / og) * cg;
        for (ci = 0; ci < n_in; ci++) {
            const int8_t *xc = x_saved + (c0 + ci) * g->in_h * g->in_w;
            for (ky = 0; ky < g->kernel; ky++) {
                for (kx = 0; kx < g->kernel_w; kx++) {
                    int32_t total = 0;
                    int8_t *wp = w_train + (o * n_in + ci) * kk + ky * g->kernel_w + kx;
                    for (oy = 0; oy < g->out_h; oy++) {
                        int32_t iy = oy * g->stride + ky - g->pad_top;
                        if (iy < 0 || iy >= g->in_h) {
                            continue;
                        }
                        for (ox = 0; ox < g->out_w; ox++) {
                            int32_t ix = ox * g->stride_w + kx - g->pad_left;
                            if (ix < 0 || ix >= g->in_w) {
                                continue;
                            }
                            total += go[oy * g->out_w + ox] * (xc[iy * g->in_w + ix] - x_zero);
                        }
                    }
                    *wp = tt_stepped_weight(*wp, total, upd_mult[o], upd_shift[o] - gy_exp);
                }
            }
        }
    }
}
