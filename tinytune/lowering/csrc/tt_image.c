/* An 8-bit frame resized as tinytune's image-folder data set resizes its images: Pillow's
 * Image.resize((out_w, out_h), Image.Resampling.BILINEAR) of an 8-bit RGB image, bit for bit
 * (Pillow's src/libImaging/Resample.c, 8 bits per channel), then each sample looked up in a
 * 256-entry table (the model's input quantization). See tt_resize_bilinear_s8 in tt_int8.h.
 *
 * Pillow resizes in two passes, rounding each sample to uint8 in between: horizontally (every
 * source row the vertical pass reads), then vertically; from Pillow 13 on, vertically first
 * when the height loses more than twice the pixels the width loses (`order` says which rule).
 * Here each output sample recomputes the first pass's samples it reads, so nothing but a few
 * coefficient tables lives on the stack; the sums and their roundings are Pillow's. The coefficients are Pillow's too: computed in
 * double precision with + - * / only (IEEE 754 rounds them alike on every target, in hardware
 * or in software), normalised, and converted to fixed point with 22 fractional bits. */
#include <stddef.h>

#include "tt_int8.h"

#define TT_RESIZE_BITS 22
#define TT_RESIZE_HALF (1 << (TT_RESIZE_BITS - 1))

/* The taps of one output sample along one axis: source samples first .. first + count - 1,
 * with fixed-point weights summing to about 2^22. */
typedef struct {
    int32_t first, count;
    int32_t k[TT_RESIZE_MAX_TAPS];
} tt_taps;

