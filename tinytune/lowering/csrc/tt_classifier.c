/* The float32 classifier, its softmax cross-entropy gradient and its SGD step. Each product
 * and each sum is its own statement, in the order tinytune.quant.arith prescribes. */
#include "tt_arith.h"
#include "tt_int8.h"

#define TT_LOG2E 0x1.715476p+0f
#define TT_LN2_HI 0x1.62e4p-1f
#define TT_LN2_LO 0x1.7f7d1cp-20f

/* e^d for d <= 0; 0 below -80 (see tinytune.quant.arith.exp_f32). */
static float tt_exp_f32(float d) {
    static const float coeff[7] = {
        0x1p+0f, 0x1p+0f, 0x1p-1f, 0x1.555556p-3f, 0x1.555556p-5f, 0x1.111112p-7f,
        0x1.6c16c2p-10f,
    };
    float t, kf, r, u, q;
    int32_t k, i;
    if (d < -80.0f) {
        return 0.0f;
    }
    t = d * TT_LOG2E;
    k = tt_round_half_up_f32(t);
    kf = (float)k;
    u = kf * TT_LN2_HI;
    r = d - u;
    u = kf * TT_LN2_LO;
    r = r - u;
    q = coeff[6];
    for (i = 5; i >= 0; i--) {
        q = q * r;
        q = q + coeff[i];
    }
    return q * tt_pow2f(k);
}

static float tt_feature(const int8_t *x, int32_t c, int32_t x_zero, float x_scale) {
    float v = (float)(x[c] - x_zero);
    return x_scale * v;
}

/* Classes a linear layer takes at a time, so that each feature is computed once for all of
 * them (their sums or steps on the stack); each class's own operations stay in order. */
#define TT_CLASS_BLOCK 16

void tt_linear_f32(const int8_t *x, int32_t in_f, int32_t x_zero, float x_scale,
                   const float *w, const float *b, int32_t out_f, float *logits) {
    float a[TT_CLASS_BLOCK];
    int32_t j0, nj, j, c;
    for (j0 = 0; j0 < out_f; j0 += nj) {
        float f = tt_feature(x, 0, x_zero, x_scale);
        nj = out_f - j0 < TT_CLASS_BLOCK ? out_f - j0 : TT_CLASS_BLOCK;
        for (j = 0; j < nj; j++) {
            a[j] = w[(j0 + j) * in_f] * f;
        }
        for (c = 1; c < in_f; c++) {
            f = tt_feature(x, c, x_zero, x_scale);
            for (j = 0; j < nj; j++) {
                float p = w[(j0 + j) * in_f + c] * f;
                a[j] = a[j] + p;
            }
        }
        for (j = 0; j < nj; j++) {
            logits[j0 + j] = a[j] + b[j0 + j];
        }
    }
}

void tt_softmax_xent_grad(const float *logits, int32_t n, int32_t label, float *grad) {
    float m = logits[0];
    float total;
    int32_t j;
    for (j = 1; j < n; j++) {
        if (logits[j] > m) {
            m = logits[j];
        }
    }
    for (j = 0; j < n; j++) {
        grad[j] = tt_exp_f32(logits[j] - m);
    }
    total = grad[0];
    for (j = 1; j < n; j++) {
        total = total + grad[j];
    }
    for (j = 0; j < n; j++) {
        grad[j] = grad[j] / total;
    }
    grad[label] = grad[label] - 1.0f;
}

#ifdef TT_CORTEX_M
/* On a microcontroller: each feature's gradient summed in a register, and each block of classes'
 * steps taken feature by feature (the feature computed once for the block). */
static float tt_feature_grad(const float *w, int32_t in_f, int32_t out_f, const float *grad,
                             int32_t c) {
    float a = w[c] * grad[0];
    int32_t j;
    for (j = 1; j < out_f; j++) {
        float p = w[j * in_f + c] * grad[j];
        a = a + p;
    }
    return a;
}

