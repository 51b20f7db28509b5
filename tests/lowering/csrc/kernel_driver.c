/*
 * Test driver: runs one kernel (named by argv[1]) on arrays read from stdin and writes its
 * outputs to stdout. Each array is framed as int32 dtype code, int32 element count, then the
 * raw little-endian elements (see tests/lowering/harness.py). Every array gets its own exactly
 * sized allocation so that the address sanitizer sees any access outside it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt_int8.h"

enum { DT_I8 = 0, DT_I32 = 1, DT_F32 = 2, DT_U8 = 3 };

static const size_t dt_size[] = {1, 4, 4, 1};

static void fail(const char *what) {
    fprintf(stderr, "kernel_driver: %s\n", what);
    exit(2);
}

static void *read_array(int32_t dtype, int32_t *count) {
    int32_t head[2];
    void *data;
    if (fread(head, sizeof head, 1, stdin) != 1) {
        fail("truncated input");
    }
    if (head[0] != dtype) {
        fail("unexpected dtype");
    }
    *count = head[1];
    data = malloc(head[1] ? (size_t)head[1] * dt_size[dtype] : 1);
    if (!data) {
        fail("out of memory");
    }
    if (head[1] && fread(data, dt_size[dtype], (size_t)head[1], stdin) != (size_t)head[1]) {
        fail("truncated array");
    }
    return data;
}

static void write_array(int32_t dtype, const void *data, int32_t count) {
    int32_t head[2];
    head[0] = dtype;
    head[1] = count;
    fwrite(head, sizeof head, 1, stdout);
    if (count) {
        fwrite(data, dt_size[dtype], (size_t)count, stdout);
    }
}

static int8_t *i8(int32_t *n) { return (int8_t *)read_array(DT_I8, n); }
static int32_t *i32(int32_t *n) { return (int32_t *)read_array(DT_I32, n); }
static float *f32(int32_t *n) { return (float *)read_array(DT_F32, n); }
static uint8_t *u8(int32_t *n) { return (uint8_t *)read_array(DT_U8, n); }

static tt_conv_geom read_geom(void) {
    int32_t n;
    int32_t *v = i32(&n);
    tt_conv_geom g;
    if (n != 13) {
        fail("a geometry has 13 fields");
    }
    g.in_c = v[0];
    g.in_h = v[1];
    g.in_w = v[2];
    g.out_c = v[3];
    g.out_h = v[4];
    g.out_w = v[5];
    g.kernel = v[6];
    g.stride = v[7];
    g.pad_top = v[8];
    g.pad_left = v[9];
    g.groups = v[10];
    g.kernel_w = v[11];
    g.stride_w = v[12];
    free(v);
    return g;
}

/* A split weight: train (may be empty), frozen (may be empty), k. */
static tt_weight read_weight(int8_t **train, int8_t **frozen) {
    int32_t n;
    int32_t *k;
    tt_weight w;
    *train = i8(&n);
    w.train = n ? *train : NULL;
    *frozen = i8(&n);
    w.frozen = n ? *frozen : NULL;
    k = i32(&n);
    w.k = k[0];
    free(k);
    return w;
}

static int32_t scalar(void) {
    int32_t n;
    int32_t *v = i32(&n);
    int32_t out = v[0];
    free(v);
    return out;
}

static float scalar_f32(void) {
    int32_t n;
    float *v = f32(&n);
    float out = v[0];
    free(v);
    return out;
}

static void run_conv2d_s8(void) {
    int32_t n, nx, nb, with_mask, n_out;
    tt_conv_geom g = read_geom();
    int8_t *x = i8(&nx);
    int8_t *train, *frozen;
    tt_weight w = read_weight(&train, &frozen);
    int32_t *bias = i32(&nb);
    int32_t *p = i32(&n); /* x_zero, y_zero, act_min, act_max */
    int32_t *mult = i32(&n);
    int32_t *shift = i32(&n);
    tt_requant q;
    int8_t *y;
    uint8_t *mask;
    with_mask = scalar();
    q.x_zero = p[0];
    q.y_zero = p[1];
    q.act_min = p[2];
    q.act_max = p[3];
    q.mult = mult;
    q.shift = shift;
    n_out = g.out_c * g.out_h * g.out_w;
    y = malloc((size_t)n_out);
    mask = malloc((size_t)(n_out + 7) / 8);
    tt_conv2d_s8(&g, x, &w, bias, &q, y, with_mask ? mask : NULL);
    write_array(DT_I8, y, n_out);
    write_array(DT_U8, mask, with_mask ? (n_out + 7) / 8 : 0);
    free(x), free(train), free(frozen), free(bias), free(p), free(mult), free(shift);
    free(y), free(mask);
}

