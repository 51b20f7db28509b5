/*
 * tinytune int8 training kernels: the forward ops, the backward ops of the layers a sparse
 * update trains, and the QAS-scaled SGD update, in portable C99.
 *
 * Every kernel works on caller-provided memory only: no allocation, no global state, every
 * size passed in. Pointers may point anywhere in one static arena (or, for frozen constants,
 * into flash). Activations are int8 in NCHW order (batch 1). The integer semantics, bit for
 * bit, are those of the Python module tinytune.quant.arith, which is their specification; the
 * Python reference kernels in tinytune.quant.kernels carry the same names without "tt_".
 *
 * Build requirements: a C99 compiler, IEEE-754 binary32 floats evaluated without excess
 * precision (FLT_EVAL_METHOD == 0) and without contraction into fused multiply-adds
 * (-ffp-contract=off; GCC's -std=c99 implies it), and the C library's correctly rounded
 * sqrtf (link with -lm). Only the float32 classifier and GroupNorm use floats.
 */
#ifndef TT_INT8_H
#define TT_INT8_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- shapes and parameters ------------------------------------------------------------ */

/* The geometry of one convolution: a kernel of kernel x kernel_w taps at stride stride down
 * and stride_w across (a square kernel: kernel_w == kernel, stride_w == stride). Output pixel
 * (oy, ox) reads input rows oy*stride + ky - pad_top and columns ox*stride_w + kx - pad_left,
 * tap ky*kernel_w + kx of the weight; a tap outside the input adds
 * zero (zero padding). The padding after the input (bottom, right) follows from out_h and
 * out_w: symmetric padding, TensorFlow's "SAME" (one more after than before at stride 2 on an
 * even size), or a patch of a larger tensor whose region starts inside it (a negative pad:
 * the first -pad rows are not read). A convolution is depthwise when
 * groups == in_c == out_c. */
typedef struct {
    int32_t in_c, in_h, in_w;
    int32_t out_c, out_h, out_w;
    int32_t kernel, stride, pad_top, pad_left, groups;
    int32_t kernel_w, stride_w;
} tt_conv_geom;

/* The geometry of a max pooling of [channels][in_h][in_w] into [channels][out_h][out_w]:
 * output (oy, ox) is the largest of input rows oy*stride_h - pad_top + 0 .. kernel_h-1 and
 * columns ox*stride_w - pad_left + 0 .. kernel_w-1 inside the input (the padding never wins). */
typedef struct {
    int32_t channels, in_h, in_w, out_h, out_w;
    int32_t kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left;
} tt_pool_geom;

/* A weight split along its input channels into the part that training updates (the first k,
 * kept in SRAM) and the frozen rest (which may stay in flash). Depthwise weights are split
 * along their channels instead. Layouts, with kk = kernel*kernel_w and cg = in_c/groups:
 *   train:  [out_c][k][kk]          depthwise: [k][kk]
 *   frozen: [out_c][cg - k][kk]     depthwise: [out_c - k][kk]
 * A grouped (not depthwise) convolution is trained whole or not at all (k == 0 or k == cg).
 * Either pointer may be NULL when its part is empty. */
typedef struct {
    const int8_t *train;
    const int8_t *frozen;
    int32_t k;
} tt_weight;

/* Requantisation of a convolution: per output channel, M[o] * 2^-shift[o] ~ s_x*s_w[o]/s_y;
 * the output is clamped to [act_min, act_max] (ReLU and ReLU6 are folded into the clamp). */
typedef struct {
    int32_t x_zero, y_zero, act_min, act_max;
    const int32_t *mult;
    const int32_t *shift;
} tt_requant;

/* Bilinear interpolation along one axis (align_corners = false) as integer tables: output o
 * reads inputs i0[o] and i1[o] with weights w0[o] + w1[o] = 2^Q; input i is read by the
 * outputs lo[i] .. hi[i]-1. Arrays: i0, i1, w0, w1 of n_out; lo, hi of n_in. */
typedef struct {
    int32_t n_in, n_out;
    const int32_t *i0, *i1, *w0, *w1, *lo, *hi;
} tt_interp_axis;

/* A GroupNorm over [channels][hw] in `groups` groups: float32 scale (and optional shift) per
 * channel, int8 input (x_zero, x_scale) and output (y_zero, y_scale), clamp [act_min, act_max]
 * (ReLU folded in as for convolutions). */
typedef struct {
    int32_t channels, hw, groups;
    int32_t x_zero, y_zero, act_min, act_max;
    float x_scale, y_scale, eps;
} tt_groupnorm;

/* An int8 gradient buffer with its block exponent (real gradient = data[i] * 2^exp).
 * accumulate == 0 overwrites the buffer; accumulate != 0 adds to what it holds. */
