/*
 * Test driver of tt_resize_bilinear_s8: reads frames from stdin until it ends, each as three
 * arrays (see tests/lowering/harness.py): int32 [width, height, stride, channels, out_w, out_h,
 * order], the uint8 frame and the int8 table (256); writes for each the int32 return value and
 * the 3 * out_w * out_h int8 output, which starts as 0x5A bytes (so that a refusal shows
 * whether it wrote anything). Every buffer is allocated to its exact size, for the address
 * sanitizer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt_int8.h"

enum { DT_I8 = 0, DT_I32 = 1, DT_U8 = 3 };

static void fail(const char *what) {
    fprintf(stderr, "image_driver: %s\n", what);
    exit(2);
}

/* An array of `dtype` (elements of `size` bytes); NULL at the end of the input. */
static void *read_array(int32_t dtype, size_t size, int32_t *count, int at_start) {
    int32_t head[2];
    void *data;
    if (fread(head, sizeof head, 1, stdin) != 1) {
        if (at_start && feof(stdin)) {
            return NULL;
        }
        fail("truncated input");
    }
    if (head[0] != dtype) {
        fail("unexpected dtype");
    }
    *count = head[1];
    data = malloc(head[1] ? (size_t)head[1] * size : 1);
    if (data == NULL) {
        fail("out of memory");
    }
    if (head[1] && fread(data, size, (size_t)head[1], stdin) != (size_t)head[1]) {
        fail("truncated array");
    }
    return data;
}

static void write_array(int32_t dtype, const void *data, size_t size, int32_t count) {
    int32_t head[2];
    head[0] = dtype;
    head[1] = count;
    fwrite(head, sizeof head, 1, stdout);
    if (count) {
        fwrite(data, size, (size_t)count, stdout);
    }
}

int main(void) {
    for (;;) {
        int32_t n, n_src, n_lut, rc, out_n;
        int32_t *p = (int32_t *)read_array(DT_I32, 4, &n, 1);
        uint8_t *src;
        int8_t *lut, *dst;
        if (p == NULL) {
            return 0;
        }
        if (n != 7) {
            fail("the parameters are 7 int32");
        }
        src = (uint8_t *)read_array(DT_U8, 1, &n_src, 0);
        lut = (int8_t *)read_array(DT_I8, 1, &n_lut, 0);
        if (n_lut != 256) {
            fail("the table has 256 entries");
        }
        out_n = p[4] > 0 && p[5] > 0 ? 3 * p[4] * p[5] : 0;
        dst = (int8_t *)malloc(out_n ? (size_t)out_n : 1);
        if (dst == NULL) {
            fail("out of memory");
        }
        memset(dst, 0x5A, out_n ? (size_t)out_n : 1);
        rc = tt_resize_bilinear_s8(src, p[0], p[1], p[2], p[3], p[4], p[5], p[6], lut, dst);
        write_array(DT_I32, &rc, 4, 1);
        write_array(DT_I8, dst, 1, out_n);
        free(p);
        free(src);
        free(lut);
        free(dst);
    }
}
