/*
 * Instructions retired by tt_resize_bilinear_s8 on RV32IMC (the instret counter; exact under
 * qemu-system-riscv32 -icount shift=0): one line per frame size, "W H CHANNELS OUT COUNT".
 */
#include <stdint.h>
#include <stdio.h>

#include "tt_int8.h"

static uint8_t frame[640 * 480 * 3];
static int8_t out[3 * 128 * 128];
static int8_t table[256];

static uint32_t retired(void) {
    uint32_t n;
    __asm volatile("rdinstret %0" : "=r"(n));
    return n;
}

static void count(int32_t w, int32_t h, int32_t channels, int32_t side) {
    uint32_t before = retired();
    int rc = tt_resize_bilinear_s8(frame, w, h, w * channels, channels, side, side,
                                   TT_RESIZE_PILLOW13, table, out);
    uint32_t after = retired();
    printf("%ld %ld %ld %ld %lu\n", (long)w, (long)h, (long)channels, (long)side,
           rc == 0 ? (unsigned long)(after - before) : 0ul);
}

int main(void) {
    int32_t i;
    for (i = 0; i < (int32_t)sizeof frame; i++) {
        frame[i] = (uint8_t)(i * 7);
    }
    for (i = 0; i < 256; i++) {
        table[i] = (int8_t)(i - 128);
    }
    count(320, 240, 3, 32);
    count(320, 240, 3, 64);
    count(160, 120, 3, 32);
    count(320, 240, 1, 32);
    count(640, 480, 3, 128);
    return 0;
}
