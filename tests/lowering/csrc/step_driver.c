/*
 * Test driver: runs a lowered training step (tinytune.lowering.program) on images read from
 * stdin. The program arrives first (see tests/lowering/harness.py: encode_program); then, per
 * step, an int32 label and the int8 image. After every call that the program lists as a
 * dump, the driver writes the bytes (and the gradient exponent) it names to stdout.
 *
 * The arena, the flash constants, the scratch space and the exponent table are each one
 * exactly sized allocation, so the address sanitizer sees any access outside them; the flash
 * copy is compared with the original at the end (a kernel must never write a constant).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt_int8.h"

enum { TAG_INT = 0, TAG_PTR = 1, TAG_NULL = 2, TAG_F32 = 3, TAG_EXP = 4, TAG_LABEL = 5, TAG_TUPLE = 6 };
enum { SPACE_ARENA = 0, SPACE_FLASH = 1, SPACE_SCRATCH = 2, SPACE_EXP = 3 };
#define MAX_OPERANDS 16
#define MAX_TUPLE 13

typedef struct {
    int32_t tag;
    int32_t space, offset, value;
    int32_t tuple[MAX_TUPLE];
    float f;
} operand;

typedef struct {
    char name[32];
    int32_t n;
    operand ops[MAX_OPERANDS];
} call;

typedef struct {
    int32_t call, space, offset, nbytes, exp_slot;
} dump;

static uint8_t *space_base[4];
static int32_t space_size[4];
static int32_t label;

static void fail(const char *what) {
    fprintf(stderr, "step_driver: %s\n", what);
    exit(2);
}

static int32_t rd(void) {
    int32_t v;
    if (fread(&v, sizeof v, 1, stdin) != 1) {
        fail("truncated input");
    }
    return v;
}

static void rd_bytes(void *dst, int32_t n) {
    int32_t pad = (4 - n % 4) % 4;
    uint8_t skip[4];
    if (n && fread(dst, 1, (size_t)n, stdin) != (size_t)n) {
        fail("truncated bytes");
    }
    if (pad && fread(skip, 1, (size_t)pad, stdin) != (size_t)pad) {
        fail("truncated padding");
    }
}

static void *at(int32_t space, int32_t offset, int32_t nbytes) {
    if (space < 0 || space > 3 || offset < 0 || offset + nbytes > space_size[space]) {
        fail("pointer outside its space");
    }
    return space_base[space] + offset;
}

/* ---- operand accessors (checked against the tags the program carries) ---- */

static int32_t I(const call *c, int32_t k) {
    if (c->ops[k].tag == TAG_INT) {
        return c->ops[k].value;
    }
    if (c->ops[k].tag == TAG_EXP) {
        return ((int32_t *)(void *)space_base[SPACE_EXP])[c->ops[k].value];
    }
    if (c->ops[k].tag == TAG_LABEL) {
        return label;
    }
    fail("operand is not an integer");
    return 0;
}

static void *P(const call *c, int32_t k) {
    if (c->ops[k].tag == TAG_NULL) {
        return NULL;
    }
    if (c->ops[k].tag != TAG_PTR) {
        fail("operand is not a pointer");
    }
    return at(c->ops[k].space, c->ops[k].offset, 0);
}

static float Fl(const call *c, int32_t k) {
    if (c->ops[k].tag != TAG_F32) {
        fail("operand is not a float");
    }
    return c->ops[k].f;
}

static tt_conv_geom G(const call *c, int32_t k) {
    const int32_t *v = c->ops[k].tuple;
    tt_conv_geom g;
    if (c->ops[k].tag != TAG_TUPLE) {
        fail("operand is not a geometry");
    }
    g.in_c = v[0], g.in_h = v[1], g.in_w = v[2], g.out_c = v[3], g.out_h = v[4], g.out_w = v[5];
    g.kernel = v[6], g.stride = v[7], g.pad_top = v[8], g.pad_left = v[9], g.groups = v[10];
    g.kernel_w = v[11], g.stride_w = v[12];
    return g;
}