static void run_add_s8(void) {
    int32_t na, nb, n;
    int8_t *a = i8(&na);
    int8_t *b = i8(&nb);
    int32_t *p = i32(&n); /* a_zero, b_zero, a_mult, b_mult, shift, y_zero */
    int8_t *y = malloc((size_t)na);
    tt_add_s8(a, b, na, p[0], p[1], p[2], p[3], p[4], p[5], y);
    write_array(DT_I8, y, na);
    free(a), free(b), free(p), free(y);
}

static void run_add_act_s8(void) {
    int32_t na, nb, n;
    int8_t *a = i8(&na);
    int8_t *b = i8(&nb);
    int32_t *p = i32(&n); /* a_zero, b_zero, a_mult, b_mult, shift, y_zero, act_min, act_max */
    int8_t *y = malloc((size_t)na);
    uint8_t *mask = malloc((size_t)(na + 7) / 8);
    tt_add_act_s8(a, b, na, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], y, mask);
    write_array(DT_I8, y, na);
    write_array(DT_U8, mask, (na + 7) / 8);
    free(a), free(b), free(p), free(y), free(mask);
}

static void run_gap_s8(void) {
    int32_t nx, n;
    int8_t *x = i8(&nx);
    int32_t *p = i32(&n); /* channels, hw, x_zero, mult, shift, y_zero */
    int8_t *y = malloc((size_t)p[0]);
    tt_gap_s8(x, p[0], p[1], p[2], p[3], p[4], p[5], y);
    write_array(DT_I8, y, p[0]);
    free(x), free(p), free(y);
}

static void run_linear_f32(void) {
    int32_t nx, nw, nb;
    int8_t *x = i8(&nx);
    int32_t x_zero = scalar();
    float x_scale = scalar_f32();
    float *w = f32(&nw);
    float *b = f32(&nb);
    float *logits = malloc((size_t)nb * sizeof(float));
    tt_linear_f32(x, nx, x_zero, x_scale, w, b, nb, logits);
    write_array(DT_F32, logits, nb);
    free(x), free(w), free(b), free(logits);
}

static void run_softmax_xent_grad(void) {
    int32_t n;
    float *logits = f32(&n);
    int32_t label = scalar();
    float *grad = malloc((size_t)n * sizeof(float));
    tt_softmax_xent_grad(logits, n, label, grad);
    write_array(DT_F32, grad, n);
    tt_softmax_xent_grad(logits, n, label, logits); /* in place gives the same */
    write_array(DT_F32, logits, n);
    free(logits), free(grad);
}

static void run_linear_f32_backward(void) {
    int32_t nx, nw, nb, ng;
    int8_t *x = i8(&nx);
    int32_t x_zero = scalar();
    float x_scale = scalar_f32();
    float *w = f32(&nw);
    float *b = f32(&nb);
    float *grad = f32(&ng);
    float lr = scalar_f32();
    int32_t want = scalar();
    int8_t *gx = malloc((size_t)nx);
    int32_t gx_exp = 0;
    tt_linear_f32_backward(x, nx, x_zero, x_scale, w, b, nb, grad, lr, want ? gx : NULL,
                           &gx_exp);
    write_array(DT_F32, w, nw);
    write_array(DT_F32, b, nb);
    write_array(DT_I8, gx, want ? nx : 0);
    write_array(DT_I32, &gx_exp, 1);
    free(x), free(w), free(b), free(grad), free(gx);
}

static void run_grad_mask(void) {
    int32_t n, nm;
    int8_t *g = i8(&n);
    uint8_t *mask = u8(&nm);
    tt_grad_mask(g, mask, n);
    write_array(DT_I8, g, n);
    free(g), free(mask);
}

/* The destination of a gradient: data, exponent, accumulate flag. */
static tt_grad read_grad(int32_t *exp_store) {
    int32_t n;
    tt_grad dst;
    dst.data = i8(&n);
    *exp_store = scalar();
    dst.exp = exp_store;
    dst.accumulate = scalar();
    return dst;
}

static void write_grad(const tt_grad *g, int32_t n) {
    write_array(DT_I8, g->data, n);
    write_array(DT_I32, g->exp, 1);
}

