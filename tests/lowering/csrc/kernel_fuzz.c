/*
 * Test driver: the convolution kernels on a few hundred random geometries and inputs, drawn
 * from a fixed-seed generator, one line per case with a hash of every output. It reads nothing
 * and needs only printf, so the same program runs on the host and on bare-metal targets under
 * QEMU; each target takes its own paths through the kernels (vectorised loops on Linux,
 * register-blocked ones with -DTT_CORTEX_M=1, SMLAD ones with the DSP extension), and every
 * build must print the same lines (tests/lowering/test_kernel_paths.py).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tt_int8.h"

#define MAX_VALUES 40960
#define MAX_CHANNELS 1024

static uint32_t state = 12345u;

static uint32_t next(void) { /* xorshift32 */
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
}

/* A uniform integer in lo .. hi. */
static int32_t draw(int32_t lo, int32_t hi) {
    return lo + (int32_t)(next() % (uint32_t)(hi - lo + 1));
}

static uint32_t hash(uint32_t h, const void *data, int32_t n) { /* FNV-1a */
    const uint8_t *p = (const uint8_t *)data;
    int32_t i;
    for (i = 0; i < n; i++) {
        h = (h ^ p[i]) * 16777619u;
    }
    return h;
}

static int8_t x[MAX_VALUES], y[MAX_VALUES], gy[MAX_VALUES], gx[MAX_VALUES], chan[MAX_VALUES];
static int8_t w_train[MAX_VALUES], w_frozen[MAX_VALUES];
static uint8_t mask[MAX_VALUES / 8 + 1];
static int32_t bias[MAX_CHANNELS], mult[MAX_CHANNELS], shift[MAX_CHANNELS];
static int32_t w_mult[MAX_CHANNELS];

static void fill(int8_t *a, int32_t n, int32_t lo, int32_t hi) {
    int32_t i;
    for (i = 0; i < n; i++) {
        a[i] = (int8_t)draw(lo, hi);
    }
}

/* A random geometry of one of the kinds the kernels distinguish; returns 0 when it is too
 * large for the buffers. */
static int32_t geometry(int32_t kind, tt_conv_geom *g) {
    int32_t pad;
    g->stride = 1;
    g->groups = 1;
    if (kind == 0) { /* 1x1 */
        g->kernel = 1;
        g->in_c = draw(1, 48);
        g->out_c = draw(1, draw(0, 3) ? 64 : 600);
        g->in_h = draw(1, draw(0, 3) ? 20 : 30);
        g->in_w = draw(1, draw(0, 3) ? 20 : 30);
        if (draw(0, 2) == 0) {
            g->in_h = g->in_w = draw(1, 3);
        }
    } else if (kind == 1) { /* depthwise */
        g->kernel = 2 * draw(1, 3) + 1;
        g->stride = draw(1, 2);
        g->in_c = g->out_c = g->groups = draw(2, 96);
        g->in_h = draw(1, 24);
        g->in_w = draw(1, 24);
    } else { /* dense, e.g. the stem */
        g->kernel = draw(0, 1) ? 3 : 2 * draw(0, 3) + 1;
        g->stride = draw(1, 2);
        g->in_c = draw(1, 4);
        g->out_c = draw(1, 24);
        g->in_h = draw(1, 24);
        g->in_w = draw(1, 24);
    }
    g->kernel_w = g->kernel;
    g->stride_w = g->stride;
    if (kind != 0 && draw(0, 3) == 0) { /* a rectangular kernel or stride (DS-CNN's 10x4) */
        g->kernel_w = draw(1, 5);
        g->stride_w = draw(1, 2);
    }
    pad = g->kernel / 2;
    g->pad_top = draw(0, 1) ? pad : draw(0, pad);
    pad = g->kernel_w / 2;
    g->pad_left = draw(0, 1) ? pad : draw(0, pad);
    g->out_h = (g->in_h + 2 * g->pad_top - g->kernel) / g->stride + 1;
    g->out_w = (g->in_w + 2 * g->pad_left - g->kernel_w) / g->stride_w + 1;
    if (g->out_h < 1 || g->out_w < 1) {
        return 0;
    }
    return g->in_c * g->in_h * g->in_w <= MAX_VALUES &&
           g->out_c * g->out_h * g->out_w <= MAX_VALUES &&
           g->out_c * (g->in_c / g->groups) * g->kernel * g->kernel_w <= MAX_VALUES;
}