typedef struct {
    int8_t *data;
    int32_t *exp;
    int32_t accumulate;
} tt_grad;

/* ---- forward ---------------------------------------------------------------------------- */

/* y = clamp(y_zero + round(M*2^-n * (bias + sum w*(x - x_zero)))). When mask is not NULL,
 * bit i of the packed mask (byte i/8, bit i%8) is set iff the clamp left element i unchanged;
 * ceil(out_c*out_h*out_w/8) bytes are written. */
void tt_conv2d_s8(const tt_conv_geom *g, const int8_t *x, const tt_weight *w,
                  const int32_t *bias, const tt_requant *q, int8_t *y, uint8_t *mask);

/* A depthwise convolution written over its input (TinyEngine's in-place depthwise): output
 * channel c is computed into `channel` (out_h*out_w bytes) and then copied to
 * xy + c*out_h*out_w, over input channels that are no longer read, so the layer needs its
 * input and one channel instead of its input and its output. The same values as
 * tt_conv2d_s8; mask as there (when not NULL, out_h*out_w must be a multiple of 8). */
void tt_conv2d_inplace_s8(const tt_conv_geom *g, int8_t *xy, const tt_weight *w,
                          const int32_t *bias, const tt_requant *q, int8_t *channel,
                          uint8_t *mask);

/* Copy an h x w window of every channel from src ([channels][src_h][src_w], the window's top
 * left at row src_r, column src_c) to dst ([channels][dst_h][dst_w], at dst_r, dst_c): a patch
 * of a patched stage into its whole output, or a region cropped to a window. dst may overlap
 * src when no byte moves to a higher address (a crop to the front of the same buffer: dst ==
 * src, dst_r = dst_c = 0, dst_h = h, dst_w = w); the copy runs forward. */
void tt_window_s8(const int8_t *src, int32_t channels, int32_t src_h, int32_t src_w,
                  int32_t src_r, int32_t src_c, int32_t h, int32_t w, int8_t *dst,
                  int32_t dst_h, int32_t dst_w, int32_t dst_r, int32_t dst_c);

/* A table activation (h-swish, h-sigmoid): y[i] = table[pre[i] + 128] over n elements; y may
 * be pre itself. */
void tt_act_table_s8(const int8_t *pre, const int8_t *table, int32_t n, int8_t *y);

/* The product of squeeze-and-excitation, x [channels][hw] times s [channels]:
 * y = clamp(y_zero + round((x - x_zero)*(s - s_zero) * M*2^-shift)),
 * M*2^-shift ~ s_x*s_s/s_y. */
void tt_mul_s8(const int8_t *x, const int8_t *s, int32_t channels, int32_t hw, int32_t x_zero,
               int32_t s_zero, int32_t mult, int32_t shift, int32_t y_zero, int8_t *y);

/* y = clamp(y_zero + round(((a - a_zero)*a_mult + (b - b_zero)*b_mult) * 2^-shift)). */
void tt_add_s8(const int8_t *a, const int8_t *b, int32_t n, int32_t a_zero, int32_t b_zero,
               int32_t a_mult, int32_t b_mult, int32_t shift, int32_t y_zero, int8_t *y);
/* tt_add_s8 followed by a ReLU or ReLU6: the sum clamped to [act_min, act_max]; when mask is not
 * NULL, bit i of the packed mask (byte i/8, bit i%8) is set iff the clamp left element i
 * unchanged, as for tt_conv2d_s8. y may be a or b. */
void tt_add_act_s8(const int8_t *a, const int8_t *b, int32_t n, int32_t a_zero, int32_t b_zero,
                   int32_t a_mult, int32_t b_mult, int32_t shift, int32_t y_zero,
                   int32_t act_min, int32_t act_max, int8_t *y, uint8_t *mask);

/* Global average pooling of [channels][hw] into [channels]. */
void tt_gap_s8(const int8_t *x, int32_t channels, int32_t hw, int32_t x_zero, int32_t mult,
               int32_t shift, int32_t y_zero, int8_t *y);

/* r x r_w average pooling with stride r down and r_w across (ratio, ratio_w) of
 * [channels][in_h][in_w]; the rows and columns beyond the last whole window are dropped.
 * M*2^-shift ~ s_x/(s_y*r*r_w). */
void tt_avgpool_s8(const int8_t *x, int32_t channels, int32_t in_h, int32_t in_w, int32_t ratio,
                   int32_t ratio_w, int32_t x_zero, int32_t mult, int32_t shift, int32_t y_zero,
                   int8_t *y);

/* Max pooling (see tt_pool_geom); the output keeps the input's scale and zero point. */
void tt_maxpool_s8(const int8_t *x, const tt_pool_geom *g, int8_t *y);

