/*
 * Example, and a smoke test of the bundle: fine-tune the bundled model on the embedded samples
 * (tt_data.c: a few of the data set's) for TT_EPOCHS epochs, one image per step, and print
 * after each epoch the mean training loss and the accuracy on the evaluation samples beside
 * the accuracy that tinytune's integer simulator computed for the same steps at export
 * (tt_expected_correct). Then save the trained parameters (tt_params_save, where a firmware
 * would write flash), reset the model (tt_model_init: the accuracy is the initial one again),
 * restore them (tt_params_load) and evaluate again: the accuracy before the save. These few
 * samples say whether the step trains as tinytune computed it, not what accuracy the search
 * measured. An audio model's samples are recorded clips (TT_DATA_CLIPS), a sensor model's its
 * values (TT_DATA_VALUES): the example makes each input of them with tt_input_from_pcm16() or
 * tt_input_from_values(), as a firmware does of its microphone's or its sensor's, and first
 * checks that every one gives the input the search computed. The output is the same, byte for byte, on every target (no floating point
 * formatting, a fixed shuffle).
 *
 * Build with -DTT_STACK_PAINT to first measure the stack that tt_train_step and tt_predict
 * (and tt_input_from_pcm16 or tt_input_from_values) take: each is called once with the stack
 * below it painted, and the deepest word it wrote is its depth (the model is then reset, and the
 * example goes on as without it). The manifest's stack_bytes bounds every one of them.
 *
 * Build with -DTT_DUMP to also print every step's logits and loss and, at the end (after the
 * restore), the trained parameters and the evaluation logits as hexadecimal bytes (for checking
 * the C against tinytune's integer simulator).
 *
 * The example is the function tt_example(), which returns 0; 1 on a bad label or overwritten
 * guard bytes; 2 when an accuracy differs from the simulator's or the restore failed. main()
 * calls it unless TT_EXAMPLE_NO_MAIN is defined (the Arduino library's src/tt_example.c, a
 * firmware that calls it). It prints with printf, or, where TT_EXAMPLE_WRITE names a function
 * `void f(const char *text)`, through that function a line or less at a time (the Arduino
 * sketch's Serial).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tt_data.h"
#include "tt_model.h"

int tt_example(void);

#ifdef TT_EXAMPLE_WRITE
#include <stdarg.h>

void TT_EXAMPLE_WRITE(const char *text);

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static void tt_out(const char *format, ...) {
    char text[128];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    TT_EXAMPLE_WRITE(text);
}
#else
#define tt_out printf
#endif

/* xorshift32: the same sample order on every target (and on every call of tt_example) */
#define TT_RNG_SEED 0x2545F491u
static uint32_t tt_rng = TT_RNG_SEED;

static uint32_t next_random(void) {
    tt_rng ^= tt_rng << 13;
    tt_rng ^= tt_rng >> 17;
    tt_rng ^= tt_rng << 5;
    return tt_rng;
}