static void run_conv2d_grad_input(void) {
    int32_t n, ngy, e;
    tt_conv_geom g = read_geom();
    int8_t *gy = i8(&ngy);
    int32_t gy_exp = scalar();
    int8_t *train, *frozen;
    tt_weight w = read_weight(&train, &frozen);
    int32_t *w_mult = i32(&n);
    int32_t frac_bits = scalar();
    tt_grad dst = read_grad(&e);
    tt_conv2d_grad_input(&g, gy, gy_exp, &w, w_mult, frac_bits, &dst);
    write_grad(&dst, g.in_c * g.in_h * g.in_w);
    free(gy), free(train), free(frozen), free(w_mult), free(dst.data);
}

static void run_gap_grad_input(void) {
    int32_t n, e;
    int8_t *gy = i8(&n);
    int32_t *p = i32(&n); /* gy_exp, channels, hw, hw_mult, frac_bits */
    tt_grad dst = read_grad(&e);
    tt_gap_grad_input(gy, p[0], p[1], p[2], p[3], p[4], &dst);
    write_grad(&dst, p[1] * p[2]);
    free(gy), free(p), free(dst.data);
}

static void run_grad_accumulate(void) {
    int32_t n, e;
    int8_t *g = i8(&n);
    int32_t g_exp = scalar();
    tt_grad dst = read_grad(&e);
    tt_grad_accumulate(g, g_exp, n, &dst);
    write_grad(&dst, n);
    free(g), free(dst.data);
}

static void run_act_table_s8(void) {
    int32_t n, nt;
    int8_t *pre = i8(&n);
    int8_t *table = i8(&nt);
    int8_t *y = malloc((size_t)n);
    tt_act_table_s8(pre, table, n, y);
    write_array(DT_I8, y, n);
    free(pre), free(table), free(y);
}

static void run_mul_s8(void) {
    int32_t nx, ns, n;
    int8_t *x = i8(&nx);
    int8_t *s = i8(&ns);
    int32_t *p = i32(&n); /* channels, hw, x_zero, s_zero, mult, shift, y_zero */
    int8_t *y = malloc((size_t)nx);
    tt_mul_s8(x, s, p[0], p[1], p[2], p[3], p[4], p[5], p[6], y);
    write_array(DT_I8, y, nx);
    free(x), free(s), free(p), free(y);
}

/* The derivative table travels as int32 values; the kernel reads int16. */
static void run_grad_act_table(void) {
    int32_t n, npre, nt, i;
    int8_t *g = i8(&n);
    int32_t g_exp = scalar();
    int8_t *pre = i8(&npre);
    int32_t *wide = i32(&nt);
    int32_t frac_bits = scalar();
    int16_t table[256];
    for (i = 0; i < 256; i++) {
        table[i] = (int16_t)wide[i];
    }
    tt_grad_act_table(g, &g_exp, pre, table, frac_bits, n);
    write_array(DT_I8, g, n);
    write_array(DT_I32, &g_exp, 1);
    free(g), free(pre), free(wide);
}

static void run_mul_grad_x(void) {
    int32_t n, ns, e;
    int8_t *gy = i8(&n);
    int8_t *s = i8(&ns);
    int32_t *p = i32(&n); /* gy_exp, channels, hw, s_zero, s_mult, frac_bits */
    tt_grad dst = read_grad(&e);
    tt_mul_grad_x(gy, p[0], s, p[1], p[2], p[3], p[4], p[5], &dst);
    write_grad(&dst, p[1] * p[2]);
    free(gy), free(s), free(p), free(dst.data);
}

static void run_mul_grad_scale(void) {
    int32_t n, nx, e;
    int8_t *gy = i8(&n);
    int8_t *x = i8(&nx);
    int32_t *p = i32(&n); /* gy_exp, channels, hw, x_zero, x_mult, frac_bits */
    tt_grad dst = read_grad(&e);
    tt_mul_grad_scale(gy, p[0], x, p[1], p[2], p[3], p[4], p[5], &dst);
    write_grad(&dst, p[1]);
    free(gy), free(x), free(p), free(dst.data);
}

static void run_update_bias(void) {
    int32_t n, nb;
    int8_t *gy = i8(&n);
    int32_t *p = i32(&n); /* gy_exp, channels, hw */
    int32_t *bias = i32(&nb);
    int32_t *mult = i32(&n);
    int32_t *shift = i32(&n);
    tt_update_bias(gy, p[0], p[1], p[2], bias, mult, shift);
    write_array(DT_I32, bias, nb);
    free(gy), free(p), free(bias), free(mult), free(shift);
}

static void run_conv2d_update_weight(void) {
    int32_t n, nw;
    tt_conv_geom g = read_geom();
    int8_t *gy = i8(&n);
    int32_t *p = i32(&n); /* gy_exp, x_zero, k */
    int8_t *x = i8(&n);
    int8_t *w = i8(&nw);
    int32_t *mult = i32(&n);
    int32_t *shift = i32(&n);
    tt_conv2d_update_weight(&g, gy, p[0], x, p[1], w, p[2], mult, shift);
    write_array(DT_I8, w, nw);
    free(gy), free(p), free(x), free(w), free(mult), free(shift);
}