static tt_weight W(const call *c, int32_t train, int32_t frozen, int32_t k) {
    tt_weight w;
    w.train = (const int8_t *)P(c, train);
    w.frozen = (const int8_t *)P(c, frozen);
    w.k = I(c, k);
    return w;
}

static tt_grad D(const call *c, int32_t data, int32_t exp, int32_t accumulate) {
    tt_grad d;
    d.data = (int8_t *)P(c, data);
    d.exp = (int32_t *)P(c, exp);
    d.accumulate = I(c, accumulate);
    return d;
}

/* ---- one function per kernel; operand indices follow KERNELS in program.py ---- */

/* The requantisation of a convolution call: operands 6 .. 11. */
static tt_requant R(const call *c) {
    tt_requant q;
    q.x_zero = I(c, 6), q.y_zero = I(c, 7), q.act_min = I(c, 8), q.act_max = I(c, 9);
    q.mult = (const int32_t *)P(c, 10), q.shift = (const int32_t *)P(c, 11);
    return q;
}

static void k_conv2d_s8(const call *c) {
    tt_conv_geom g = G(c, 0);
    tt_weight w = W(c, 2, 3, 4);
    tt_requant q = R(c);
    tt_conv2d_s8(&g, (const int8_t *)P(c, 1), &w, (const int32_t *)P(c, 5), &q,
                 (int8_t *)P(c, 12), (uint8_t *)P(c, 13));
}

static void k_conv2d_inplace_s8(const call *c) {
    tt_conv_geom g = G(c, 0);
    tt_weight w = W(c, 2, 3, 4);
    tt_requant q = R(c);
    tt_conv2d_inplace_s8(&g, (int8_t *)P(c, 1), &w, (const int32_t *)P(c, 5), &q,
                         (int8_t *)P(c, 12), (uint8_t *)P(c, 13));
}

static void k_window_s8(const call *c) {
    tt_window_s8((const int8_t *)P(c, 0), I(c, 1), I(c, 2), I(c, 3), I(c, 4), I(c, 5), I(c, 6),
                 I(c, 7), (int8_t *)P(c, 8), I(c, 9), I(c, 10), I(c, 11), I(c, 12));
}

static void k_act_table_s8(const call *c) {
    tt_act_table_s8((const int8_t *)P(c, 0), (const int8_t *)P(c, 1), I(c, 2), (int8_t *)P(c, 3));
}

static void k_mul_s8(const call *c) {
    tt_mul_s8((const int8_t *)P(c, 0), (const int8_t *)P(c, 1), I(c, 2), I(c, 3), I(c, 4),
              I(c, 5), I(c, 6), I(c, 7), I(c, 8), (int8_t *)P(c, 9));
}

static void k_grad_act_table(const call *c) {
    tt_grad_act_table((int8_t *)P(c, 0), (int32_t *)P(c, 1), (const int8_t *)P(c, 2),
                      (const int16_t *)P(c, 3), I(c, 4), I(c, 5));
}

static void k_mul_grad_x(const call *c) {
    tt_grad d = D(c, 8, 9, 10);
    tt_mul_grad_x((const int8_t *)P(c, 0), I(c, 1), (const int8_t *)P(c, 2), I(c, 3), I(c, 4),
                  I(c, 5), I(c, 6), I(c, 7), &d);
}

static void k_mul_grad_scale(const call *c) {
    tt_grad d = D(c, 8, 9, 10);
    tt_mul_grad_scale((const int8_t *)P(c, 0), I(c, 1), (const int8_t *)P(c, 2), I(c, 3),
                      I(c, 4), I(c, 5), I(c, 6), I(c, 7), &d);
}

static void k_add_s8(const call *c) {
    tt_add_s8((const int8_t *)P(c, 0), (const int8_t *)P(c, 1), I(c, 2), I(c, 3), I(c, 4),
              I(c, 5), I(c, 6), I(c, 7), I(c, 8), (int8_t *)P(c, 9));
}

static void k_gap_s8(const call *c) {
    tt_gap_s8((const int8_t *)P(c, 0), I(c, 1), I(c, 2), I(c, 3), I(c, 4), I(c, 5), I(c, 6),
              (int8_t *)P(c, 7));
}

