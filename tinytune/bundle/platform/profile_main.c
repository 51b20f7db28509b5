/*
 * Profiler: time every kernel call of the training step and print one measurement file
 * (format tinytune-latency/1) that `tinytune calibrate` fits; an audio model's bundle also times
 * its front-end (tt_input_from_pcm16 of one recorded clip: "frontend_s"), which the fit does not
 * use.
 *
 * tt_model.c, built with -DTT_PROFILE, calls tt_profile_mark(k) when the step starts (k = -1),
 * after its k-th kernel call and when it returns (k = TT_N_CALLS); each mark reads a counter:
 *
 *   Linux (host, aarch64 boards)  clock_gettime(CLOCK_MONOTONIC), nanoseconds.
 *   Cortex-M7 board               the DWT cycle counter, cycles at TT_CPU_HZ.
 *   Cortex-M7 under QEMU          (the DWT is not emulated: its control register reads 0) the
 *                                 MPS2 board's CMSDK timer 0 at 25 MHz; run with
 *                                 -icount shift=0,sleep=off, one tick is exactly 40 executed
 *                                 instructions, written as seconds at TT_CYCLES_PER_INSTRUCTION
 *                                 cycles each and TT_CPU_HZ.
 *   Cortex-M0+ (Armv6-M)          no cycle counter: under QEMU the MPS2 timer as above; on an
 *                                 RP2040 (-DTT_RP2040_TIMER) its 1 MHz timer, microseconds.
 *   RV32 under QEMU               the instret counter: instructions retired, exact under
 *                                 -icount shift=0, as seconds as above; on an ESP32-C3
 *                                 (-DTT_ESP32C3_CYCLES) its machine performance counter
 *                                 set to count cycles (CSRs 0x7E0-0x7E2), cycles at TT_CPU_HZ.
 *
 * After one untimed step it runs TT_PROFILE_STEPS timed steps and as many timed predictions
 * on the embedded training samples. A call's figure is its fastest over the steps; the step's
 * is the fastest whole step (every sample is kept). A mark costs a counter read, a few
 * instructions, which each call's figure includes.
 */
#include <stdint.h>
#include <stdio.h>

#include "tt_data.h"
#include "tt_model.h"
#include "tt_profile.h"

#ifndef TT_PROFILE_STEPS
#define TT_PROFILE_STEPS 10
#endif
#ifndef TT_CPU_HZ
#define TT_CPU_HZ TT_PROFILE_CLOCK_HZ
#endif
#ifndef TT_CYCLES_PER_INSTRUCTION
#define TT_CYCLES_PER_INSTRUCTION 1.0
#endif
#if defined(__x86_64__)
#define TT_PROFILE_ARCH "x86-64"
#elif defined(__aarch64__)
#define TT_PROFILE_ARCH "aarch64"
#elif defined(__ARM_ARCH_7EM__)
#define TT_PROFILE_ARCH "armv7e-m"
#elif defined(__ARM_ARCH_6M__)
#define TT_PROFILE_ARCH "armv6-m"
#elif defined(__riscv) && __riscv_xlen == 32
#define TT_PROFILE_ARCH "rv32"
#else
#define TT_PROFILE_ARCH "unknown"
#endif

#if defined(__linux__) || defined(__APPLE__)
#include <time.h>
typedef uint64_t tt_tick;
#ifndef TT_PROFILE_TARGET
#define TT_PROFILE_TARGET "host" /* the machine it runs on; name the board with -D */
#endif
static const char *tt_counter = "clock_gettime(CLOCK_MONOTONIC)";
static double tt_seconds_per_tick = 1e-9;
static int tt_instructions = 0; /* 1: the counter counts instructions, not time or cycles */

static void tt_counter_start(void) {}

static tt_tick tt_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (tt_tick)t.tv_sec * 1000000000u + (tt_tick)t.tv_nsec;
}
#elif defined(__arm__) && defined(__ARM_ARCH_7EM__)
typedef uint32_t tt_tick; /* differences are taken modulo 2^32 */
#ifndef TT_PROFILE_TARGET
#define TT_PROFILE_TARGET TT_PROFILE_DEVICE
#endif
#define TT_REG(address) (*(volatile uint32_t *)(address))
#define DEMCR TT_REG(0xE000EDFCu)
#define DWT_LAR TT_REG(0xE0001FB0u)
#define DWT_CTRL TT_REG(0xE0001000u)
#define DWT_CYCCNT TT_REG(0xE0001004u)
#define TIMER0_CTRL TT_REG(0x40000000u)
#define TIMER0_VALUE TT_REG(0x40000004u)
#define TIMER0_RELOAD TT_REG(0x40000008u)
static const char *tt_counter = "DWT cycle counter";
static double tt_seconds_per_tick = 1.0 / (double)TT_CPU_HZ;
static int tt_instructions = 0;