static void run_avgpool_s8(void) {
    int32_t n;
    int8_t *x = i8(&n);
    int32_t *p = i32(&n); /* channels, in_h, in_w, ratio, ratio_w, x_zero, mult, shift, y_zero */
    int32_t n_out = p[0] * (p[1] / p[3]) * (p[2] / p[4]);
    int8_t *y = malloc((size_t)n_out + 1);
    tt_avgpool_s8(x, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], y);
    write_array(DT_I8, y, n_out);
    free(x), free(p), free(y);
}

static void run_avgpool_grad_input(void) {
    int32_t n, e;
    int8_t *gy = i8(&n);
    int32_t *p = i32(&n); /* gy_exp, channels, in_h, in_w, ratio, ratio_w, area_mult, frac_bits */
    tt_grad dst = read_grad(&e);
    tt_avgpool_grad_input(gy, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], &dst);
    write_grad(&dst, p[1] * p[2] * p[3]);
    free(gy), free(p), free(dst.data);
}

/* A pooling geometry arrives as one int32 array of the 11 fields of tt_pool_geom. */
static tt_pool_geom read_pool_geom(void) {
    int32_t n;
    int32_t *v = i32(&n);
    tt_pool_geom g;
    g.channels = v[0], g.in_h = v[1], g.in_w = v[2], g.out_h = v[3], g.out_w = v[4];
    g.kernel_h = v[5], g.kernel_w = v[6], g.stride_h = v[7], g.stride_w = v[8];
    g.pad_top = v[9], g.pad_left = v[10];
    free(v);
    return g;
}

static void run_maxpool_s8(void) {
    int32_t n;
    tt_pool_geom g = read_pool_geom();
    int8_t *x = i8(&n);
    int32_t n_out = g.channels * g.out_h * g.out_w;
    int8_t *y = malloc((size_t)n_out + 1);
    tt_maxpool_s8(x, &g, y);
    write_array(DT_I8, y, n_out);
    free(x), free(y);
}

static void run_maxpool_grad_input(void) {
    int32_t n, e;
    tt_pool_geom g = read_pool_geom();
    int8_t *gy = i8(&n);
    int32_t *p = i32(&n); /* gy_exp */
    int8_t *x = i8(&n);
    tt_grad dst = read_grad(&e);
    tt_maxpool_grad_input(gy, p[0], x, &g, &dst);
    write_grad(&dst, g.channels * g.in_h * g.in_w);
    free(gy), free(p), free(x), free(dst.data);
}

/* An axis arrives as one int32 array: n_in, n_out, i0, i1, w0, w1 (n_out each), lo, hi. */
static tt_interp_axis read_axis(int32_t **store) {
    int32_t n;
    int32_t *v = i32(&n);
    tt_interp_axis a;
    a.n_in = v[0];
    a.n_out = v[1];
    a.i0 = v + 2;
    a.i1 = a.i0 + a.n_out;
    a.w0 = a.i1 + a.n_out;
    a.w1 = a.w0 + a.n_out;
    a.lo = a.w1 + a.n_out;
    a.hi = a.lo + a.n_in;
    if (n != 2 + 4 * a.n_out + 2 * a.n_in) {
        fail("malformed interpolation axis");
    }
    *store = v;
    return a;
}

static void run_upsample_s8(void) {
    int32_t n, *sy, *sx;
    int8_t *x = i8(&n);
    tt_interp_axis ay = read_axis(&sy), ax = read_axis(&sx);
    int32_t *p = i32(&n); /* channels, x_zero, mult, shift, y_zero */
    int32_t n_out = p[0] * ay.n_out * ax.n_out;
    int8_t *y = malloc((size_t)n_out);
    tt_upsample_s8(x, p[0], &ay, &ax, p[1], p[2], p[3], p[4], y);
    write_array(DT_I8, y, n_out);
    free(x), free(sy), free(sx), free(p), free(y);
}

static void run_upsample_grad_input(void) {
    int32_t n, e, *sy, *sx;
    int8_t *gy = i8(&n);
    tt_interp_axis ay = read_axis(&sy), ax = read_axis(&sx);
    int32_t *p = i32(&n); /* gy_exp, channels, frac_bits */
    tt_grad dst = read_grad(&e);
    tt_upsample_grad_input(gy, p[0], p[1], &ay, &ax, p[2], &dst);
    write_grad(&dst, p[1] * ay.n_in * ax.n_in);
    free(gy), free(sy), free(sx), free(p), free(dst.data);
}

