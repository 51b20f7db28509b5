/*
 * Test driver of tt_logmel: reads the front-end's parameters and tables once, as int32 arrays
 * (see tests/lowering/harness.py): [clip, window, hop, fft, bands], the window, the cosines, the
 * sines, the bands' first bins, their counts and their weights; then clips until stdin ends,
 * each an int32 array of int16 samples. Writes for each clip the int32 return value and the
 * frames x bands features (int32 of the int16 values). Every buffer has its exact size, for the
 * address sanitizer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tt_logmel.h"

enum { DT_I32 = 1 };

static void fail(const char *what) {
    fprintf(stderr, "logmel_driver: %s\n", what);
    exit(2);
}

static int32_t *read_array(int32_t *count, int at_start) {
    int32_t head[2];
    int32_t *data;
    if (fread(head, sizeof head, 1, stdin) != 1) {
        if (at_start && feof(stdin)) {
            return NULL;
        }
        fail("truncated input");
    }
    if (head[0] != DT_I32) {
        fail("unexpected dtype");
    }
    *count = head[1];
    data = (int32_t *)malloc(head[1] ? (size_t)head[1] * 4 : 4);
    if (data == NULL) {
        fail("out of memory");
    }
    if (head[1] && fread(data, 4, (size_t)head[1], stdin) != (size_t)head[1]) {
        fail("truncated array");
    }
    return data;
}

static void *narrowed(const int32_t *values, int32_t n, int is_unsigned) {
    int32_t i;
    void *out = malloc(n ? (size_t)n * 2 : 2);
    if (out == NULL) {
        fail("out of memory");
    }
    for (i = 0; i < n; i++) {
        if (is_unsigned) {
            ((uint16_t *)out)[i] = (uint16_t)values[i];
        } else {
            ((int16_t *)out)[i] = (int16_t)values[i];
        }
    }
    return out;
}

static void write_array(const int32_t *data, int32_t count) {
    int32_t head[2];
    head[0] = DT_I32;
    head[1] = count;
    fwrite(head, sizeof head, 1, stdout);
    if (count) {
        fwrite(data, 4, (size_t)count, stdout);
    }
}

int main(void) {
    int32_t n, i, *p = read_array(&n, 0), *t;
    tt_logmel_spec spec;
    int32_t frames, *scratch;
    int16_t *out;
    if (n != 5) {
        fail("expected 5 parameters");
    }
    spec.clip = p[0];
    spec.window = p[1];
    spec.hop = p[2];
    spec.fft = p[3];
    spec.bands = p[4];
    t = read_array(&n, 0);
    spec.hann = (const int16_t *)narrowed(t, n, 0);
    t = read_array(&n, 0);
    spec.cos_q15 = (const int16_t *)narrowed(t, n, 0);
    t = read_array(&n, 0);
    spec.sin_q15 = (const int16_t *)narrowed(t, n, 0);
    t = read_array(&n, 0);
    spec.band_first = (const int16_t *)narrowed(t, n, 0);
    t = read_array(&n, 0);
    spec.band_count = (const int16_t *)narrowed(t, n, 0);
    t = read_array(&n, 0);
    spec.band_weights = (const uint16_t *)narrowed(t, n, 1);
    frames = tt_logmel_frames(&spec);
    scratch = (int32_t *)malloc((size_t)spec.fft * 2 * 4);
    out = (int16_t *)malloc((size_t)(frames * spec.bands) * 2);
    if (scratch == NULL || out == NULL) {
        fail("out of memory");
    }
    for (;;) {
        int32_t *clip = read_array(&n, 1), rc, *wide;
        int16_t *samples;
        if (clip == NULL) {
            break;
        }
        samples = (int16_t *)narrowed(clip, n, 0);
        rc = tt_logmel(&spec, samples, n, scratch, out);
        write_array(&rc, 1);
        wide = (int32_t *)malloc((size_t)(frames * spec.bands) * 4);
        if (wide == NULL) {
            fail("out of memory");
        }
        for (i = 0; i < frames * spec.bands; i++) {
            wide[i] = out[i];
        }
        write_array(wide, frames * spec.bands);
        free(wide);
        free(samples);
        free(clip);
    }
    return 0;
}
