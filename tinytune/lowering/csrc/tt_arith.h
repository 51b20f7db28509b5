/*
 * The scalar primitives of tinytune's int8 semantics (specification: tinytune.quant.arith).
 * Internal to the kernels; every function is static inline.
 */
#ifndef TT_ARITH_H
#define TT_ARITH_H

#include <float.h>
#include <stdint.h>
#include <string.h>

#include "tt_int8.h"

#if FLT_EVAL_METHOD != 0
#error "the kernels need float arithmetic without excess precision (FLT_EVAL_METHOD == 0)"
#endif
#ifdef __FAST_MATH__
#error "the kernels need IEEE float semantics: do not build them with -ffast-math"
#endif

/* Microcontroller cores — every Cortex-M (Armv6-M, Armv7-M, Armv7E-M, Armv8-M) and bare-metal
 * RISC-V — take register-blocked paths with at most a few KiB of stack; the other targets
 * (x86-64 and aarch64 Linux) take loops their compilers vectorise, some of them with buffers of
 * up to 96 KiB on the stack. A build may also define TT_CORTEX_M itself. */
#if !defined(TT_CORTEX_M) &&                                                             \
    (defined(__ARM_ARCH_6M__) || defined(__ARM_ARCH_7M__) || defined(__ARM_ARCH_7EM__) || \
     defined(__ARM_ARCH_8M_BASE__) || defined(__ARM_ARCH_8M_MAIN__) ||                    \
     (defined(__riscv) && !defined(__linux__)))
#define TT_CORTEX_M 1
#endif

/* Cores with the DSP extension (Cortex-M4, M7; Armv8-M with it) add two 16 x 16-bit products
 * to a 32-bit sum in one instruction (SMLAD), after widening four int8 values into two pairs of
 * halves (SXTB16, with or without a rotation by a byte); PKHBT and PKHTB pair the halves of two
 * registers. The integer sums are those of the plain loops, bit for bit. */
/* A function kept out of line, so that its stack buffers are not added to its caller's. */
/* And one always inlined, so that its calls with a constant argument are specialised. */
#if defined(__GNUC__)
#define TT_NOINLINE __attribute__((noinline))
#define TT_INLINE_ALWAYS inline __attribute__((always_inline))
#else
#define TT_NOINLINE
#define TT_INLINE_ALWAYS inline
#endif
/* On x86-64 Linux (glibc), a kernel compiled twice: for AVX2, chosen at load time where the
 * processor has it, and for the baseline x86-64 elsewhere (GCC's and Clang's function
 * multi-versioning). Both give the same bits: integer sums do not depend on their order, and
 * a float kernel vectorised does each element's operations as before, in the same order
 * (AVX2 has no fused multiply-add, and the build asks for none). Not in unoptimised or
 * sanitized builds, which would only take longer to compile. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && defined(__GNUC__) && \
    defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__) && !defined(TT_NO_CLONES)
#define TT_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TT_VECTOR_CLONES
#endif
/* A function whose loops GCC leaves as loops instead of calls to memcpy, memmove or memset,
 * whose overhead rows of a few bytes do not repay. */
#if defined(__GNUC__) && !defined(__clang__)
#define TT_NO_LIBCALL_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define TT_NO_LIBCALL_LOOPS
#endif

#if defined(TT_CORTEX_M) && defined(__ARM_FEATURE_DSP)
#define TT_DSP 1
#include <arm_acle.h>