static void shuffle(int order[], int n) {
    int i;
    for (i = n - 1; i > 0; i--) {
        int j = (int)(next_random() % (uint32_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* value with four decimals, from an integer count of 1e-4 */
static void print_fixed4(double value) {
    if (!(value >= 0.0 && value < 1.0e9)) {
        tt_out("overflow");
        return;
    }
    {
        long units = (long)(value * 10000.0 + 0.5);
        tt_out("%ld.%04ld", units / 10000, units % 10000);
    }
}

static void print_accuracy(int correct, int total) {
    long basis_points = (long)correct * 10000L / (long)total;
    tt_out("accuracy %d/%d %ld.%02ld%%", correct, total, basis_points / 100, basis_points % 100);
}

#ifdef TT_DUMP
static void print_hex(const void *data, int32_t nbytes) {
    const uint8_t *bytes = (const uint8_t *)data;
    int32_t i;
    for (i = 0; i < nbytes; i++) {
        tt_out("%02x", (unsigned)bytes[i]);
    }
}
#endif

#ifdef TT_STACK_PAINT
/* The painted window below the caller's stack pointer: within the stack a bare-metal image
 * reserves (8 KB in platform/cortex_m7.ld and picolibc's), larger on Linux. */
#ifndef TT_STACK_PAINT_BYTES
#if defined(__linux__)
#define TT_STACK_PAINT_BYTES 262144
#else
#define TT_STACK_PAINT_BYTES 7168
#endif
#endif
#define TT_PAINT 0xA5A5A5A5u
#if defined(__arm__) || defined(__aarch64__)
#define TT_READ_SP(sp) __asm__ volatile("mov %0, sp" : "=r"(sp))
#elif defined(__riscv)
#define TT_READ_SP(sp) __asm__ volatile("mv %0, sp" : "=r"(sp))
#elif defined(__x86_64__)
#define TT_READ_SP(sp) __asm__ volatile("mov %%rsp, %0" : "=r"(sp))
#else
#error "TT_STACK_PAINT: no way to read the stack pointer on this target"
#endif
/* `depth` = the bytes below the stack pointer that `call` wrote, painted in the caller's own
 * frame (a function that painted would paint its own frame) */
#define TT_STACK_OF(call, depth)                                                               \
    do {                                                                                       \
        uintptr_t sp_;                                                                         \
        volatile uint32_t *w_;                                                                 \
        TT_READ_SP(sp_);                                                                       \
        for (w_ = (volatile uint32_t *)(sp_ - TT_STACK_PAINT_BYTES); (uintptr_t)w_ < sp_; w_++) { \
            *w_ = TT_PAINT;                                                                    \
        }                                                                                      \
        (void)(call);                                                                          \
        for (w_ = (volatile uint32_t *)(sp_ - TT_STACK_PAINT_BYTES); (uintptr_t)w_ < sp_ &&    \
                                                                      *w_ == TT_PAINT;         \
             w_++) {                                                                           \
        }                                                                                      \
        depth = (long)(sp_ - (uintptr_t)w_);                                                   \
    } while (0)
#endif

#if TT_DATA_CLIPS || TT_DATA_VALUES
/* The input of a recorded sample, made as a firmware makes it of its microphone's samples or
 * its sensor's values. */
static int8_t tt_recorded_input[TT_INPUT_BYTES];

#if TT_DATA_CLIPS
#define TT_RECORDED_WORD "clips"
#define TT_RECORDED_TRAIN tt_train_clips
#define TT_RECORDED_EVAL tt_eval_clips
#define TT_MAKE_INPUT(recorded) tt_input_from_pcm16((recorded), TT_CLIP_SAMPLES, tt_recorded_input)
#else
#define TT_RECORDED_WORD "windows"
#define TT_RECORDED_TRAIN tt_train_values
#define TT_RECORDED_EVAL tt_eval_values
#define TT_MAKE_INPUT(recorded) tt_input_from_values((recorded), tt_recorded_input)
#endif

/* the input made of a recorded sample (check_front_end has checked that it is made) */
static const int8_t *recorded_input(int made) {
    (void)made;
    return tt_recorded_input;
}
#define TRAIN_INPUT(k) recorded_input(TT_MAKE_INPUT(TT_RECORDED_TRAIN[k]))
#define EVAL_INPUT(k) recorded_input(TT_MAKE_INPUT(TT_RECORDED_EVAL[k]))

/* 1 when every recorded sample gives the search's input (tt_*_images), byte for byte. */
static int check_front_end(void) {
    int i, same = 0, total = TT_TRAIN_SAMPLES + TT_EVAL_SAMPLES;
    for (i = 0; i < TT_TRAIN_SAMPLES; i++) {
        same += TT_MAKE_INPUT(TT_RECORDED_TRAIN[i]) == 0 &&
                memcmp(tt_recorded_input, tt_train_images[i], TT_INPUT_BYTES) == 0;
    }
    for (i = 0; i < TT_EVAL_SAMPLES; i++) {
        same += TT_MAKE_INPUT(TT_RECORDED_EVAL[i]) == 0 &&
                memcmp(tt_recorded_input, tt_eval_images[i], TT_INPUT_BYTES) == 0;
    }
    tt_out("front-end: %d/%d " TT_RECORDED_WORD " give the search's input, byte for byte\n", same,
           total);
    return same == total;
}
#else
#define TRAIN_INPUT(k) (tt_train_images[k])
#define EVAL_INPUT(k) (tt_eval_images[k])

static int check_front_end(void) {
    return 1;
}
#endif

static int evaluate(void) {
    int i, correct = 0;
    for (i = 0; i < TT_EVAL_SAMPLES; i++) {
        if (tt_predict(EVAL_INPUT(i), NULL) == (int)tt_eval_labels[i]) {
            correct++;
        }
    }
    return correct;
}

/* " (simulator: k/n)" after an accuracy, and whether the count is the simulator's */
static int check_expected(int epoch, int correct) {
#if TT_EXPECTED_KNOWN
    tt_out(" (simulator: %d/%d)", (int)tt_expected_correct[epoch], TT_EVAL_SAMPLES);
    return correct == (int)tt_expected_correct[epoch];
#else
    (void)epoch;
    (void)correct;
    return 1;
#endif
}

/* The blob of the trained parameters: where a firmware would write flash. */
static uint8_t tt_saved[TT_PARAMS_BYTES];

/* Save, reset, restore: 1 when the restored parameters evaluate as the saved ones. */
static int save_reset_restore(int initial, int trained) {
    int saved, reset, loaded, restored;
    saved = tt_params_save(tt_saved, (int32_t)sizeof tt_saved);
    tt_out("saved %ld bytes of trained parameters (tt_params_save: %d), CRC-32 %02x%02x%02x%02x\n",
           (long)tt_params_size(), saved, (unsigned)tt_saved[23], (unsigned)tt_saved[22],
           (unsigned)tt_saved[21], (unsigned)tt_saved[20]);
    tt_model_init();
    reset = evaluate();
    tt_out("after tt_model_init: ");
    print_accuracy(reset, TT_EVAL_SAMPLES);
    tt_out(" (before training: %d/%d)\n", initial, TT_EVAL_SAMPLES);
    loaded = tt_params_load(tt_saved, (int32_t)sizeof tt_saved);
    restored = evaluate();
    tt_out("after tt_params_load (%d): ", loaded);
    print_accuracy(restored, TT_EVAL_SAMPLES);
    tt_out(" (before the save: %d/%d)\n", trained, TT_EVAL_SAMPLES);
    return saved == TT_PARAMS_OK && loaded == TT_PARAMS_OK && reset == initial &&
           restored == trained;
}

int tt_example(void) {
    static int order[TT_TRAIN_SAMPLES];
    int epoch, i, initial, correct, as_expected, restored, front_end;
#ifdef TT_DUMP
    int step = 0;
#endif
    tt_model_init();
    tt_rng = TT_RNG_SEED;
    tt_out("tinytune bundle: arena %ld B, scratch %ld B, exponents %ld B, %d calls per step\n",
           (long)TT_ARENA_BYTES, (long)TT_SCRATCH_BYTES, (long)TT_EXPONENT_BYTES, TT_N_CALLS);
    tt_out("smoke test: %d training samples, %d %s, accuracy on %d evaluation samples "
           "(not the search's accuracy)\n",
           TT_TRAIN_SAMPLES, TT_EPOCHS, TT_EPOCHS == 1 ? "epoch" : "epochs", TT_EVAL_SAMPLES);
#ifdef TT_STACK_PAINT
    {
        long train = 0, predict = 0;
        float loss = 0.0f;
#if TT_DATA_CLIPS || TT_DATA_VALUES
        long input = 0;
        TT_STACK_OF(TT_MAKE_INPUT(TT_RECORDED_TRAIN[0]), input);
        tt_out("stack: %ld B in tt_input_from_%s (painted)\n", input,
               TT_DATA_CLIPS ? "pcm16" : "values");
#endif
#ifdef TT_INPUT_FRAMES
        {
            /* a frame of twice the input's sides, resized down to it */
            static const uint8_t frame[2 * TT_INPUT_HEIGHT][2 * TT_INPUT_WIDTH][3];
            static int8_t made[TT_INPUT_BYTES];
            long input = 0;
            TT_STACK_OF(tt_quantize_rgb888(&frame[0][0][0], 2 * TT_INPUT_WIDTH,
                                           2 * TT_INPUT_HEIGHT, 6 * TT_INPUT_WIDTH, made),
                        input);
            tt_out("stack: %ld B in tt_quantize_rgb888 (painted)\n", input);
        }
#endif
        TT_STACK_OF(tt_predict(tt_train_images[0], NULL), predict);
        TT_STACK_OF(tt_train_step(tt_train_images[0], (int)tt_train_labels[0], &loss), train);
        tt_out("stack: %ld B in tt_train_step, %ld B in tt_predict (painted, of %d)\n", train,
               predict, TT_STACK_PAINT_BYTES);
        tt_model_init();
    }
#endif
    front_end = check_front_end();
    initial = evaluate();
    tt_out("epoch 0 loss - ");
    print_accuracy(initial, TT_EVAL_SAMPLES);
    as_expected = check_expected(0, initial);
    tt_out("\n");
    correct = initial;
    for (i = 0; i < TT_TRAIN_SAMPLES; i++) {
        order[i] = i;
    }
    for (epoch = 1; epoch <= TT_EPOCHS; epoch++) {
        double total = 0.0;
#if TT_LR_HALVING
        /* the rate of epoch e is TT_LEARNING_RATE / 2^(e-1), as the device's accuracy was
         * measured */
        tt_set_lr_halvings(epoch - 1 < TT_LR_MAX_HALVINGS ? epoch - 1 : TT_LR_MAX_HALVINGS);
#endif
        shuffle(order, TT_TRAIN_SAMPLES);
        for (i = 0; i < TT_TRAIN_SAMPLES; i++) {
            int k = order[i];
            float loss = 0.0f;
#ifdef TT_DUMP
            float logits[TT_N_CLASSES];
            tt_predict(TRAIN_INPUT(k), logits);
#endif
            if (tt_train_step(TRAIN_INPUT(k), (int)tt_train_labels[k], &loss) != 0) {
                tt_out("sample %d: label %d is not a class\n", k, (int)tt_train_labels[k]);
                return 1;
            }
            total += (double)loss;
#ifdef TT_DUMP
            tt_out("step %d sample %d loss ", step, k);
            print_hex(&loss, (int32_t)sizeof loss);
            tt_out(" logits ");
            print_hex(logits, (int32_t)sizeof logits);
            tt_out("\n");
            step++;
#endif
        }
        correct = evaluate();
        tt_out("epoch %d loss ", epoch);
        print_fixed4(total / TT_TRAIN_SAMPLES);
        tt_out(" ");
        print_accuracy(correct, TT_EVAL_SAMPLES);
        as_expected = check_expected(epoch, correct) && as_expected;
        tt_out("\n");
    }
    restored = save_reset_restore(initial, correct);
#ifdef TT_DUMP
    for (i = 0; i < TT_N_PARAMS; i++) {
        const tt_param_view *p = tt_param(i);
        tt_out("param %s %c ", p->name, p->dtype);
        print_hex(p->data, p->nbytes);
        tt_out("\n");
    }
    for (i = 0; i < TT_EVAL_SAMPLES; i++) {
        float logits[TT_N_CLASSES];
        int predicted = tt_predict(EVAL_INPUT(i), logits);
        tt_out("eval %d class %d logits ", i, predicted);
        print_hex(logits, (int32_t)sizeof logits);
        tt_out("\n");
    }
#endif
    if (!as_expected || !restored || !front_end) {
        tt_out("smoke test FAILED: %s\n",
               !front_end     ? "a recorded sample's input is not the search's"
               : as_expected ? "the restore"
                             : "an accuracy is not the simulator's");
    } else if (TT_EXPECTED_KNOWN) {
        tt_out("smoke test passed: every accuracy is the simulator's, the restore exact\n");
    } else {
        tt_out("smoke test passed: the restore exact (no simulator counts for so many steps)\n");
    }
#ifdef TT_GUARD
    if (!tt_guard_intact()) {
        tt_out("guard bytes around the arena were overwritten\n");
        return 1;
    }
    tt_out("guard bytes intact\n");
#endif
    if (!as_expected || !restored || !front_end) {
        return 2;
    }
    return 0;
}

#ifndef TT_EXAMPLE_NO_MAIN
int main(void) {
    return tt_example();
}
#endif