/* Bilinear upsampling of [channels][ay->n_in][ax->n_in] into [channels][ay->n_out][ax->n_out];
 * M*2^-shift ~ s_x/(s_y*2^(2Q)). */
void tt_upsample_s8(const int8_t *x, int32_t channels, const tt_interp_axis *ay,
                    const tt_interp_axis *ax, int32_t x_zero, int32_t mult, int32_t shift,
                    int32_t y_zero, int8_t *y);

/* GroupNorm forward; stats receives mean and rstd of each group ([groups][2] floats), which
 * the backward reads. beta may be NULL; mask as for tt_conv2d_s8. */
void tt_groupnorm_f32(const int8_t *x, const tt_groupnorm *p, const float *gamma,
                      const float *beta, float *stats, int8_t *y, uint8_t *mask);

/* The float32 classifier: logits[j] = b[j] + sum_c w[j][c] * x_scale*(x[c] - x_zero),
 * accumulated from c = 0 upwards. */
void tt_linear_f32(const int8_t *x, int32_t in_f, int32_t x_zero, float x_scale,
                   const float *w, const float *b, int32_t out_f, float *logits);

/* ---- loss and backward ------------------------------------------------------------------- */

/* grad = softmax(logits) - onehot(label); grad may be the logits buffer itself. */
void tt_softmax_xent_grad(const float *logits, int32_t n, int32_t label, float *grad);

/* The classifier's backward: when gx is not NULL, the feature gradient (computed with the
 * weights before the update) as int8 mantissas and *gx_exp; then plain SGD on w and b. */
void tt_linear_f32_backward(const int8_t *x, int32_t in_f, int32_t x_zero, float x_scale,
                            float *w, float *b, int32_t out_f, const float *grad, float lr,
                            int8_t *gx, int32_t *gx_exp);

/* Zero the gradient wherever the forward clamp changed the value (mask bit 0). */
void tt_grad_mask(int8_t *g, const uint8_t *mask, int32_t n);

/* The gradient through a table activation, in place: g[i] * table[pre[i] + 128] with the
 * derivative table D ~ f'*2^frac_bits, normalised afresh to int8 mantissas; *g_exp is read
 * and rewritten. */
void tt_grad_act_table(int8_t *g, int32_t *g_exp, const int8_t *pre, const int16_t *table,
                       int32_t frac_bits, int32_t n);

/* The gradients of y = x * s (s one value per channel): to x, gy * (s - s_zero) * s_mult
 * with s_mult ~ s_s*2^frac_bits; to s, the sum over the channel's hw pixels of
 * gy * (x - x_zero), times x_mult ~ s_x*2^frac_bits. */
void tt_mul_grad_x(const int8_t *gy, int32_t gy_exp, const int8_t *s, int32_t channels,
                   int32_t hw, int32_t s_zero, int32_t s_mult, int32_t frac_bits,
                   const tt_grad *gx);
void tt_mul_grad_scale(const int8_t *gy, int32_t gy_exp, const int8_t *x, int32_t channels,
                       int32_t hw, int32_t x_zero, int32_t x_mult, int32_t frac_bits,
                       const tt_grad *gs);

/* The input gradient of a convolution with the given weights; w_mult[o] ~ s_w[o]*2^frac_bits.
 * Two passes over the output (one for the block exponent, one to write it). */
void tt_conv2d_grad_input(const tt_conv_geom *g, const int8_t *gy, int32_t gy_exp,
                          const tt_weight *w, const int32_t *w_mult, int32_t frac_bits,
                          const tt_grad *gx);

/* The input gradient of global average pooling; hw_mult ~ 2^frac_bits / hw. */
void tt_gap_grad_input(const int8_t *gy, int32_t gy_exp, int32_t channels, int32_t hw,
                       int32_t hw_mult, int32_t frac_bits, const tt_grad *gx);

/* The input gradient of r x r_w average pooling; area_mult ~ 2^frac_bits / (r*r_w). */
void tt_avgpool_grad_input(const int8_t *gy, int32_t gy_exp, int32_t channels, int32_t in_h,
                           int32_t in_w, int32_t ratio, int32_t ratio_w, int32_t area_mult,
                           int32_t frac_bits, const tt_grad *gx);

/* The input gradient of max pooling: each output's gradient to the first largest input of its
 * window (tt_maxpool_s8's input x, kept for it), summed where windows overlap. */
void tt_maxpool_grad_input(const int8_t *gy, int32_t gy_exp, const int8_t *x,
                           const tt_pool_geom *g, const tt_grad *gx);

/* The input gradient of bilinear upsampling (the transposed tables); frac_bits is Q. */
void tt_upsample_grad_input(const int8_t *gy, int32_t gy_exp, int32_t channels,
                            const tt_interp_axis *ay, const tt_interp_axis *ax,
                            int32_t frac_bits, const tt_grad *gx);