static void k_linear_f32(const call *c) {
    tt_linear_f32((const int8_t *)P(c, 0), I(c, 1), I(c, 2), Fl(c, 3), (const float *)P(c, 4),
                  (const float *)P(c, 5), I(c, 6), (float *)P(c, 7));
}

static void k_copy_s8(const call *c) {
    memcpy(P(c, 0), P(c, 1), (size_t)I(c, 2));
}

static void k_softmax_xent_grad(const call *c) {
    tt_softmax_xent_grad((const float *)P(c, 0), I(c, 1), I(c, 2), (float *)P(c, 3));
}

static void k_linear_f32_backward(const call *c) {
    tt_linear_f32_backward((const int8_t *)P(c, 0), I(c, 1), I(c, 2), Fl(c, 3), (float *)P(c, 4),
                           (float *)P(c, 5), I(c, 6), (const float *)P(c, 7), Fl(c, 8),
                           (int8_t *)P(c, 9), (int32_t *)P(c, 10));
}

static void k_grad_mask(const call *c) {
    tt_grad_mask((int8_t *)P(c, 0), (const uint8_t *)P(c, 1), I(c, 2));
}

static void k_conv2d_grad_input(const call *c) {
    tt_conv_geom g = G(c, 0);
    tt_weight w = W(c, 3, 4, 5);
    tt_grad d = D(c, 8, 9, 10);
    tt_conv2d_grad_input(&g, (const int8_t *)P(c, 1), I(c, 2), &w, (const int32_t *)P(c, 6),
                         I(c, 7), &d);
}

static void k_gap_grad_input(const call *c) {
    tt_grad d = D(c, 6, 7, 8);
    tt_gap_grad_input((const int8_t *)P(c, 0), I(c, 1), I(c, 2), I(c, 3), I(c, 4), I(c, 5), &d);
}

static void k_grad_accumulate(const call *c) {
    tt_grad d = D(c, 3, 4, 5);
    tt_grad_accumulate((const int8_t *)P(c, 0), I(c, 1), I(c, 2), &d);
}

static void k_update_bias(const call *c) {
    tt_update_bias((const int8_t *)P(c, 0), I(c, 1), I(c, 2), I(c, 3), (int32_t *)P(c, 4),
                   (const int32_t *)P(c, 5), (const int32_t *)P(c, 6));
}

static void k_conv2d_update_weight(const call *c) {
    tt_conv_geom g = G(c, 0);
    tt_conv2d_update_weight(&g, (const int8_t *)P(c, 1), I(c, 2), (const int8_t *)P(c, 3),
                            I(c, 4), (int8_t *)P(c, 5), I(c, 6), (const int32_t *)P(c, 7),
                            (const int32_t *)P(c, 8));
}

/* An interpolation axis from its int32 table: n_in, n_out, i0, i1, w0, w1, lo, hi. */
static tt_interp_axis A(const call *c, int32_t k) {
    const int32_t *v = (const int32_t *)P(c, k);
    tt_interp_axis a;
    a.n_in = v[0];
    a.n_out = v[1];
    a.i0 = v + 2;
    a.i1 = a.i0 + a.n_out;
    a.w0 = a.i1 + a.n_out;
    a.w1 = a.w0 + a.n_out;
    a.lo = a.w1 + a.n_out;
    a.hi = a.lo + a.n_in;
    return a;
}

/* A GroupNorm from its tuple: 7 ints, then x_scale, y_scale, eps as float bits. */
static tt_groupnorm N(const call *c, int32_t k) {
    const int32_t *v = c->ops[k].tuple;
    tt_groupnorm p;
    if (c->ops[k].tag != TAG_TUPLE || c->ops[k].value != 10) {
        fail("operand is not a group norm");
    }
    p.channels = v[0], p.hw = v[1], p.groups = v[2], p.x_zero = v[3], p.y_zero = v[4];
    p.act_min = v[5], p.act_max = v[6];
    memcpy(&p.x_scale, &v[7], sizeof p.x_scale);
    memcpy(&p.y_scale, &v[8], sizeof p.y_scale);
    memcpy(&p.eps, &v[9], sizeof p.eps);
    return p;
}