static void tt_counter_start(void) {
    DEMCR |= 1u << 24; /* TRCENA */
    DWT_LAR = 0xC5ACCE55u;
    DWT_CYCCNT = 0;
    DWT_CTRL |= 1u;
    if (DWT_CTRL == 0) { /* not emulated: QEMU's MPS2 board */
        tt_instructions = 1;
        tt_counter = "qemu-system-arm mps2 CMSDK timer 0 (-icount shift=0: 40 instructions "
                     "a tick)";
        tt_seconds_per_tick = 40.0 * TT_CYCLES_PER_INSTRUCTION / (double)TT_CPU_HZ;
        TIMER0_RELOAD = 0xFFFFFFFFu;
        TIMER0_VALUE = 0xFFFFFFFFu;
        TIMER0_CTRL = 1u;
    }
}

static tt_tick tt_now(void) {
    return tt_instructions ? (tt_tick)(0xFFFFFFFFu - TIMER0_VALUE) : (tt_tick)DWT_CYCCNT;
}
#elif defined(__arm__) && defined(__ARM_ARCH_6M__)
typedef uint32_t tt_tick; /* differences are taken modulo 2^32 */
#ifndef TT_PROFILE_TARGET
#define TT_PROFILE_TARGET TT_PROFILE_DEVICE
#endif
#define TT_REG(address) (*(volatile uint32_t *)(address))
#ifdef TT_RP2040_TIMER
#define TIMERAWL TT_REG(0x40054028u) /* the RP2040's 64-bit microsecond timer, low word */
static const char *tt_counter = "RP2040 timer (microseconds)";
static double tt_seconds_per_tick = 1e-6;
static int tt_instructions = 0;

static void tt_counter_start(void) {}

static tt_tick tt_now(void) {
    return (tt_tick)TIMERAWL;
}
#else
#define TIMER0_CTRL TT_REG(0x40000000u)
#define TIMER0_VALUE TT_REG(0x40000004u)
#define TIMER0_RELOAD TT_REG(0x40000008u)
static const char *tt_counter = "qemu-system-arm mps2 CMSDK timer 0 (-icount shift=0: 40 "
                                "instructions a tick)";
static double tt_seconds_per_tick = 40.0 * TT_CYCLES_PER_INSTRUCTION / (double)TT_CPU_HZ;
static int tt_instructions = 1;

static void tt_counter_start(void) {
    TIMER0_RELOAD = 0xFFFFFFFFu;
    TIMER0_VALUE = 0xFFFFFFFFu;
    TIMER0_CTRL = 1u;
}

static tt_tick tt_now(void) {
    return (tt_tick)(0xFFFFFFFFu - TIMER0_VALUE);
}
#endif
#elif defined(__riscv) && __riscv_xlen == 32
typedef uint32_t tt_tick; /* differences are taken modulo 2^32 */
#ifndef TT_PROFILE_TARGET
#define TT_PROFILE_TARGET TT_PROFILE_DEVICE
#endif
#ifdef TT_ESP32C3_CYCLES
static const char *tt_counter = "ESP32-C3 machine performance counter (cycles)";
static double tt_seconds_per_tick = 1.0 / (double)TT_CPU_HZ;
static int tt_instructions = 0;

/* -march=rv32imc leaves out the CSR instructions (Zicsr); the core has them */
#define TT_ZICSR(instruction) \
    ".option push\n\t.option arch, +zicsr\n\t" instruction "\n\t.option pop"

static void tt_counter_start(void) {
    __asm volatile(TT_ZICSR("csrw 0x7e0, %0") : : "r"(1u)); /* mpcer: count cycles */
    __asm volatile(TT_ZICSR("csrw 0x7e1, %0") : : "r"(1u)); /* mpcmr: counting on */
}

static tt_tick tt_now(void) {
    uint32_t cycles;
    __asm volatile(TT_ZICSR("csrr %0, 0x7e2") : "=r"(cycles)); /* mpccr */
    return cycles;
}
#else
static const char *tt_counter = "RISC-V instret counter (instructions retired; exact under "
                                "qemu-system-riscv32 -icount shift=0)";
static double tt_seconds_per_tick = TT_CYCLES_PER_INSTRUCTION / (double)TT_CPU_HZ;
static int tt_instructions = 1;

static void tt_counter_start(void) {}

static tt_tick tt_now(void) {
    uint32_t retired;
    __asm volatile("rdinstret %0" : "=r"(retired));
    return retired;
}
#endif
#else
#error "the profiler needs Linux (clock_gettime), an Armv7E-M or Armv6-M core, or RV32: add a counter"
#endif

static tt_tick tt_stamp[TT_N_CALLS + 2];
static tt_tick tt_best_call[TT_N_CALLS];
static double tt_step_s[TT_PROFILE_STEPS];

void tt_profile_mark(int32_t call) {
    tt_stamp[call + 1] = tt_now();
}

static void print_json_string(const char *text) {
    putchar('"');
    for (; *text; text++) {
        if (*text == '"' || *text == '\\') {
            putchar('\\');
        }
        putchar(*text);
    }
    putchar('"');
}