/* GroupNorm parameters: int32 channels, hw, groups, x_zero, y_zero, act_min, act_max; float32
 * x_scale, y_scale, eps. */
static tt_groupnorm read_groupnorm(void) {
    int32_t n;
    int32_t *v = i32(&n);
    float *f = f32(&n);
    tt_groupnorm p;
    p.channels = v[0], p.hw = v[1], p.groups = v[2], p.x_zero = v[3], p.y_zero = v[4];
    p.act_min = v[5], p.act_max = v[6];
    p.x_scale = f[0], p.y_scale = f[1], p.eps = f[2];
    free(v), free(f);
    return p;
}

static void run_groupnorm_f32(void) {
    int32_t n, nb;
    int8_t *x = i8(&n);
    tt_groupnorm p = read_groupnorm();
    float *gamma = f32(&n);
    float *beta = f32(&nb);
    int32_t with_mask = scalar();
    int32_t total = p.channels * p.hw;
    int8_t *y = malloc((size_t)total);
    uint8_t *mask = malloc((size_t)(total + 7) / 8);
    float *stats = malloc(sizeof(float) * 2 * (size_t)p.groups);
    tt_groupnorm_f32(x, &p, gamma, nb ? beta : NULL, stats, y, with_mask ? mask : NULL);
    write_array(DT_I8, y, total);
    write_array(DT_U8, mask, with_mask ? (total + 7) / 8 : 0);
    write_array(DT_F32, stats, 2 * p.groups);
    free(x), free(gamma), free(beta), free(y), free(mask), free(stats);
}

static void run_groupnorm_f32_backward(void) {
    int32_t n, nb;
    int8_t *gy = i8(&n);
    int32_t gy_exp = scalar();
    int8_t *x = i8(&n);
    tt_groupnorm p = read_groupnorm();
    float *gamma = f32(&n);
    float *beta = f32(&nb);
    float *stats = f32(&n);
    float lr = scalar_f32();
    int32_t want = scalar();
    int8_t *gx = malloc((size_t)(p.channels * p.hw));
    int32_t gx_exp = 0;
    tt_groupnorm_f32_backward(gy, gy_exp, x, &p, gamma, nb ? beta : NULL, stats, lr,
                              want ? gx : NULL, &gx_exp);
    write_array(DT_F32, gamma, p.channels);
    write_array(DT_F32, beta, nb);
    write_array(DT_I8, gx, want ? p.channels * p.hw : 0);
    write_array(DT_I32, &gx_exp, 1);
    free(gy), free(x), free(gamma), free(beta), free(stats), free(gx);
}

static const struct {
    const char *name;
    void (*run)(void);
} kernels[] = {
    {"avgpool_s8", run_avgpool_s8},
    {"avgpool_grad_input", run_avgpool_grad_input},
    {"maxpool_s8", run_maxpool_s8},
    {"maxpool_grad_input", run_maxpool_grad_input},
    {"upsample_s8", run_upsample_s8},
    {"upsample_grad_input", run_upsample_grad_input},
    {"groupnorm_f32", run_groupnorm_f32},
    {"groupnorm_f32_backward", run_groupnorm_f32_backward},
    {"conv2d_s8", run_conv2d_s8},
    {"act_table_s8", run_act_table_s8},
    {"mul_s8", run_mul_s8},
    {"grad_act_table", run_grad_act_table},
    {"mul_grad_x", run_mul_grad_x},
    {"mul_grad_scale", run_mul_grad_scale},
    {"add_s8", run_add_s8},
    {"add_act_s8", run_add_act_s8},
    {"gap_s8", run_gap_s8},
    {"linear_f32", run_linear_f32},
    {"softmax_xent_grad", run_softmax_xent_grad},
    {"linear_f32_backward", run_linear_f32_backward},
    {"grad_mask", run_grad_mask},
    {"conv2d_grad_input", run_conv2d_grad_input},
    {"gap_grad_input", run_gap_grad_input},
    {"grad_accumulate", run_grad_accumulate},
    {"update_bias", run_update_bias},
    {"conv2d_update_weight", run_conv2d_update_weight},
};

int main(int argc, char **argv) {
    size_t i;
    if (argc != 2) {
        fail("usage: kernel_driver KERNEL < arrays > arrays");
    }
    for (i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        if (strcmp(argv[1], kernels[i].name) == 0) {
            kernels[i].run();
            return 0;
        }
    }
    fail("unknown kernel");
    return 2;
}
