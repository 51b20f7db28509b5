/* The ops of TinyTL lite residual branches: average pooling, bilinear upsampling, GroupNorm
 * (float32 statistics and parameters, int8 input and output), forward and backward. */
#include <math.h>

#include "tt_arith.h"
#include "tt_int8.h"

void tt_avgpool_s8(const int8_t *x, int32_t channels, int32_t in_h, int32_t in_w, int32_t ratio,
                   int32_t ratio_w, int32_t x_zero, int32_t mult, int32_t shift, int32_t y_zero,
                   int8_t *y) {
    int32_t oh = in_h / ratio, ow = in_w / ratio_w;
    int32_t c, oy, ox, a, b;
    for (c = 0; c < channels; c++) {
        const int8_t *xc = x + c * in_h * in_w;
        for (oy = 0; oy < oh; oy++) {
            for (ox = 0; ox < ow; ox++) {
                int32_t acc = 0;
                for (a = 0; a < ratio; a++) {
                    for (b = 0; b < ratio_w; b++) {
                        acc += xc[(oy * ratio + a) * in_w + ox * ratio_w + b] - x_zero;
                    }
                }
                y[(c * oh + oy) * ow + ox] =
                    (int8_t)tt_clamp64(y_zero + tt_scale_round(acc, mult, shift), -128, 127);
            }
        }
    }
}

void tt_avgpool_grad_input(const int8_t *gy, int32_t gy_exp, int32_t channels, int32_t in_h,
                           int32_t in_w, int32_t ratio, int32_t ratio_w, int32_t area_mult,
                           int32_t frac_bits, const tt_grad *gx) {
    int32_t oh = in_h / ratio, ow = in_w / ratio_w;
    int32_t c, iy, ix;
    tt_emit st;
    tt_emit_begin(&st, gx, gy_exp - frac_bits, tt_bitlen((uint64_t)TT_GRAD_MAX * (uint64_t)area_mult));
    do {
        for (c = 0; c < channels; c++) {
            for (iy = 0; iy < in_h; iy++) {
                for (ix = 0; ix < in_w; ix++) {
                    int32_t oy = iy / ratio, ox = ix / ratio_w;
                    int64_t s = 0;
                    if (oy < oh && ox < ow) {
                        s = (int64_t)gy[(c * oh + oy) * ow + ox] * area_mult;
                    }
                    tt_emit_put(&st, gx, (c * in_h + iy) * in_w + ix, s);
                }
            }
        }
    } while (tt_emit_advance(&st));
    tt_emit_end(&st, gx);
}

void tt_upsample_s8(const int8_t *x, int32_t channels, const tt_interp_axis *ay,
                    const tt_interp_axis *ax, int32_t x_zero, int32_t mult, int32_t shift,
                    int32_t y_zero, int8_t *y) {
    int32_t c, oy, ox;
    for (c = 0; c < channels; c++) {
        const int8_t *xc = x + c * ay->n_in * ax->n_in;
        for (oy = 0; oy < ay->n_out; oy++) {
            const int8_t *r0 = xc + ay->i0[oy] * ax->n_in;
            const int8_t *r1 = xc + ay->i1[oy] * ax->n_in;
            for (ox = 0; ox < ax->n_out; ox++) {
                int32_t a0 = ax->i0[ox], a1 = ax->i1[ox];
                int32_t top = ax->w0[ox] * (r0[a0] - x_zero) + ax->w1[ox] * (r0[a1] - x_zero);
                int32_t bottom = ax->w0[ox] * (r1[a0] - x_zero) + ax->w1[ox] * (r1[a1] - x_zero);
                int32_t acc = ay->w0[oy] * top + ay->w1[oy] * bottom;
                y[(c * ay->n_out + oy) * ax->n_out + ox] =
                    (int8_t)tt_clamp64(y_zero + tt_scale_round(acc, mult, shift), -128, 127);
            }
        }
    }
}

