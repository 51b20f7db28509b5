/* Forward kernels: int8 convolution, add, global average pooling. */
#include "tt_arith.h"
#include "tt_int8.h"

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
                        int32_t iy = oy * g->stride + ky - g->pad;
                        if (iy < 0 || iy >= g->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < g->kernel; kx++) {
                            int32_t ix = ox * g->stride + kx - g->pad;
                            if (ix < 0 || ix >= g->in_w) {
                                continue;
                            }
                            acc += (xc[iy * g->in_w + ix] - q->x_zero) *
                                   tt_weight_at(g, w, o, ci, ky * g->kernel + kx);
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

void tt_add_s8(const int8_t *a, const int8_t *b, int32_t n, int32_t a_zero, int32_t b_zero,
               int32_t a_mult, int32_t b_mult, int32_t shift, int32_t y_zero, int8_t *y) {
    int32_t i;
    for (i = 0; i < n; i++) {
        int64_t acc = (int64_t)(a[i] - a_zero) * a_mult + (int64_t)(b[i] - b_zero) * b_mult;
        y[i] = (int8_t)tt_clamp64(y_zero + tt_rshift_round(acc, shift), -128, 127);
    }
}

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