void tt_linear_f32_backward(const int8_t *x, int32_t in_f, int32_t x_zero, float x_scale,
                            float *w, float *b, int32_t out_f, const float *grad, float lr,
                            int8_t *gx, int32_t *gx_exp) {
    float t[TT_CLASS_BLOCK];
    int32_t j0, nj, j, c;
    if (gx) {
        float m = 0.0f;
        float scale;
        int32_t e;
        for (c = 0; c < in_f; c++) {
            float a = tt_feature_grad(w, in_f, out_f, grad, c);
            float mag = a < 0.0f ? -a : a;
            if (mag > m) {
                m = mag;
            }
        }
        e = tt_block_exp_f32(m);
        scale = tt_pow2f(-e);
        for (c = 0; c < in_f; c++) {
            float a = tt_feature_grad(w, in_f, out_f, grad, c);
            gx[c] = (int8_t)tt_round_half_up_f32(a * scale);
        }
        *gx_exp = e;
    }
    for (j0 = 0; j0 < out_f; j0 += nj) {
        nj = out_f - j0 < TT_CLASS_BLOCK ? out_f - j0 : TT_CLASS_BLOCK;
        for (j = 0; j < nj; j++) {
            t[j] = lr * grad[j0 + j];
            b[j0 + j] = b[j0 + j] - t[j];
        }
        for (c = 0; c < in_f; c++) {
            float f = tt_feature(x, c, x_zero, x_scale);
            for (j = 0; j < nj; j++) {
                float p = t[j] * f;
                w[(j0 + j) * in_f + c] = w[(j0 + j) * in_f + c] - p;
            }
        }
    }
}
#else
/* On Linux targets: each feature's gradient is its own sum over the classes, in their order,
 * and TT_FEATURE_BLOCK of them run side by side (a loop over the block that a compiler
 * vectorises without reordering any one sum); each class's steps run over its row of weights,
 * the features computed again for each (the same operations on each weight). */
#define TT_FEATURE_BLOCK 16

/* The gradients of features c0 .. c0 + n - 1: a[i] = sum over the classes j of w[j][c0 + i]
 * grad[j], each added class by class. */
static void tt_feature_grads(const float *w, int32_t in_f, int32_t out_f, const float *grad,
                             int32_t c0, int32_t n, float *a) {
    int32_t i, j;
    for (i = 0; i < n; i++) {
        a[i] = w[c0 + i] * grad[0];
    }
    for (j = 1; j < out_f; j++) {
        const float *wj = w + j * in_f + c0;
        for (i = 0; i < n; i++) {
            float p = wj[i] * grad[j];
            a[i] = a[i] + p;
        }
    }
}

TT_VECTOR_CLONES
void tt_linear_f32_backward(const int8_t *x, int32_t in_f, int32_t x_zero, float x_scale,
                            float *w, float *b, int32_t out_f, const float *grad, float lr,
                            int8_t *gx, int32_t *gx_exp) {
    float a[TT_FEATURE_BLOCK];
    int32_t c0, n, i, j, c;
    if (gx) {
        float m = 0.0f;
        float scale;
        int32_t e;
        for (c0 = 0; c0 < in_f; c0 += n) {
            n = in_f - c0 < TT_FEATURE_BLOCK ? in_f - c0 : TT_FEATURE_BLOCK;
            tt_feature_grads(w, in_f, out_f, grad, c0, n, a);
            for (i = 0; i < n; i++) {
                float mag = a[i] < 0.0f ? -a[i] : a[i];
                if (mag > m) {
                    m = mag;
                }
            }
        }
        e = tt_block_exp_f32(m);
        scale = tt_pow2f(-e);
        for (c0 = 0; c0 < in_f; c0 += n) {
            n = in_f - c0 < TT_FEATURE_BLOCK ? in_f - c0 : TT_FEATURE_BLOCK;
            tt_feature_grads(w, in_f, out_f, grad, c0, n, a);
            for (i = 0; i < n; i++) {
                gx[c0 + i] = (int8_t)tt_round_half_up_f32(a[i] * scale);
            }
        }
        *gx_exp = e;
    }
    for (j = 0; j < out_f; j++) {
        float t = lr * grad[j];
        float *wj = w + j * in_f;
        b[j] = b[j] - t;
        for (c = 0; c < in_f; c++) {
            float p = t * tt_feature(x, c, x_zero, x_scale);
            wj[c] = wj[c] - p;
        }
    }
}
#endif