static void k_avgpool_s8(const call *c) {
    tt_avgpool_s8((const int8_t *)P(c, 0), I(c, 1), I(c, 2), I(c, 3), I(c, 4), I(c, 5), I(c, 6),
                  I(c, 7), I(c, 8), I(c, 9), (int8_t *)P(c, 10));
}

static void k_avgpool_grad_input(const call *c) {
    tt_grad d = D(c, 9, 10, 11);
    tt_avgpool_grad_input((const int8_t *)P(c, 0), I(c, 1), I(c, 2), I(c, 3), I(c, 4), I(c, 5),
                          I(c, 6), I(c, 7), I(c, 8), &d);
}

static void k_upsample_s8(const call *c) {
    tt_interp_axis ay = A(c, 2), ax = A(c, 3);
    tt_upsample_s8((const int8_t *)P(c, 0), I(c, 1), &ay, &ax, I(c, 4), I(c, 5), I(c, 6),
                   I(c, 7), (int8_t *)P(c, 8));
}

static void k_upsample_grad_input(const call *c) {
    tt_interp_axis ay = A(c, 3), ax = A(c, 4);
    tt_grad d = D(c, 6, 7, 8);
    tt_upsample_grad_input((const int8_t *)P(c, 0), I(c, 1), I(c, 2), &ay, &ax, I(c, 5), &d);
}

static void k_groupnorm_f32(const call *c) {
    tt_groupnorm p = N(c, 1);
    tt_groupnorm_f32((const int8_t *)P(c, 0), &p, (const float *)P(c, 2),
                     (const float *)P(c, 3), (float *)P(c, 4), (int8_t *)P(c, 5),
                     (uint8_t *)P(c, 6));
}

static void k_groupnorm_f32_backward(const call *c) {
    tt_groupnorm p = N(c, 3);
    tt_groupnorm_f32_backward((const int8_t *)P(c, 0), I(c, 1), (const int8_t *)P(c, 2), &p,
                              (float *)P(c, 4), (float *)P(c, 5), (const float *)P(c, 6),
                              Fl(c, 7), (int8_t *)P(c, 8), (int32_t *)P(c, 9));
}

static const struct {
    const char *name;
    void (*run)(const call *);
} kernels[] = {
    {"avgpool_s8", k_avgpool_s8},
    {"avgpool_grad_input", k_avgpool_grad_input},
    {"upsample_s8", k_upsample_s8},
    {"upsample_grad_input", k_upsample_grad_input},
    {"groupnorm_f32", k_groupnorm_f32},
    {"groupnorm_f32_backward", k_groupnorm_f32_backward},
    {"conv2d_s8", k_conv2d_s8},
    {"conv2d_inplace_s8", k_conv2d_inplace_s8},
    {"window_s8", k_window_s8},
    {"act_table_s8", k_act_table_s8},
    {"mul_s8", k_mul_s8},
    {"grad_act_table", k_grad_act_table},
    {"mul_grad_x", k_mul_grad_x},
    {"mul_grad_scale", k_mul_grad_scale},
    {"add_s8", k_add_s8},
    {"gap_s8", k_gap_s8},
    {"linear_f32", k_linear_f32},
    {"copy_s8", k_copy_s8},
    {"softmax_xent_grad", k_softmax_xent_grad},
    {"linear_f32_backward", k_linear_f32_backward},
    {"grad_mask", k_grad_mask},
    {"conv2d_grad_input", k_conv2d_grad_input},
    {"gap_grad_input", k_gap_grad_input},
    {"grad_accumulate", k_grad_accumulate},
    {"update_bias", k_update_bias},
    {"conv2d_update_weight", k_conv2d_update_weight},
};

static void (*find(const char *name))(const call *) {
    size_t i;
    for (i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        if (strcmp(name, kernels[i].name) == 0) {
            return kernels[i].run;
        }
    }
    fail("unknown kernel");
    return NULL;
}