int main(void) {
    int32_t n, i;
    for (n = 0; n < 400;) {
        tt_conv_geom g;
        tt_weight w;
        tt_requant q;
        tt_grad dst;
        int32_t kind = n % 3, cg, kk, dw, n_in, n_out, n_w, trained, gy_exp, gx_exp;
        int32_t x_zero;
        uint32_t h = 2166136261u;
        if (!geometry(kind, &g)) {
            continue;
        }
        cg = g.in_c / g.groups;
        kk = g.kernel * g.kernel_w;
        dw = g.groups > 1;
        n_in = g.in_c * g.in_h * g.in_w;
        n_out = g.out_c * g.out_h * g.out_w;
        n_w = g.out_c * cg * kk;
        /* the trained part: leading output channels of a depthwise weight, leading input
         * channels of every output channel's row otherwise */
        w.k = draw(0, 3) == 0 ? (dw ? g.out_c : cg) : draw(0, dw ? g.out_c : cg);
        trained = dw ? w.k * kk : g.out_c * w.k * kk;
        fill(w_train, trained, -127, 127);
        fill(w_frozen, n_w - trained, -127, 127);
        w.train = w_train;
        w.frozen = w_frozen;
        x_zero = draw(-128, 127);
        fill(x, n_in, -128, 127);
        for (i = 0; i < g.out_c; i++) {
            bias[i] = draw(-50000, 50000);
            mult[i] = draw(1 << 30, 0x7fffffff);
            /* mostly the right shifts of 32 .. 62 a Cortex-M takes in 32 bits, some others */
            shift[i] = draw(0, 7) ? draw(36, 48) : draw(-2, 62);
            w_mult[i] = draw(1, (1 << 15) - 1);
        }
        q.x_zero = x_zero;
        q.y_zero = draw(-20, 20);
        q.act_min = draw(0, 1) ? -128 : q.y_zero;
        q.act_max = draw(0, 1) ? 127 : draw(q.act_min, 127);
        q.mult = mult;
        q.shift = shift;

        tt_conv2d_s8(&g, x, &w, bias, &q, y, draw(0, 1) ? mask : NULL);
        h = hash(h, y, n_out);
        h = hash(h, mask, (n_out + 7) / 8);
        memset(mask, 0, sizeof mask);

        if (dw && g.out_h * g.out_w <= g.in_h * g.in_w) { /* in place */
            /* a mask where its contract allows one: a channel's outputs whole bytes of it */
            memcpy(gx, x, (size_t)n_in);
            tt_conv2d_inplace_s8(&g, gx, &w, bias, &q, chan, (g.out_h * g.out_w) % 8 ? NULL : mask);
            h = hash(h, gx, n_out);
            h = hash(h, mask, (n_out + 7) / 8);
            memset(mask, 0, sizeof mask);
        }

        fill(gy, n_out, -127, 127);
        gy_exp = draw(-30, 5);
        gx_exp = draw(-60, 20);
        fill(gx, n_in, -127, 127);
        dst.data = gx;
        dst.exp = &gx_exp;
        dst.accumulate = draw(0, 1);
        tt_conv2d_grad_input(&g, gy, gy_exp, &w, w_mult, draw(0, 24), &dst);
        h = hash(h, gx, n_in);
        h = hash(h, &gx_exp, 4);

        if (w.k > 0) {
            for (i = 0; i < g.out_c; i++) {
                mult[i] = draw(1 << 30, 0x7fffffff);
                /* steps of many units (8 .. 24), and the few units of training's common
                 * right shifts of 33 .. 62, which a Cortex-M4/M7 takes in 32 bits */
                shift[i] = gy_exp + (draw(0, 1) ? draw(8, 24) : draw(30, 64));
            }
            tt_conv2d_update_weight(&g, gy, gy_exp, x, x_zero, w_train, w.k, mult, shift);
            h = hash(h, w_train, trained);
        }
        printf("case %d: %dx%dx%d -> %dx%dx%d k%d s%d g%d t%d: %08lx\n", (int)n, (int)g.in_c,
               (int)g.in_h, (int)g.in_w, (int)g.out_c, (int)g.out_h, (int)g.out_w,
               (int)g.kernel, (int)g.stride, (int)g.groups, (int)w.k, (unsigned long)h);
        n++;
    }
    return 0;
}