int main(void) {
    int32_t s, i;
    tt_tick best_step = 0, best_predict = 0;
#if TT_DATA_CLIPS
    static int8_t clip_input[TT_INPUT_BYTES];
    tt_tick best_frontend = 0;
#endif
    float loss = 0.0f;
    double median;
    tt_counter_start();
    tt_model_init();
    tt_train_step(tt_train_images[0], (int)tt_train_labels[0], &loss); /* untimed */
    for (s = 0; s < TT_PROFILE_STEPS; s++) {
        int k = s % TT_TRAIN_SAMPLES;
        tt_tick step, start;
        tt_train_step(tt_train_images[k], (int)tt_train_labels[k], &loss);
        step = (tt_tick)(tt_stamp[TT_N_CALLS + 1] - tt_stamp[0]);
        tt_step_s[s] = (double)step * tt_seconds_per_tick;
        if (s == 0 || step < best_step) {
            best_step = step;
        }
        for (i = 0; i < TT_N_CALLS; i++) {
            tt_tick t = (tt_tick)(tt_stamp[i + 1] - tt_stamp[i]);
            if (s == 0 || t < tt_best_call[i]) {
                tt_best_call[i] = t;
            }
        }
        start = tt_now();
        tt_predict(tt_train_images[k], NULL);
        step = (tt_tick)(tt_now() - start);
        if (s == 0 || step < best_predict) {
            best_predict = step;
        }
#if TT_DATA_CLIPS
        start = tt_now(); /* an audio model's front-end: one clip's samples to the input */
        tt_input_from_pcm16(tt_train_clips[k], TT_CLIP_SAMPLES, clip_input);
        step = (tt_tick)(tt_now() - start);
        if (s == 0 || step < best_frontend) {
            best_frontend = step;
        }
#endif
    }
    for (s = 1; s < TT_PROFILE_STEPS; s++) { /* insertion sort, for the median */
        double v = tt_step_s[s];
        for (i = s - 1; i >= 0 && tt_step_s[i] > v; i--) {
            tt_step_s[i + 1] = tt_step_s[i];
        }
        tt_step_s[i + 1] = v;
    }
    median = TT_PROFILE_STEPS % 2 ? tt_step_s[TT_PROFILE_STEPS / 2]
                                  : 0.5 * (tt_step_s[TT_PROFILE_STEPS / 2 - 1] +
                                           tt_step_s[TT_PROFILE_STEPS / 2]);

    printf("{\"format\": \"tinytune-latency/1\", \"device\": ");
    print_json_string(TT_PROFILE_TARGET);
    printf(", \"precision\": \"int8\", \"engine\": \"bundle\",\n \"machine\": {\"counter\": ");
    print_json_string(tt_counter);
    printf(", \"arch\": \"%s\", \"bundle_device\": ", TT_PROFILE_ARCH);
    print_json_string(TT_PROFILE_DEVICE);
    printf(", \"seconds_per_tick\": %.9e", tt_seconds_per_tick);
#if !(defined(__linux__) || defined(__APPLE__))
    printf(", \"clock_hz\": %.6e", (double)TT_CPU_HZ);
#endif
    if (tt_instructions) {
        printf(", \"cycles_per_instruction\": %.6g", (double)TT_CYCLES_PER_INSTRUCTION);
    }
    printf(", \"compiler\": ");
#if defined(__clang__)
    printf("\"clang ");
#elif defined(__GNUC__)
    printf("\"gcc ");
#else
    printf("\"");
#endif
#ifdef __VERSION__
    fputs(__VERSION__, stdout);
#endif
    putchar('"');
    printf(", \"steps\": %d},\n \"measurements\": [{\"name\": ", TT_PROFILE_STEPS);
    print_json_string(TT_PROFILE_NAME);
    printf(",\n  \"train_step_s\": %.9e, \"train_step_median_s\": %.9e, \"inference_s\": %.9e,\n",
           (double)best_step * tt_seconds_per_tick, median,
           (double)best_predict * tt_seconds_per_tick);
#if TT_DATA_CLIPS
    printf("  \"frontend_s\": %.9e,\n", (double)best_frontend * tt_seconds_per_tick);
#endif
    printf("  \"samples\": [");
    for (s = 0; s < TT_PROFILE_STEPS; s++) {
        printf("%s%.9e", s ? ", " : "", tt_step_s[s]);
    }
    printf("],\n  \"per_call\": [");
    for (i = 0; i < TT_N_CALLS; i++) {
        printf("%s\n   {\"op\": ", i ? "," : "");
        print_json_string(tt_profile_calls[i].op);
        printf(", \"kernel\": \"%s\", \"s\": %.9e}", tt_profile_calls[i].kernel,
               (double)tt_best_call[i] * tt_seconds_per_tick);
    }
    printf("],\n  \"graph\": ");
    for (i = 0; tt_profile_graph[i] != NULL; i++) {
        fputs(tt_profile_graph[i], stdout);
    }
    printf("}]}\n");
    return 0;
}
