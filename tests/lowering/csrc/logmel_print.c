/*
 * tt_logmel on the clips of logmel_clips.h (written by tests/lowering/test_logmel.py: the
 * front-end's tables and a few clips, as C arrays): prints each clip's return value, then its
 * features, one frame a line, for a target without stdin (a board under QEMU).
 */
#include <stdint.h>
#include <stdio.h>

#include "logmel_clips.h"
#include "tt_logmel.h"

static int32_t scratch[2 * LM_FFT];
static int16_t out[LM_FRAMES * LM_BANDS];

int main(void) {
    tt_logmel_spec spec = {LM_CLIP, LM_WINDOW, LM_HOP, LM_FFT, LM_BANDS, lm_hann, lm_cos,
                           lm_sin, lm_first, lm_count, lm_weights};
    int32_t c, f, b;
    for (c = 0; c < LM_CLIPS; c++) {
        int rc = tt_logmel(&spec, lm_clips[c], lm_lengths[c], scratch, out);
        printf("clip %ld: %d\n", (long)c, rc);
        for (f = 0; f < LM_FRAMES; f++) {
            for (b = 0; b < LM_BANDS; b++) {
                printf(b ? " %d" : "%d", out[f * LM_BANDS + b]);
            }
            printf("\n");
        }
    }
    return 0;
}