/* The weight that output o of an axis gives input i. */
static int32_t tt_interp_weight(const tt_interp_axis *a, int32_t o, int32_t i) {
    return (a->i0[o] == i ? a->w0[o] : 0) + (a->i1[o] == i ? a->w1[o] : 0);
}

/* The largest total weight that one input of an axis receives. */
static int64_t tt_interp_colmax(const tt_interp_axis *a) {
    int64_t best = 0;
    int32_t i, o;
    for (i = 0; i < a->n_in; i++) {
        int64_t total = 0;
        for (o = a->lo[i]; o < a->hi[i]; o++) {
            total += tt_interp_weight(a, o, i);
        }
        if (total > best) {
            best = total;
        }
    }
    return best;
}

void tt_upsample_grad_input(const int8_t *gy, int32_t gy_exp, int32_t channels,
                            const tt_interp_axis *ay, const tt_interp_axis *ax,
                            int32_t frac_bits, const tt_grad *gx) {
    int32_t c, i, j, oy, ox;
    tt_emit st;
    uint64_t bound = (uint64_t)TT_GRAD_MAX * (uint64_t)tt_interp_colmax(ay) *
                     (uint64_t)tt_interp_colmax(ax);
    tt_emit_begin(&st, gx, gy_exp - 2 * frac_bits, tt_bitlen(bound));
    do {
        for (c = 0; c < channels; c++) {
            const int8_t *gc = gy + c * ay->n_out * ax->n_out;
            for (i = 0; i < ay->n_in; i++) {
                for (j = 0; j < ax->n_in; j++) {
                    int64_t s = 0;
                    for (oy = ay->lo[i]; oy < ay->hi[i]; oy++) {
                        int32_t wy = tt_interp_weight(ay, oy, i);
                        int32_t row = 0;
                        for (ox = ax->lo[j]; ox < ax->hi[j]; ox++) {
                            row += tt_interp_weight(ax, ox, j) * gc[oy * ax->n_out + ox];
                        }
                        s += (int64_t)wy * row;
                    }
                    tt_emit_put(&st, gx, (c * ay->n_in + i) * ax->n_in + j, s);
                }
            }
        }
    } while (tt_emit_advance(&st));
    tt_emit_end(&st, gx);
}

/* ---- GroupNorm ------------------------------------------------------------------------- */

static float tt_gn_xhat(const tt_groupnorm *p, int8_t x, float mean, float rstd) {
    float xf = (float)(x - p->x_zero);
    float d;
    xf = p->x_scale * xf;
    d = xf - mean;
    return d * rstd;
}

void tt_groupnorm_f32(const int8_t *x, const tt_groupnorm *p, const float *gamma,
                      const float *beta, float *stats, int8_t *y, uint8_t *mask) {
    int32_t cg = p->channels / p->groups;
    int32_t n = cg * p->hw;
    float fn = (float)n;
    int32_t g, i;
    if (mask) {
        for (i = 0; i < (p->channels * p->hw + 7) / 8; i++) {
            mask[i] = 0;
        }
    }
    for (g = 0; g < p->groups; g++) {
        const int8_t *xg = x + g * n;
        int32_t s1 = 0;
        int64_t s2 = 0;
        float mean, var, t, rstd;
        for (i = 0; i < n; i++) {
            int32_t v = xg[i] - p->x_zero;
            s1 += v;
            s2 += (int64_t)v * v;
        }
        mean = (float)s1;
        mean = mean / fn;
        mean = p->x_scale * mean;
        var = (float)((int64_t)n * s2 - (int64_t)s1 * s1);
        var = var / fn;
        var = var / fn;
        var = var * p->x_scale;
        var = var * p->x_scale;
        t = var + p->eps;
        t = sqrtf(t);
        rstd = 1.0f / t;
        stats[2 * g] = mean;
        stats[2 * g + 1] = rstd;
        for (i = 0; i < n; i++) {
            int32_t c = g * cg + i / p->hw;
            int32_t idx = g * n + i;
            float v = gamma[c] * tt_gn_xhat(p, xg[i], mean, rstd);
            int64_t q;
            if (beta) {
                v = v + beta[c];
            }
            v = v / p->y_scale;
            v = v < -0x1p30f ? -0x1p30f : (v > 0x1p30f ? 0x1p30f : v);
            q = (int64_t)tt_round_half_up_f32(v) + p->y_zero;
            if (mask && q >= p->act_min && q <= p->act_max) {
                mask[idx >> 3] = (uint8_t)(mask[idx >> 3] | (1u << (idx & 7)));
            }
            y[idx] = (int8_t)tt_clamp64(q, p->act_min, p->act_max);
        }
    }
}