/* Pillow's bilinear filter, a triangle of support 1. */
static double tt_triangle(double x) {
    if (x < 0.0) {
        x = -x;
    }
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's precompute_coeffs and normalize_coeffs_8bpc for output sample `out` of an axis of
 * n_in source samples resized to n_out (the box is the whole image: in0 = 0, in1 = n_in). */
static int tt_resize_taps(int32_t n_in, int32_t n_out, int32_t out, tt_taps *t) {
    double w[TT_RESIZE_MAX_TAPS];
    double scale = (double)(float)n_in / (double)n_out;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    double inv_filterscale = 1.0 / filterscale;
    double center = 0.0 + ((double)out + 0.5) * scale;
    double ww = 0.0;
    int32_t first = (int32_t)(center - support + 0.5);
    int32_t last = (int32_t)(center + support + 0.5);
    int32_t x;
    if (first < 0) {
        first = 0;
    }
    if (last > n_in) {
        last = n_in;
    }
    t->first = first;
    t->count = last - first;
    if (t->count < 0 || t->count > TT_RESIZE_MAX_TAPS) {
        return -1; /* not reached: the ratio's check bounds the count */
    }
    for (x = 0; x < t->count; x++) {
        w[x] = tt_triangle(((double)(x + first) - center + 0.5) * inv_filterscale);
        ww = ww + w[x];
    }
    for (x = 0; x < t->count; x++) {
        double k = ww != 0.0 ? w[x] / ww : w[x];
        double fixed = k * (double)(1 << TT_RESIZE_BITS);
        t->k[x] = k < 0.0 ? (int32_t)(-0.5 + fixed) : (int32_t)(0.5 + fixed);
    }
    return 0;
}

/* Pillow's clip8: the sum's integer part, clamped to 0..255. */
static uint8_t tt_clip8(int32_t sum) {
    int32_t v = sum >> TT_RESIZE_BITS;
    return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

/* One output sample of channel c: the two passes in Pillow's order, each rounded (clip8). The
 * first pass's samples are computed where the second reads them. */
static int32_t tt_resize_sample(const uint8_t *src, int32_t stride, int32_t channels, int32_t c,
                                const tt_taps *v, const tt_taps *h, int vertical_first) {
    const uint8_t *corner = src + (size_t)v->first * (size_t)stride +
                            (size_t)h->first * (size_t)channels + (size_t)c;
    int32_t sum = TT_RESIZE_HALF, i, j;
    if (vertical_first) {
        for (j = 0; j < h->count; j++) {
            const uint8_t *column = corner + (size_t)j * (size_t)channels;
            int32_t down = TT_RESIZE_HALF;
            for (i = 0; i < v->count; i++) {
                down += (int32_t)column[(size_t)i * (size_t)stride] * v->k[i];
            }
            sum += (int32_t)tt_clip8(down) * h->k[j];
        }
    } else {
        for (i = 0; i < v->count; i++) {
            const uint8_t *row = corner + (size_t)i * (size_t)stride;
            int32_t across = TT_RESIZE_HALF;
            for (j = 0; j < h->count; j++) {
                across += (int32_t)row[(size_t)j * (size_t)channels] * h->k[j];
            }
            sum += (int32_t)tt_clip8(across) * v->k[i];
        }
    }
    return (int32_t)tt_clip8(sum);
}

/* The output samples of rows y0 .. y0 + rows - 1 at column ox, through the table, into the
 * three planes of dst (a grey frame's sample into all three: R = G = B, as Pillow's
 * convert("RGB") makes them). */
static void tt_resize_column(const uint8_t *src, int32_t stride, int32_t channels,
                             const tt_taps *v, int32_t rows, const tt_taps *h, int vertical_first,
                             int32_t y0, int32_t ox, int32_t out_w, int32_t plane,
                             const int8_t *lut, int8_t *dst) {
    int32_t r, c, p;
    for (r = 0; r < rows; r++) {
        int8_t *at = dst + (size_t)(y0 + r) * (size_t)out_w + (size_t)ox;
        for (c = 0; c < channels; c++) {
            int8_t q = lut[tt_resize_sample(src, stride, channels, c, &v[r], h, vertical_first)];
            if (channels == 3) {
                at[(size_t)c * (size_t)plane] = q;
            } else {
                for (p = 0; p < 3; p++) {
                    at[(size_t)p * (size_t)plane] = q;
                }
            }
        }
    }
}

int tt_resize_bilinear_s8(const uint8_t *src, int32_t width, int32_t height, int32_t stride,
                          int32_t channels, int32_t out_w, int32_t out_h, int32_t order,
                          const int8_t *lut, int8_t *dst) {
    tt_taps v[TT_RESIZE_ROWS];
    tt_taps h;
    int32_t y0, r, ox;
    int vertical_first;
    if (src == NULL || lut == NULL || dst == NULL || (channels != 1 && channels != 3) ||
        (order != TT_RESIZE_HORIZONTAL_FIRST && order != TT_RESIZE_PILLOW13)) {
        return -1;
    }
    if (width < 1 || height < 1 || width > TT_RESIZE_MAX_SIDE || height > TT_RESIZE_MAX_SIDE ||
        out_w < 1 || out_h < 1 || out_w > TT_RESIZE_MAX_SIDE || out_h > TT_RESIZE_MAX_SIDE) {
        return -1;
    }
    if (stride < width * channels || width > TT_RESIZE_MAX_RATIO * out_w ||
        height > TT_RESIZE_MAX_RATIO * out_h) {
        return -1;
    }
    /* Pillow 13: the vertical pass first when the height loses more than twice the pixels
     * the width loses */
    vertical_first = order == TT_RESIZE_PILLOW13 && height - out_h > 0 &&
                     height - out_h > (width - out_w) * 2;
    for (y0 = 0; y0 < out_h; y0 += TT_RESIZE_ROWS) {
        int32_t rows = out_h - y0 < TT_RESIZE_ROWS ? out_h - y0 : TT_RESIZE_ROWS;
        for (r = 0; r < rows; r++) {
            if (tt_resize_taps(height, out_h, y0 + r, &v[r]) != 0) {
                return -1;
            }
        }
        for (ox = 0; ox < out_w; ox++) {
            if (tt_resize_taps(width, out_w, ox, &h) != 0) {
                return -1;
            }
            tt_resize_column(src, stride, channels, v, rows, &h, vertical_first, y0, ox, out_w,
                             out_w * out_h, lut, dst);
        }
    }
    return 0;
}
