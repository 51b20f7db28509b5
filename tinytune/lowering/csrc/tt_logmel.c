/* The log-mel front-end (tt_logmel.h): a frame is shifted left so that its largest sample has
 * PEAK_BITS bits, windowed (Q15), transformed by a radix-2 FFT whose stages halve their
 * outputs, its bins' power summed into mel bands (Q15 weights) and each band's energy written as
 * log2(E + 1) in Q8 less the frame's shift beyond HEADROOM. Every rounding is stated beside it;
 * tinytune/data/logmel.py is the same computation in numpy. Right shifts of negative values are
 * arithmetic (as every compiler tinytune builds with does). */
#include "tt_logmel.h"

#include <stddef.h>

#define TT_LOGMEL_HEADROOM 5
#define TT_LOGMEL_PEAK_BITS 20
#define TT_LOGMEL_FRACTION 8

int32_t tt_logmel_frames(const tt_logmel_spec *spec) {
    return 1 + (spec->clip - spec->window) / spec->hop;
}

static int32_t tt_bits(uint32_t v) {
    int32_t n = 0;
    while (v) {
        n++;
        v >>= 1;
    }
    return n;
}

int32_t tt_log2_q8(uint64_t energy) {
    uint64_t v = energy + 1u, rest = v, mantissa;
    int32_t msb = 0, out, bit, shift;
    for (shift = 32; shift >= 1; shift >>= 1) {
        if (rest >= ((uint64_t)1 << shift)) {
            msb += shift;
            rest >>= shift;
        }
    }
    mantissa = msb <= 30 ? v << (30 - msb) : v >> (msb - 30); /* Q30, in [1, 2) */
    out = msb << TT_LOGMEL_FRACTION;
    for (bit = TT_LOGMEL_FRACTION - 1; bit >= 0; bit--) {
        mantissa = (mantissa * mantissa) >> 30; /* truncated */
        if (mantissa >= ((uint64_t)1 << 31)) {
            out += 1 << bit;
            mantissa >>= 1;
        }
    }
    return out;
}

/* (a * w + 2^14) >> 15 in 64 bits */
static int32_t tt_q15(int64_t product) {
    return (int32_t)((product + (1 << 14)) >> 15);
}

/* x * c exactly, |x| < 2^31, |c| <= 2^15: on Armv6-M (no 32 x 32 -> 64-bit multiply) from two
 * 32-bit products of x's 16-bit halves instead of a library call; elsewhere as it is. */
static int64_t tt_mul_q15(int32_t x, int32_t c) {
#if defined(__ARM_ARCH_6M__)
    int32_t hi = x >> 16;            /* arithmetic: x = hi * 2^16 + lo */
    int32_t lo = (int32_t)(x & 0xFFFF);
    return (int64_t)(hi * c) * 65536 + (int64_t)(lo * c);
#else
    return (int64_t)x * c;
#endif
}

static void tt_fft(int32_t *re, int32_t *im, const tt_logmel_spec *spec) {
    const int16_t *cos_q15 = spec->cos_q15, *sin_q15 = spec->sin_q15;
    int32_t n = spec->fft, i, r = 0, half;
    for (i = 0; i < n; i++) { /* bit-reversed order: r is i with its bits reversed */
        if (r > i) {
            int32_t t = re[i];
            re[i] = re[r];
            re[r] = t;
            t = im[i];
            im[i] = im[r];
            im[r] = t;
        }
        {
            int32_t bit = n >> 1; /* add one to r from its top bit down */
            while (bit && (r & bit)) {
                r ^= bit;
                bit >>= 1;
            }
            r |= bit;
        }
    }
    for (half = 1; half < n; half *= 2) {
        int32_t step = n / (2 * half), start, j;
        for (j = 0; j < half; j++) { /* one twiddle for the stage's butterflies at j */
            int32_t c = cos_q15[j * step], sn = sin_q15[j * step];
            for (start = j; start < n; start += 2 * half) {
                int32_t b = start + half;
                /* (re[b] + i im[b]) (c - i sn), each part rounded to Q15 */
                int32_t tr = tt_q15(tt_mul_q15(re[b], c) + tt_mul_q15(im[b], sn));
                int32_t ti = tt_q15(tt_mul_q15(im[b], c) - tt_mul_q15(re[b], sn));
                int32_t ar = re[start], ai = im[start];
                re[start] = (ar + tr + 1) >> 1;
                im[start] = (ai + ti + 1) >> 1;
                re[b] = (ar - tr + 1) >> 1;
                im[b] = (ai - ti + 1) >> 1;
            }
        }
    }
}

static int tt_logmel_runs(const tt_logmel_spec *spec) {
    return spec->fft >= 8 && !(spec->fft & (spec->fft - 1)) && spec->window <= spec->fft &&
           spec->clip >= spec->window && spec->hop >= 1 && spec->bands >= 1;
}

int tt_logmel_frame(const tt_logmel_spec *spec, const int16_t *samples, int32_t n_samples,
                    int32_t frame, int32_t *scratch, int16_t *out) {
    int32_t *re = scratch, *im = scratch + spec->fft;
    int32_t start, peak = 0, shift, i, band;
    const uint16_t *w = spec->band_weights;
    if (!tt_logmel_runs(spec) || frame < 0 || frame >= tt_logmel_frames(spec)) {
        return -1;
    }
    start = frame * spec->hop;
    for (i = 0; i < spec->window; i++) {
        int32_t t = start + i, s = t < n_samples ? samples[t] : 0;
        if ((s < 0 ? -s : s) > peak) {
            peak = s < 0 ? -s : s;
        }
    }
    shift = TT_LOGMEL_PEAK_BITS - tt_bits((uint32_t)peak);
    for (i = 0; i < spec->window; i++) {
        int32_t t = start + i, s = t < n_samples ? samples[t] : 0;
        /* |s * hann| < 2^30 in 32 bits; |s| < 2^(20 - shift): shifted, it stays below 2^50 */
        int64_t product = (int32_t)(s * (int32_t)spec->hann[i]);
        re[i] = tt_q15((int64_t)((uint64_t)product << shift));
        im[i] = 0;
    }
    for (; i < spec->fft; i++) {
        re[i] = 0;
        im[i] = 0;
    }
    tt_fft(re, im, spec);
    for (band = 0; band < spec->bands; band++) {
        int32_t first = spec->band_first[band], count = spec->band_count[band], k;
        uint64_t energy = 0;
        for (k = 0; k < count; k++) {
            int64_t r = re[first + k], m = im[first + k];
            energy += (uint64_t)(r * r + m * m) * w[k];
        }
        w += count;
        out[band] = (int16_t)(tt_log2_q8(energy >> 15) -
                              2 * (shift - TT_LOGMEL_HEADROOM) * (1 << TT_LOGMEL_FRACTION));
    }
    return 0;
}

int tt_logmel(const tt_logmel_spec *spec, const int16_t *samples, int32_t n_samples,
              int32_t *scratch, int16_t *out) {
    int32_t frame;
    if (!tt_logmel_runs(spec)) {
        return -1;
    }
    for (frame = 0; frame < tt_logmel_frames(spec); frame++) {
        tt_logmel_frame(spec, samples, n_samples, frame, scratch, out + frame * spec->bands);
    }
    return 0;
}