/* The gradients of one channel's scale and shift: d_gamma, d_beta (float32, fixed order). */
static void tt_gn_channel_grads(const int8_t *gy, const int8_t *x, const tt_groupnorm *p,
                                int32_t c, float ge, float mean, float rstd, float *d_gamma,
                                float *d_beta) {
    int32_t k;
    int32_t sum_p = 0, sum_q = 0;
    float a, b;
    for (k = 0; k < p->hw; k++) {
        int32_t idx = c * p->hw + k;
        sum_p += gy[idx] * (x[idx] - p->x_zero);
        sum_q += gy[idx];
    }
    *d_beta = (float)sum_q * ge;
    a = p->x_scale * (float)sum_p;
    b = mean * (float)sum_q;
    a = a - b;
    a = a * rstd;
    *d_gamma = a * ge;
}

void tt_groupnorm_f32_backward(const int8_t *gy, int32_t gy_exp, const int8_t *x,
                               const tt_groupnorm *p, float *gamma, float *beta,
                               const float *stats, float lr, int8_t *gx, int32_t *gx_exp) {
    int32_t cg = p->channels / p->groups;
    float fn = (float)(cg * p->hw);
    float ge = tt_exp2_sat(gy_exp);
    float d_gamma, d_beta;
    int32_t g, c, k, pass;
    if (gx) {
        float largest = 0.0f, scale = 1.0f;
        int32_t e = 0;
        for (pass = 0; pass < 2; pass++) {
            for (g = 0; g < p->groups; g++) {
                float mean = stats[2 * g], rstd = stats[2 * g + 1];
                float sg = 0.0f, sgx = 0.0f, a, b;
                for (c = g * cg; c < (g + 1) * cg; c++) {
                    float u, v;
                    tt_gn_channel_grads(gy, x, p, c, ge, mean, rstd, &d_gamma, &d_beta);
                    u = gamma[c] * d_beta;
                    v = gamma[c] * d_gamma;
                    sg = c == g * cg ? u : sg + u;
                    sgx = c == g * cg ? v : sgx + v;
                }
                a = sg / fn;
                b = sgx / fn;
                for (c = g * cg; c < (g + 1) * cg; c++) {
                    for (k = 0; k < p->hw; k++) {
                        int32_t idx = c * p->hw + k;
                        float mf = (float)gy[idx] * ge;
                        float u = gamma[c] * mf;
                        float t = tt_gn_xhat(p, x[idx], mean, rstd) * b;
                        float dx;
                        u = u - a;
                        u = u - t;
                        dx = u * rstd;
                        if (pass == 0) {
                            float mag = dx < 0.0f ? -dx : dx;
                            if (mag > largest) {
                                largest = mag;
                            }
                        } else {
                            gx[idx] = (int8_t)tt_round_half_up_f32(dx * scale);
                        }
                    }
                }
            }
            if (pass == 0) {
                e = tt_block_exp_f32(largest);
                scale = tt_pow2f(-e);
            }
        }
        *gx_exp = e;
    }
    for (g = 0; g < p->groups; g++) {
        for (c = g * cg; c < (g + 1) * cg; c++) {
            float t;
            tt_gn_channel_grads(gy, x, p, c, ge, stats[2 * g], stats[2 * g + 1], &d_gamma,
                                &d_beta);
            t = lr * d_gamma;
            gamma[c] = gamma[c] - t;
            if (beta) {
                t = lr * d_beta;
                beta[c] = beta[c] - t;
            }
        }
    }
}