/* GroupNorm backward from the (masked) output gradient, the kept input and statistics: when
 * gx is not NULL, the input gradient (computed with gamma before the update; always written
 * fresh) as int8 mantissas and *gx_exp; then plain SGD on gamma and beta (beta may be NULL). */
void tt_groupnorm_f32_backward(const int8_t *gy, int32_t gy_exp, const int8_t *x,
                               const tt_groupnorm *p, float *gamma, float *beta,
                               const float *stats, float lr, int8_t *gx, int32_t *gx_exp);

/* Pass a gradient on unchanged (the inputs of an add): copy it, or add it to dst. */
void tt_grad_accumulate(const int8_t *g, int32_t g_exp, int32_t n, const tt_grad *dst);

/* ---- QAS-scaled SGD (MCUNetV3 Eq. 4, no momentum) --------------------------------------------- */

/* bias[o] -= round(sum_p gy[o][p] * 2^gy_exp * M[o]*2^-n[o]), saturated to int32;
 * M*2^-n ~ lr / (s_x*s_w[o]). */
void tt_update_bias(const int8_t *gy, int32_t gy_exp, int32_t channels, int32_t hw,
                    int32_t *bias, const int32_t *upd_mult, const int32_t *upd_shift);

/* The trained part of a weight (layout of tt_weight.train) takes the step
 * w -= round(Gw * 2^gy_exp * M[o]*2^-n[o]), saturated to [-127, 127], where Gw is the
 * integer weight gradient and M*2^-n ~ lr*s_x/s_w[o]. x_saved holds the input channels the
 * update reads: the first k (groups == 1 or depthwise) or all of them (grouped). */
void tt_conv2d_update_weight(const tt_conv_geom *g, const int8_t *gy, int32_t gy_exp,
                             const int8_t *x_saved, int32_t x_zero, int8_t *w_train,
                             int32_t k, const int32_t *upd_mult, const int32_t *upd_shift);

/* ---- the input: an 8-bit frame to the model's int8 image (tt_image.c) ------------------- */

/* The largest downscale (source side / output side) tt_resize_bilinear_s8 takes, the output
 * rows it resizes at once, and the largest side of a frame. Its stack holds TT_RESIZE_ROWS + 1
 * tables of 2 * TT_RESIZE_MAX_RATIO + 3 int32 and one of 2 * TT_RESIZE_MAX_RATIO + 1 doubles:
 * about 1.2 KB at 16 and 4 (gcc -fstack-usage, Cortex-M0+), 20 bytes more a row per unit of
 * ratio. More rows, fewer coefficients computed again: 8 rows take 1.8 KB and 0.76 times the
 * instructions on RV32IMC for a 320 x 240 RGB frame at 32 px (14.7 M at 4 rows). */
#ifndef TT_RESIZE_MAX_RATIO
#define TT_RESIZE_MAX_RATIO 16
#endif
#ifndef TT_RESIZE_ROWS
#define TT_RESIZE_ROWS 4
#endif
#define TT_RESIZE_MAX_TAPS (2 * TT_RESIZE_MAX_RATIO + 1)
#define TT_RESIZE_MAX_SIDE 16384

/* The order of Pillow's two passes (`order` below): horizontal first always (Pillow 10 to 12),
 * or vertical first when the height loses more than twice the pixels the width loses
 * (Pillow 13). The passes round in between, so the order changes some samples by one. */
#define TT_RESIZE_HORIZONTAL_FIRST 0
#define TT_RESIZE_PILLOW13 1

/* An 8-bit frame of width x height pixels (channels 3: R, G, B interleaved; 1: grey), rows
 * `stride` bytes apart, resized to out_w x out_h as Pillow's Image.resize(..., BILINEAR)
 * resizes an 8-bit RGB image (a grey frame as Pillow's convert("RGB") of it: R = G = B), each
 * sample mapped through lut[0..255], written to dst as 3 planes of out_h x out_w (channels
 * first). Returns 0, or -1 (dst untouched) for a NULL pointer, channels other than 1 and 3, an
 * unknown order, a side outside [1, TT_RESIZE_MAX_SIDE], stride < width * channels, or a
 * downscale beyond TT_RESIZE_MAX_RATIO on either axis. The coefficients are computed in
 * double precision: in software on a core without a double-precision FPU. */
int tt_resize_bilinear_s8(const uint8_t *src, int32_t width, int32_t height, int32_t stride,
                          int32_t channels, int32_t out_w, int32_t out_h, int32_t order,
                          const int8_t *lut, int8_t *dst);

#ifdef __cplusplus
}
#endif

#endif /* TT_INT8_H */