/* Four int8 values as one word (an unaligned load where the core allows it). */
static inline int32_t tt_load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Two int16 values as one word, the first in the low half. */
static inline int32_t tt_load_pair(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Bytes 1 and 3 of a, sign-extended into two halves (SXTB16 with ROR #8). */
static inline int32_t tt_sxtb16_odd(int32_t a) {
    int32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(a));
    return r;
}

/* The top word of the 64-bit product a b: floor(a b / 2^32). */
static inline int32_t tt_smmul(int32_t a, int32_t b) {
    int32_t r;
    __asm__("smmul %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

/* floor(a b / 2^32): SMMUL, the DSP extension's top word of a 32 x 32-bit product; and v
 * saturated to int8 (SSAT). */
#define TT_MULHI 1
static inline int32_t tt_mulhi(int32_t a, int32_t b) { return tt_smmul(a, b); }
static inline int32_t tt_sat8(int32_t v) { return __ssat(v, 8); }

/* The bottom half of lo below the bottom half of hi. */
static inline int32_t tt_pkhbt(int32_t lo, int32_t hi) {
    int32_t r;
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(lo), "r"(hi));
    return r;
}

/* The top half of hi above the top half of lo. */
static inline int32_t tt_pkhtb(int32_t hi, int32_t lo) {
    int32_t r;
    __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(hi), "r"(lo));
    return r;
}
#endif

/* Bare-metal RISC-V with the M extension: floor(a b / 2^32) in one MULH, and v saturated to
 * int8, for the same 32-bit requantisation and weight step. */
#if defined(TT_CORTEX_M) && defined(__riscv) && defined(__riscv_mul)
#define TT_MULHI 1
static inline int32_t tt_mulhi(int32_t a, int32_t b) {
    int32_t r;
    __asm__("mulh %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

static inline int32_t tt_sat8(int32_t v) { return v < -128 ? -128 : (v > 127 ? 127 : v); }
#endif

/* Values of each stack buffer of the few-pixel kernels (8 KiB at most), and the most output
 * pixels for which channels as the contiguous axis are the faster layout there. */
#define TT_FEW_VALUES 4096
#define TT_CHANNELS_LAST_PIXELS 64

#define TT_LIMIT ((int64_t)1 << 62)
#define TT_HEADROOM 61
#define TT_GRAD_MAX 127

/* floor(x / 2^s) for 0 <= s <= 62, without the implementation-defined >> of a negative. */
static inline int64_t tt_floor_shift(int64_t x, int32_t s) {
    if (x >= 0) {
        return x >> s;
    }
    return -(int64_t)((uint64_t)(-(x + 1)) >> s) - 1;
}

/* x / 2^s rounded to nearest, ties towards +infinity; |x| < 2^62. */
static inline int64_t tt_rshift_round(int64_t x, int32_t s) {
    if (s <= 0) {
        return x;
    }
    if (s >= 63) {
        return 0;
    }
    return tt_floor_shift(x + ((int64_t)1 << (s - 1)), s);
}

/* round(x * mult * 2^-t); for t <= 0 the exact left shift, saturated to +-2^62. */
static inline int64_t tt_scale_round(int64_t x, int32_t mult, int32_t t) {
    int64_t p = x * (int64_t)mult;
    int32_t s;
    if (t >= 1) {
        return tt_rshift_round(p, t);
    }
    if (p == 0) {
        return 0;
    }
    s = -t;
    if (s > 62 || p > (TT_LIMIT >> s) || p < -(TT_LIMIT >> s)) {
        return p > 0 ? TT_LIMIT : -TT_LIMIT;
    }
    return p * ((int64_t)1 << s);
}

/* x * 2^d for d >= 0 (callers keep it below 2^62), rounded x / 2^-d for d < 0. */
static inline int64_t tt_shift_exp(int64_t x, int32_t d) {
    if (d >= 0) {
        return x * ((int64_t)1 << d);
    }
    return tt_rshift_round(x, -d);
}

static inline int64_t tt_clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

static inline int64_t tt_abs64(int64_t v) { return v < 0 ? -v : v; }

static inline int32_t tt_bitlen(uint64_t v) {
    int32_t n = 0;
    while (v) {
        n++;
        v >>= 1;
    }
    return n;
}

/* The smallest sh >= 0 with rshift_round(max_abs, sh) <= 127. */
static inline int32_t tt_normalize_shift(int64_t max_abs) {
    int32_t sh = 0;
    while (tt_rshift_round(max_abs, sh) > TT_GRAD_MAX) {
        sh++;
    }
    return sh;
}

/* ---- writing a gradient buffer in two passes ------------------------------------------------- */

/* A kernel computes every element's exact contribution s (real = s * 2^e_new, |s| <
 * 2^bound_bits) twice: pass 0 finds the largest combined magnitude, pass 1 writes. */
typedef struct {
    int32_t e_new, e_prev, e_c, shift, pass;
    int64_t max_abs;
#ifdef TT_CORTEX_M
    /* In one pass (bits set by tt_emit_one_pass): element i holds floor(t / 2^scale) as 9 bits,
     * its low byte in the destination and its sign in bit i of bits; where the destination
     * accumulates, bit i of bits + (n + 7) / 8 says it is written. With keep set, the first
     * pass's exact values are kept there (tt_emit_keep). */
    uint8_t *bits;
    int32_t *keep;
    const tt_grad *dst;
    int32_t n, scale, fits, lo, hi; /* lo .. hi: the elements written in one pass so far */
#endif
} tt_emit;

static inline void tt_emit_begin(tt_emit *st, const tt_grad *dst, int32_t e_new,
                                 int32_t bound_bits) {
    st->e_new = e_new;
    st->e_prev = dst->accumulate ? *dst->exp : 0;
    st->e_c = e_new;
    if (dst->accumulate) {
        int32_t e = e_new < st->e_prev ? e_new : st->e_prev;
        if (e_new + bound_bits - TT_HEADROOM > e) {
            e = e_new + bound_bits - TT_HEADROOM;
        }
        if (st->e_prev + 7 - TT_HEADROOM > e) {
            e = st->e_prev + 7 - TT_HEADROOM;
        }
        st->e_c = e;
    }
    st->shift = 0;
    st->pass = 0;
    st->max_abs = 0;
#ifdef TT_CORTEX_M
    st->bits = NULL;
    st->keep = NULL;
#endif
}

#ifdef TT_CORTEX_M
/* Elements of the largest buffer a Cortex-M4/M7 writes in one pass: 4 KiB of bit planes, one
 * for a gradient written afresh, two for one added to the buffer's previous gradient. A core
 * without the DSP extension keeps TT_FEW_BITS bytes of them, so that its kernels need not
 * compute every value twice: on a Cortex-M0+ a convolution's input gradient of up to 1024
 * elements (its boards have the least SRAM); on RV32IMC, whose boards (an ESP32-C3: 400 KB)
 * have SRAM to spare, 2 KiB, up to 16384 (the 1x1 and depthwise input gradients of an
 * EfficientNet-Lite0 prefix at 64 px). */
#define TT_ONE_PASS 32768
#ifdef __riscv
#define TT_FEW_BITS 2048
#else
#define TT_FEW_BITS 128
#endif

/* Write the n elements of dst in one pass instead of two, with bits ((n + 7) / 8 bytes, twice
 * that when dst accumulates): each exact value t is kept as floor(t / 2^scale), the smallest scale at
 * which the largest magnitude so far takes 9 bits; when it grows, the elements written so far
 * are divided again (floors nest: floor(floor(t / 2^a) / 2^b) = floor(t / 2^(a + b))). At the
 * end, rshift_round(t, shift) = rshift_round(floor(t / 2^scale), shift - scale) for the shift
 * the largest magnitude asks for, which exceeds scale when scale > 0 (the 9 bits of a scale
 * above 0 hold at least 128 2^scale, which rounds to more than 127 at that scale). The same
 * bytes and exponent as the two passes, bit for bit. */
static inline void tt_emit_one_pass(tt_emit *st, const tt_grad *dst, int32_t n,
                                    uint8_t *bits) {
    int32_t i;
    st->bits = bits;
    st->dst = dst;
    st->n = n;
    st->scale = 0;
    st->lo = n;
    st->hi = -1;
    for (i = 0; i < (dst->accumulate ? 2 : 1) * ((n + 7) / 8); i++) {
        bits[i] = 0;
    }
}

#endif

#ifdef TT_DSP
/* Elements whose exact values a Cortex-M4/M7 keeps as int32 in the same 4 KiB. */
#define TT_KEEP 1024

/* Keep the first pass's exact values (n at most TT_KEEP) in keep, so that a second pass is
 * needed only when one of them does not fit 32 bits. */
static inline void tt_emit_keep(tt_emit *st, const tt_grad *dst, int32_t n, int32_t *keep) {
    st->keep = keep;
    st->dst = dst;
    st->n = n;
    st->fits = 1;
}

/* One pass where the scratch of TT_KEEP int32 values holds what it takes: the exact values
 * of up to TT_KEEP elements, else the bit planes of up to TT_ONE_PASS. Returns the int32
 * words of scratch it leaves free at its end, for the kernel's own buffers. */
static inline int32_t tt_emit_scratch(tt_emit *st, const tt_grad *dst, int32_t n,
                                      int32_t *scratch) {
    if (n <= TT_KEEP) {
        tt_emit_keep(st, dst, n, scratch);
        return TT_KEEP - n;
    }
    if (n <= (dst->accumulate ? TT_ONE_PASS / 2 : TT_ONE_PASS)) {
        tt_emit_one_pass(st, dst, n, (uint8_t *)scratch);
        return TT_KEEP - ((dst->accumulate ? 2 : 1) * ((n + 7) / 8) + 3) / 4;
    }
    return TT_KEEP;
}
#endif

#ifdef TT_CORTEX_M
/* The 9-bit value element i holds. */
static inline int32_t tt_emit_held(const tt_emit *st, const tt_grad *dst, int32_t i) {
    int32_t low = (uint8_t)dst->data[i];
    return (st->bits[i >> 3] >> (i & 7)) & 1u ? low - 256 : low;
}

static inline void tt_emit_hold(tt_emit *st, const tt_grad *dst, int32_t i, int32_t v) {
    uint8_t m = (uint8_t)(1u << (i & 7));
    int32_t low = v & 0xFF;
    dst->data[i] = (int8_t)(low > 127 ? low - 256 : low);
    st->bits[i >> 3] = (uint8_t)(v < 0 ? st->bits[i >> 3] | m : st->bits[i >> 3] & ~m);
}

/* A larger magnitude arrived: the smallest scale holding it in 9 bits, the values so far
 * divided again. */
TT_NOINLINE
static void tt_emit_rescale(tt_emit *st, const tt_grad *dst) {
    const uint8_t *done = st->bits + (st->n + 7) / 8;
    int32_t scale = st->scale, d, i;
    while ((st->max_abs >> scale) >= 256) {
        scale++;
    }
    d = scale - st->scale;
    for (i = st->lo; i <= st->hi; i++) { /* a fresh buffer's unwritten values are overwritten */
        if (!dst->accumulate || ((done[i >> 3] >> (i & 7)) & 1u)) {
            tt_emit_hold(st, dst, i, (int32_t)tt_floor_shift(tt_emit_held(st, dst, i), d));
        }
    }
    st->scale = scale;
}

static inline void tt_emit_put_one(tt_emit *st, const tt_grad *dst, int32_t i, int64_t t) {
    int64_t a = tt_abs64(t);
    uint8_t *done = st->bits + (st->n + 7) / 8;
    if (a > st->max_abs) {
        st->max_abs = a;
        if ((a >> st->scale) >= 256) {
            tt_emit_rescale(st, dst);
        }
    }
    if (t >= INT32_MIN && t <= INT32_MAX && st->scale <= 30) {
        /* floor(t / 2^scale) in 32 bits: an unsigned shift of t + 2^31, less 2^(31 - scale) */
        tt_emit_hold(st, dst, i,
                     (int32_t)(((uint32_t)t ^ 0x80000000u) >> st->scale) -
                         ((int32_t)1 << (31 - st->scale)));
    } else {
        tt_emit_hold(st, dst, i, (int32_t)tt_floor_shift(t, st->scale));
    }
    if (dst->accumulate) { /* the unwritten values are still the previous gradient's */
        done[i >> 3] = (uint8_t)(done[i >> 3] | (1u << (i & 7)));
    }
    if (i < st->lo) {
        st->lo = i;
    }
    if (i > st->hi) {
        st->hi = i;
    }
}
#endif

#ifdef TT_DSP
/* Element i's exact value t kept (tt_emit_keep), the largest magnitude so far with it. */
static TT_INLINE_ALWAYS void tt_emit_keep_value(tt_emit *st, int32_t i, int64_t t) {
    int64_t a = tt_abs64(t);
    if (a > st->max_abs) {
        st->max_abs = a;
    }
    st->keep[i] = (int32_t)t;
    st->fits &= t == (int64_t)st->keep[i];
}

static inline void tt_emit_put_any(tt_emit *st, const tt_grad *dst, int32_t i, int64_t s);

/* With the DSP extension, the common case always inline where a kernel puts its values (their
 * exact values kept, a buffer written afresh); the others as the compiler sees fit. */
static TT_INLINE_ALWAYS void tt_emit_put(tt_emit *st, const tt_grad *dst, int32_t i,
                                         int64_t s) {
    if (st->keep && !dst->accumulate) {
        tt_emit_keep_value(st, i, s);
        return;
    }
    tt_emit_put_any(st, dst, i, s);
}

static inline void tt_emit_put_any(tt_emit *st, const tt_grad *dst, int32_t i, int64_t s) {
#else
static inline void tt_emit_put(tt_emit *st, const tt_grad *dst, int32_t i, int64_t s) {
#endif
    int64_t t = s;
    if (dst->accumulate) {
        t = tt_shift_exp(s, st->e_new - st->e_c) + tt_shift_exp(dst->data[i], st->e_prev - st->e_c);
    }
#ifdef TT_DSP
    if (st->keep) {
        tt_emit_keep_value(st, i, t);
        return;
    }
#endif
#ifdef TT_CORTEX_M
    if (st->bits) {
        tt_emit_put_one(st, dst, i, t);
        return;
    }
#endif
    if (st->pass == 0) {
        int64_t a = tt_abs64(t);
        if (a > st->max_abs) {
            st->max_abs = a;
        }
    } else {
        dst->data[i] = (int8_t)tt_rshift_round(t, st->shift);
    }
}

/* After pass 0: fix the shift and go on to pass 1 (returns 1); after pass 1: returns 0. */
static inline int32_t tt_emit_advance(tt_emit *st) {
#ifdef TT_CORTEX_M
    if (st->bits) { /* the one pass is done: each element rounded at the final shift */
        const tt_grad *dst = st->dst;
        int32_t i;
        st->shift = tt_normalize_shift(st->max_abs);
        for (i = 0; i < st->n; i++) {
            dst->data[i] =
                (int8_t)tt_rshift_round(tt_emit_held(st, dst, i), st->shift - st->scale);
        }
        st->bits = NULL;
        return 0;
    }
#endif
#ifdef TT_DSP
    if (st->keep) { /* the exact values are kept, or a second pass computes them again */
        const tt_grad *dst = st->dst;
        int32_t i, *keep = st->keep;
        st->keep = NULL;
        if (st->fits) {
            int32_t sh = tt_normalize_shift(st->max_abs);
            st->shift = sh;
            if (sh >= 1 && sh <= 24) {
                /* rshift_round in 32 bits: keep + 2^31 + 2^(sh-1) < 2^32, since the largest
                 * magnitude rounds to at most 127 (|keep| < 127.5 2^sh) */
                uint32_t c = 0x80000000u + (1u << (sh - 1));
                int32_t back = (int32_t)1 << (31 - sh);
                for (i = 0; i < st->n; i++) {
                    dst->data[i] = (int8_t)((int32_t)(((uint32_t)keep[i] + c) >> sh) - back);
                }
                return 0;
            }
            for (i = 0; i < st->n; i++) {
                dst->data[i] = (int8_t)tt_rshift_round(keep[i], sh);
            }
            return 0;
        }
    }
#endif
    if (st->pass == 0) {
        st->shift = tt_normalize_shift(st->max_abs);
        st->pass = 1;
        return 1;
    }
    return 0;
}

static inline void tt_emit_end(const tt_emit *st, const tt_grad *dst) {
    *dst->exp = st->e_c + st->shift;
}

/* ---- convolution weights ----------------------------------------------------------------------- */

/* A 1x1 convolution, stride 1, one group, whose output is its input's pixels (no padding,
 * no rows or columns dropped). */
static inline int32_t tt_is_pointwise(const tt_conv_geom *g) {
    return g->kernel == 1 && g->kernel_w == 1 && g->stride == 1 && g->stride_w == 1 &&
           g->pad_top == 0 && g->pad_left == 0 && g->groups == 1 && g->out_h == g->in_h &&
           g->out_w == g->in_w;
}

/* A square kernel at one stride down and across: the convolutions the tiled, channel-wise
 * and DSP paths take; any other runs the direct loops. */
static inline int32_t tt_is_square(const tt_conv_geom *g) {
    return g->kernel_w == g->kernel && g->stride_w == g->stride;
}

/* The taps of one kernel: kernel * kernel_w. */
static inline int32_t tt_taps(const tt_conv_geom *g) {
    return g->kernel * g->kernel_w;
}

static inline int32_t tt_is_depthwise(const tt_conv_geom *g) {
    return g->groups > 1 && g->groups == g->in_c && g->groups == g->out_c;
}

/* Weight element (o, ci, tap) of a split weight; ci is the input channel within its group. */
/* The outputs ox = *lo .. *hi of a row whose input ix = ox * stride + off lies in the input row
 * (off = kx - pad_left for kernel column kx); empty when *hi < *lo. */
static inline void tt_tap_range(const tt_conv_geom *g, int32_t off, int32_t *lo, int32_t *hi) {
    int32_t s = g->stride_w;
    *lo = off >= 0 ? 0 : (-off + s - 1) / s;
    *hi = g->in_w - 1 - off < 0 ? -1 : (g->in_w - 1 - off) / s;
    if (*hi > g->out_w - 1) {
        *hi = g->out_w - 1;
    }
}

/* The kernel (its kernel x kernel_w taps) of output channel o and input channel ci (within its
 * group) of a split weight. */
static inline const int8_t *tt_kernel_taps(const tt_conv_geom *g, const tt_weight *w, int32_t o,
                                           int32_t ci) {
    int32_t kk = tt_taps(g), cg = g->in_c / g->groups;
    if (tt_is_depthwise(g)) {
        return o < w->k ? w->train + o * kk : w->frozen + (o - w->k) * kk;
    }
    return ci < w->k ? w->train + (o * w->k + ci) * kk
                     : w->frozen + (o * (cg - w->k) + (ci - w->k)) * kk;
}

/* Whether a depthwise convolution runs with the channels as the contiguous axis (forward and
 * input gradient): few output pixels, and its inputs and outputs fit TT_FEW_VALUES. */
static inline int32_t tt_depthwise_few(const tt_conv_geom *g) {
    return tt_is_depthwise(g) && tt_is_square(g) &&
           g->out_h * g->out_w <= TT_CHANNELS_LAST_PIXELS &&
           g->in_c * g->in_h * g->in_w <= TT_FEW_VALUES &&
           g->in_c * g->out_h * g->out_w <= TT_FEW_VALUES;
}

/* Tap t of every channel's kernel of a depthwise weight (kk taps per channel), as int16. */
static inline void tt_tap_column(const tt_weight *w, int32_t channels, int32_t kk, int32_t t,
                                 int16_t *col) {
    int32_t c;
    for (c = 0; c < w->k; c++) {
        col[c] = w->train[c * kk + t];
    }
    for (c = w->k; c < channels; c++) {
        col[c] = w->frozen[(c - w->k) * kk + t];
    }
}

static inline int32_t tt_weight_at(const tt_conv_geom *g, const tt_weight *w, int32_t o, int32_t ci,
                            int32_t tap) {
    int32_t kk = tt_taps(g);
    int32_t cg = g->in_c / g->groups;
    if (tt_is_depthwise(g)) {
        return o < w->k ? w->train[o * kk + tap] : w->frozen[(o - w->k) * kk + tap];
    }
    if (ci < w->k) {
        return w->train[(o * w->k + ci) * kk + tap];
    }
    return w->frozen[(o * (cg - w->k) + (ci - w->k)) * kk + tap];
}

/* ---- float32 ---------------------------------------------------------------------------------- */

/* 2^k as a float32, -126 <= k <= 127. */
static inline float tt_pow2f(int32_t k) {
    uint32_t bits = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* floor(v + 1/2) exactly, |v| < 2^31. */
static inline int32_t tt_round_half_up_f32(float v) {
    int32_t t = (int32_t)v;
    float f;
    if ((float)t > v) {
        t -= 1;
    }
    f = v - (float)t;
    return f >= 0.5f ? t + 1 : t;
}

/* The exponent e of a block whose largest magnitude is m: the smallest e with m <= 127*2^e,
 * or 0 when m < 2^-96 (see tinytune.quant.arith.block_exponent_f32). */
static inline int32_t tt_block_exp_f32(float m) {
    uint32_t bits;
    int32_t ex;
    if (!(m >= 0x1p-96f)) {
        return 0;
    }
    memcpy(&bits, &m, sizeof bits);
    ex = (int32_t)((bits >> 23) & 0xffu) - 126; /* m = frac * 2^ex, frac in [0.5, 1) */
    return ex - 7 + ((bits & 0x7fffffu) > (63u << 17) ? 1 : 0);
}

/* 2^e as a float32 with e saturated to [-126, 127] (see tinytune.quant.arith.exp2_f32). */
static inline float tt_exp2_sat(int32_t e) {
    return tt_pow2f(e < -126 ? -126 : (e > 127 ? 127 : e));
}

/* The flat index in [in_h][in_w] of the first largest value of max pooling output (oy, ox)'s
 * window, in the window's row-major order (PyTorch's choice); the padding is never chosen. */
static inline int32_t tt_pool_argmax(const int8_t *xc, const tt_pool_geom *g, int32_t oy,
                                     int32_t ox) {
    int32_t y0 = oy * g->stride_h - g->pad_top, x0 = ox * g->stride_w - g->pad_left;
    int32_t y1 = y0 + g->kernel_h, x1 = x0 + g->kernel_w;
    int32_t best = -1, iy, ix;
    y0 = y0 < 0 ? 0 : y0;
    x0 = x0 < 0 ? 0 : x0;
    y1 = y1 > g->in_h ? g->in_h : y1;
    x1 = x1 > g->in_w ? g->in_w : x1;
    for (iy = y0; iy < y1; iy++) {
        for (ix = x0; ix < x1; ix++) {
            if (best < 0 || xc[iy * g->in_w + ix] > xc[best]) {
                best = iy * g->in_w + ix;
            }
        }
    }
    return best;
}

#endif /* TT_ARITH_H */
