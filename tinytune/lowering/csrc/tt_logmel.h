/* The log-mel front-end of keyword audio, bit for bit tinytune.data.logmel.logmel: integer
 * arithmetic only, every table made by tinytune and passed in. */
#ifndef TT_LOGMEL_H
#define TT_LOGMEL_H

#include <stdint.h>

typedef struct {
    int32_t clip;     /* samples of a clip */
    int32_t window;   /* samples of a frame */
    int32_t hop;      /* samples between frames */
    int32_t fft;      /* FFT points, a power of two >= window */
    int32_t bands;    /* mel bands */
    const int16_t *hann;        /* window values, Q15 */
    const int16_t *cos_q15;     /* fft / 2 values: cos(2 pi k / fft), Q15 */
    const int16_t *sin_q15;     /* fft / 2 values: sin(2 pi k / fft), Q15 */
    const int16_t *band_first;  /* bands values: each band's first FFT bin */
    const int16_t *band_count;  /* bands values: each band's bins */
    const uint16_t *band_weights; /* the bands' weights, Q15, band after band */
} tt_logmel_spec;

/* The frames of a clip of spec->clip samples. */
int32_t tt_logmel_frames(const tt_logmel_spec *spec);

/* log2(energy + 1) in Q8 of an unsigned 64-bit energy. */
int32_t tt_log2_q8(uint64_t energy);

/* One frame's features, out[band]: what tt_logmel writes at out + frame * bands; a firmware
 * that computes a clip frame by frame needs no buffer of the clip's features. Returns 0, or -1
 * for a spec it cannot run or a frame outside the clip. */
int tt_logmel_frame(const tt_logmel_spec *spec, const int16_t *samples, int32_t n_samples,
                    int32_t frame, int32_t *scratch, int16_t *out);

/* The features of one clip: out[frame * bands + band], Q8 log2. samples: n_samples int16 values
 * (padded with zeros or cut to spec->clip); scratch: 2 * spec->fft int32 values. Returns 0, or
 * -1 for a spec it cannot run (fft not a power of two, window > fft, clip < window). */
int tt_logmel(const tt_logmel_spec *spec, const int16_t *samples, int32_t n_samples,
              int32_t *scratch, int16_t *out);

#endif