static void read_call(call *c) {
    int32_t len = rd(), k, j;
    if (len <= 0 || len >= (int32_t)sizeof c->name) {
        fail("bad kernel name");
    }
    rd_bytes(c->name, len);
    c->name[len] = '\0';
    c->n = rd();
    if (c->n > MAX_OPERANDS) {
        fail("too many operands");
    }
    for (k = 0; k < c->n; k++) {
        operand *o = &c->ops[k];
        uint32_t bits;
        o->tag = rd();
        switch (o->tag) {
        case TAG_INT:
        case TAG_EXP:
            o->value = rd();
            break;
        case TAG_PTR:
            o->space = rd();
            o->offset = rd();
            break;
        case TAG_F32:
            bits = (uint32_t)rd();
            memcpy(&o->f, &bits, sizeof o->f);
            break;
        case TAG_TUPLE:
            o->value = rd();
            if (o->value > MAX_TUPLE) {
                fail("tuple too long");
            }
            for (j = 0; j < o->value; j++) {
                o->tuple[j] = rd();
            }
            break;
        case TAG_NULL:
        case TAG_LABEL:
            break;
        default:
            fail("unknown operand tag");
        }
    }
}

static void emit_dump(const dump *d) {
    int32_t head[2];
    head[0] = 3; /* uint8 bytes */
    head[1] = d->nbytes;
    fwrite(head, sizeof head, 1, stdout);
    fwrite(at(d->space, d->offset, d->nbytes), 1, (size_t)d->nbytes, stdout);
    if (d->exp_slot >= 0) {
        head[0] = 1; /* int32 */
        head[1] = 1;
        fwrite(head, sizeof head, 1, stdout);
        fwrite(at(SPACE_EXP, 4 * d->exp_slot, 4), 4, 1, stdout);
    }
}

int main(void) {
    int32_t i, s, n_init, n_calls, n_dumps, input_offset, input_nbytes;
    call *calls;
    void (**runs)(const call *);
    dump *dumps;
    uint8_t *flash_copy;
    if (rd() != 0x31505454) {
        fail("not a step program");
    }
    for (s = 0; s < 4; s++) {
        space_size[s] = rd();
        space_base[s] = calloc((size_t)space_size[s] + (space_size[s] == 0), 1);
        if (!space_base[s]) {
            fail("out of memory");
        }
    }
    rd_bytes(space_base[SPACE_FLASH], space_size[SPACE_FLASH]);
    flash_copy = malloc((size_t)space_size[SPACE_FLASH] + 1);
    memcpy(flash_copy, space_base[SPACE_FLASH], (size_t)space_size[SPACE_FLASH]);
    n_init = rd();
    for (i = 0; i < n_init; i++) {
        int32_t offset = rd(), nbytes = rd();
        rd_bytes(at(SPACE_ARENA, offset, nbytes), nbytes);
    }
    input_offset = rd();
    input_nbytes = rd();
    n_calls = rd();
    calls = malloc(sizeof *calls * (size_t)n_calls);
    runs = malloc(sizeof *runs * (size_t)n_calls);
    for (i = 0; i < n_calls; i++) {
        read_call(&calls[i]);
        runs[i] = find(calls[i].name);
    }
    n_dumps = rd();
    dumps = malloc(sizeof *dumps * (size_t)(n_dumps + 1));
    for (i = 0; i < n_dumps; i++) {
        dumps[i].call = rd();
        dumps[i].space = rd();
        dumps[i].offset = rd();
        dumps[i].nbytes = rd();
        dumps[i].exp_slot = rd();
    }
    for (;;) {
        int32_t d = 0;
        if (fread(&label, sizeof label, 1, stdin) != 1) {
            break;
        }
        rd_bytes(at(SPACE_ARENA, input_offset, input_nbytes), input_nbytes);
        for (i = 0; i <= n_calls; i++) {
            if (i < n_calls) {
                runs[i](&calls[i]);
            }
            for (; d < n_dumps && dumps[d].call == i; d++) {
                emit_dump(&dumps[d]);
            }
        }
    }
    if (memcmp(flash_copy, space_base[SPACE_FLASH], (size_t)space_size[SPACE_FLASH]) != 0) {
        fail("a kernel wrote into flash");
    }
    fflush(stdout);
    for (s = 0; s < 4; s++) {
        free(space_base[s]);
    }
    free(flash_copy), free(calls), free(runs), free(dumps);
    return 0;
}
