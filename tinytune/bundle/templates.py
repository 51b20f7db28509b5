"""How each kernel call of a lowered step is written in C: one template per kernel kind.

A template has the statement of the call and, when the C prototype takes structs, the
file-scope ``static const`` objects that hold them (their fields are known when the bundle is
rendered; only gradient exponents and the label change at run time). Placeholders are the
operand names of :data:`tinytune.lowering.program.KERNELS`, each replaced by its rendered value
(:mod:`tinytune.bundle.render`), and ``$id``, a prefix unique to the call for the names of its
structs. Pointers arrive untyped (``TT_ARENA(offset)``, a constant array, ``NULL``): the casts
in the templates give them the types of the prototypes in ``tt_int8.h``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "FRAME_DECLS",
    "FRAME_IMPL",
    "IMAGE_INPUT_DOC",
    "KERNEL_TEMPLATES",
    "MODEL_HEADER",
    "MODEL_SOURCE",
    "PROFILE_HEADER",
    "TENSOR_INPUT_DOC",
    "KernelTemplate",
]


@dataclass(frozen=True)
class KernelTemplate:
    """The C of one kernel call.

    Attributes:
        call: the statement, inside the step's function.
        decls: file-scope declarations the statement refers to (``$id``-prefixed), or "".
    """

    call: str
    decls: str = ""


_GEOM = "static const tt_conv_geom ${id}_geom = $geom;\n"
_WEIGHT = (
    "static const tt_weight ${id}_w = {(const int8_t *)$w_train, (const int8_t *)$w_frozen, $k};\n"
)
_REQUANT = (
    "static const tt_requant ${id}_q = {$x_zero, $y_zero, $act_min, $act_max, "
    "(const int32_t *)$mult, (const int32_t *)$shift};\n"
)
_GRAD_X = "static const tt_grad ${id}_gx = {(int8_t *)$gx, (int32_t *)$gx_exp, $accumulate};\n"

# The input as tt_model.h describes it: an RGB image (with the frame helpers that make it from
# a camera's frame), or any other tensor (a spectrogram, a sensor window), fed as it is.
IMAGE_INPUT_DOC = """\
 * An int8 image of TT_INPUT_BYTES: TT_INPUT_CHANNELS planes (R, G, B) of TT_INPUT_HEIGHT rows of
 * TT_INPUT_WIDTH, channels first; real value = TT_INPUT_SCALE * (q - TT_INPUT_ZERO).
 * $input_rule
 * tt_quantize_rgb888() and tt_quantize_grey8() make that input from an 8-bit frame as tinytune's
 * image-folder data set makes it from an image file, bit for bit: Pillow $pillow's bilinear
 * resize of 8-bit RGB to TT_INPUT_WIDTH x TT_INPUT_HEIGHT (the aspect ratio not kept), then
 * 0..255 to [-1, 1] and to int8 through one 256-entry table that tinytune computed with its
 * own functions (tt_model.c)."""
TENSOR_INPUT_DOC = """\
 * An int8 tensor of TT_INPUT_BYTES: TT_INPUT_CHANNELS planes of TT_INPUT_HEIGHT rows of
 * TT_INPUT_WIDTH, channels first; real value = TT_INPUT_SCALE * (q - TT_INPUT_ZERO), so a real
 * value v is q = round(v / TT_INPUT_SCALE) + TT_INPUT_ZERO (ties to even), clamped to
 * [-128, 127].
 * $input_rule"""
FRAME_DECLS = """
/* 1: the input is an RGB image, and the two functions below make it of a camera's frame. */
#define TT_INPUT_FRAMES 1

/* An 8-bit RGB frame (3 bytes a pixel: R, G, B; rows `stride` bytes apart) to the model's
 * input in dst[TT_INPUT_BYTES] (a palette, RGBA or RGB565 frame: expand it to RGB888 first;
 * alpha is dropped, as Pillow's convert("RGB") drops it). Returns 0, or -1 (dst untouched) for
 * a NULL pointer, a side outside [1, TT_RESIZE_MAX_SIDE], stride < 3 * width, or a frame more
 * than TT_RESIZE_MAX_RATIO times the input's side on either axis (kernels/tt_int8.h: 16 unless
 * defined otherwise; decimate a larger frame first, e.g. by the camera's scaler: the input is
 * then the rule's for the decimated frame). Needs no buffer besides about 1.2 KB of stack
 * (TT_RESIZE_ROWS); its coefficients are computed in double precision, in software on a core
 * without a double-precision FPU (the README says what that costs). */
int tt_quantize_rgb888(const uint8_t *src, int32_t width, int32_t height, int32_t stride,
                       int8_t *dst);

/* An 8-bit grey frame (1 byte a pixel; rows `stride` bytes apart) to the model's input: as its
 * RGB image, R = G = B = L (Pillow's convert("RGB") of a grey image), so the three planes are
 * equal. Returns as tt_quantize_rgb888(), with stride < width refused. */
int tt_quantize_grey8(const uint8_t *src, int32_t width, int32_t height, int32_t stride,
                      int8_t *dst);
"""
FRAME_IMPL = """
/* ---- the input -------------------------------------------------------------------------- */

/* The model's int8 input of each 8-bit sample: tinytune's image-folder mapping (0..255 to
 * [-1, 1] in float32) and input quantization, evaluated by tinytune on all 256 values. */
static const int8_t tt_input_table[256] = {
$input_table
};

int tt_quantize_rgb888(const uint8_t *src, int32_t width, int32_t height, int32_t stride,
                       int8_t *dst) {
    return tt_resize_bilinear_s8(src, width, height, stride, 3, TT_INPUT_WIDTH, TT_INPUT_HEIGHT,
                                 $resize_order, tt_input_table, dst);
}

int tt_quantize_grey8(const uint8_t *src, int32_t width, int32_t height, int32_t stride,
                      int8_t *dst) {
    return tt_resize_bilinear_s8(src, width, height, stride, 1, TT_INPUT_WIDTH, TT_INPUT_HEIGHT,
                                 $resize_order, tt_input_table, dst);
}
"""

KERNEL_TEMPLATES: dict[str, KernelTemplate] = {
    "conv2d_s8": KernelTemplate(
        decls=_GEOM + _WEIGHT + _REQUANT,
        call=(
            "tt_conv2d_s8(&${id}_geom, (const int8_t *)$x, &${id}_w, (const int32_t *)$bias, "
            "&${id}_q, (int8_t *)$y, (uint8_t *)$mask);"
        ),
    ),
    "conv2d_inplace_s8": KernelTemplate(
        decls=_GEOM + _WEIGHT + _REQUANT,
        call=(
            "tt_conv2d_inplace_s8(&${id}_geom, (int8_t *)$xy, &${id}_w, "
            "(const int32_t *)$bias, &${id}_q, (int8_t *)$channel, (uint8_t *)$mask);"
        ),
    ),
    "window_s8": KernelTemplate(
        "tt_window_s8((const int8_t *)$src, $channels, $src_h, $src_w, $src_r, $src_c, $h, $w, "
        "(int8_t *)$dst, $dst_h, $dst_w, $dst_r, $dst_c);"
    ),
    "act_table_s8": KernelTemplate(
        "tt_act_table_s8((const int8_t *)$pre, (const int8_t *)$table, $n, (int8_t *)$y);"
    ),
    "mul_s8": KernelTemplate(
        "tt_mul_s8((const int8_t *)$x, (const int8_t *)$s, $channels, $hw, $x_zero, $s_zero, "
        "$mult, $shift, $y_zero, (int8_t *)$y);"
    ),
    "add_s8": KernelTemplate(
        "tt_add_s8((const int8_t *)$a, (const int8_t *)$b, $n, $a_zero, $b_zero, $a_mult, "
        "$b_mult, $shift, $y_zero, (int8_t *)$y);"
    ),
    "add_act_s8": KernelTemplate(
        "tt_add_act_s8((const int8_t *)$a, (const int8_t *)$b, $n, $a_zero, $b_zero, $a_mult, "
        "$b_mult, $shift, $y_zero, $act_min, $act_max, (int8_t *)$y, (uint8_t *)$mask);"
    ),
    "gap_s8": KernelTemplate(
        "tt_gap_s8((const int8_t *)$x, $channels, $hw, $x_zero, $mult, $shift, $y_zero, "
        "(int8_t *)$y);"
    ),
    "avgpool_s8": KernelTemplate(
        "tt_avgpool_s8((const int8_t *)$x, $channels, $in_h, $in_w, $ratio, $ratio_w, $x_zero, "
        "$mult, $shift, $y_zero, (int8_t *)$y);"
    ),
    "maxpool_s8": KernelTemplate(
        decls="static const tt_pool_geom ${id}_geom = $geom;\n",
        call="tt_maxpool_s8((const int8_t *)$x, &${id}_geom, (int8_t *)$y);",
    ),
    "upsample_s8": KernelTemplate(
        decls=(
            "static const tt_interp_axis ${id}_rows = $rows;\n"
            "static const tt_interp_axis ${id}_cols = $cols;\n"
        ),
        call=(
            "tt_upsample_s8((const int8_t *)$x, $channels, &${id}_rows, &${id}_cols, $x_zero, "
            "$mult, $shift, $y_zero, (int8_t *)$y);"
        ),
    ),
    "groupnorm_f32": KernelTemplate(
        decls="static const tt_groupnorm ${id}_norm = $norm;\n",
        call=(
            "tt_groupnorm_f32((const int8_t *)$x, &${id}_norm, (const float *)$gamma, "
            "(const float *)$beta, (float *)$stats, (int8_t *)$y, (uint8_t *)$mask);"
        ),
    ),
    "linear_f32": KernelTemplate(
        "tt_linear_f32((const int8_t *)$x, $in_f, $x_zero, $x_scale, (const float *)$w, "
        "(const float *)$b, $out_f, (float *)$logits);"
    ),
    "copy_s8": KernelTemplate("memcpy($dst, $src, $n);"),
    # the loss is read before the gradient overwrites the logits in place
    "softmax_xent_grad": KernelTemplate(
        "if (loss_out != NULL) {\n"
        "    *loss_out = tt_cross_entropy((const float *)$logits, $n, $label);\n"
        "}\n"
        "tt_softmax_xent_grad((const float *)$logits, $n, $label, (float *)$grad);"
    ),
    "linear_f32_backward": KernelTemplate(
        "tt_linear_f32_backward((const int8_t *)$x, $in_f, $x_zero, $x_scale, (float *)$w, "
        "(float *)$b, $out_f, (const float *)$grad, $lr * tt_lr_scale, (int8_t *)$gx, "
        "(int32_t *)$gx_exp);"
    ),
    "grad_mask": KernelTemplate("tt_grad_mask((int8_t *)$g, (const uint8_t *)$mask, $n);"),
    "grad_act_table": KernelTemplate(
        "tt_grad_act_table((int8_t *)$g, (int32_t *)$g_exp, (const int8_t *)$pre, "
        "(const int16_t *)$table, $frac_bits, $n);"
    ),
    "mul_grad_x": KernelTemplate(
        decls=_GRAD_X,
        call=(
            "tt_mul_grad_x((const int8_t *)$gy, $gy_exp, (const int8_t *)$s, $channels, $hw, "
            "$s_zero, $s_mult, $frac_bits, &${id}_gx);"
        ),
    ),
    "mul_grad_scale": KernelTemplate(
        decls=_GRAD_X,
        call=(
            "tt_mul_grad_scale((const int8_t *)$gy, $gy_exp, (const int8_t *)$x, $channels, "
            "$hw, $x_zero, $x_mult, $frac_bits, &${id}_gx);"
        ),
    ),
    "conv2d_grad_input": KernelTemplate(
        decls=_GEOM + _WEIGHT + _GRAD_X,
        call=(
            "tt_conv2d_grad_input(&${id}_geom, (const int8_t *)$gy, $gy_exp, &${id}_w, "
            "(const int32_t *)$w_mult, $frac_bits, &${id}_gx);"
        ),
    ),
    "gap_grad_input": KernelTemplate(
        decls=_GRAD_X,
        call=(
            "tt_gap_grad_input((const int8_t *)$gy, $gy_exp, $channels, $hw, $hw_mult, "
            "$frac_bits, &${id}_gx);"
        ),
    ),
    "avgpool_grad_input": KernelTemplate(
        decls=_GRAD_X,
        call=(
            "tt_avgpool_grad_input((const int8_t *)$gy, $gy_exp, $channels, $in_h, $in_w, "
            "$ratio, $ratio_w, $area_mult, $frac_bits, &${id}_gx);"
        ),
    ),
    "maxpool_grad_input": KernelTemplate(
        decls="static const tt_pool_geom ${id}_geom = $geom;\n" + _GRAD_X,
        call=(
            "tt_maxpool_grad_input((const int8_t *)$gy, $gy_exp, (const int8_t *)$x, "
            "&${id}_geom, &${id}_gx);"
        ),
    ),
    "upsample_grad_input": KernelTemplate(
        decls=(
            "static const tt_interp_axis ${id}_rows = $rows;\n"
            "static const tt_interp_axis ${id}_cols = $cols;\n" + _GRAD_X
        ),
        call=(
            "tt_upsample_grad_input((const int8_t *)$gy, $gy_exp, $channels, &${id}_rows, "
            "&${id}_cols, $frac_bits, &${id}_gx);"
        ),
    ),
    "groupnorm_f32_backward": KernelTemplate(
        decls="static const tt_groupnorm ${id}_norm = $norm;\n",
        call=(
            "tt_groupnorm_f32_backward((const int8_t *)$gy, $gy_exp, (const int8_t *)$x, "
            "&${id}_norm, (float *)$gamma, (float *)$beta, (const float *)$stats, "
            "$lr * tt_lr_scale, (int8_t *)$gx, (int32_t *)$gx_exp);"
        ),
    ),
    "grad_accumulate": KernelTemplate(
        decls=(
            "static const tt_grad ${id}_dst = {(int8_t *)$dst, (int32_t *)$dst_exp, "
            "$accumulate};\n"
        ),
        call="tt_grad_accumulate((const int8_t *)$g, $g_exp, $n, &${id}_dst);",
    ),
    "update_bias": KernelTemplate(
        "tt_update_bias((const int8_t *)$gy, $gy_exp - tt_lr_halvings, $channels, $hw, "
        "(int32_t *)$bias, (const int32_t *)$mult, (const int32_t *)$shift);"
    ),
    "conv2d_update_weight": KernelTemplate(
        decls=_GEOM,
        call=(
            "tt_conv2d_update_weight(&${id}_geom, (const int8_t *)$gy, $gy_exp - tt_lr_halvings, "
            "(const int8_t *)$x_saved, $x_zero, (int8_t *)$w_train, $k, (const int32_t *)$mult, "
            "(const int32_t *)$shift);"
        ),
    ),
}


# --- the model files -------------------------------------------------------------------------

MODEL_HEADER = """\
/*
 * tt_model.h: the on-device training step of $title.
 * Generated by tinytune; portable C99, no heap, no global state besides the buffers below and
 * the rate's halvings (tt_set_lr_halvings).
 *
 * Memory (RAM):
 *   TT_ARENA_BYTES     one static int8 arena laid out by the memory planner: activations,
 *                      ReLU masks, kept inputs, activation gradients and the trained
 *                      parameters, each at the planner's offset;
 *   TT_SCRATCH_BYTES   float32 logits (and the statistics of a GroupNorm nothing
 *                      back-propagates through), outside the arena;
 *   TT_EXPONENT_BYTES  one int32 block exponent per gradient tensor.
 * Constants (flash): TT_FLASH_BYTES of frozen weights, multipliers and initial values.
 */
#ifndef TT_MODEL_H
#define TT_MODEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the input ----------------------------------------------------------------------------
$input_doc */
#define TT_INPUT_CHANNELS $channels
#define TT_INPUT_HEIGHT $height
#define TT_INPUT_WIDTH $width
#define TT_INPUT_BYTES $input_bytes
#define TT_INPUT_SCALE $input_scale
#define TT_INPUT_ZERO $input_zero

/* ---- the classes ----------------------------------------------------------------------------
 * TT_N_CLASSES classes in the order of the labels and of the logits (the data set's order: an
 * image folder's sub-folders sorted by name), as UTF-8 strings: TT_CLASS_NAMES initializes an
 * array of them, tt_class_name(i) returns the i-th. The classifier has exactly these outputs:
 * another class, or another order, needs a new search and export. */
#define TT_N_CLASSES $n_classes
#define TT_CLASS_NAMES $class_names

#define TT_ARENA_BYTES $arena_bytes
#define TT_SCRATCH_BYTES $scratch_bytes
#define TT_EXPONENT_BYTES $exponent_bytes
#define TT_FLASH_BYTES $flash_bytes
#define TT_N_PARAMS $n_params
#define TT_N_CALLS $n_calls
/* Plain SGD (no momentum) at this rate, QAS-scaled for the int8 parameters (MCUNetV3 Eq. 4),
 * halved TT_LR_MAX_HALVINGS times at most by tt_set_lr_halvings(). */
#define TT_LEARNING_RATE $lr
#define TT_LR_MAX_HALVINGS $max_halvings

/* A trained parameter tensor inside the arena: dtype 'b' int8, 'i' int32, 'f' float32. */
typedef struct {
    const char *name;
    void *data;
    int32_t nbytes;
    char dtype;
} tt_param_view;

/* Load the initial parameters into the arena (again: a reset). Call once before the rest. */
void tt_model_init(void);

/* One training step (batch 1) on an image of TT_INPUT_BYTES with class `label`; writes the
 * cross-entropy loss before the update to *loss_out unless it is NULL. Returns 0, or -1 for a
 * label outside [0, TT_N_CLASSES). */
int tt_train_step(const int8_t *image, int label, float *loss_out);

/* Train at TT_LEARNING_RATE / 2^halvings from the next step on (a step decay of the rate, e.g.
 * one halving per epoch); exact, since every update multiplier only changes its shift. 0 after
 * tt_model_init(). Returns 0, or -1 (and keeps the rate) for halvings outside
 * [0, TT_LR_MAX_HALVINGS]. */
int tt_set_lr_halvings(int32_t halvings);

/* The predicted class of an image; copies the TT_N_CLASSES float32 logits to logits_out
 * unless it is NULL. */
int tt_predict(const int8_t *image, float *logits_out);

/* The index-th trained parameter (0 <= index < TT_N_PARAMS), e.g. to save it; NULL outside. */
const tt_param_view *tt_param(int32_t index);

/* 1 when the guard bytes around the arena are untouched (always 1 without -DTT_GUARD). */
int tt_guard_intact(void);

/* The name of class `index` (UTF-8, TT_CLASS_NAMES), NULL outside [0, TT_N_CLASSES). */
const char *tt_class_name(int32_t index);
$input_decls
/* ---- saving what was learned ----------------------------------------------------------------
 * tt_params_save() writes the trained parameters (the TT_N_PARAMS tensors of tt_param()) into
 * one blob of TT_PARAMS_BYTES, e.g. to keep them in flash; tt_params_load() puts such a blob
 * back into the arena (after tt_model_init(), which resets them to their initial values).
 * The blob, every field little-endian:
 *   offset  bytes  field
 *   0       4      magic: the bytes 'T' 'T' 'P' 'B'
 *   4       2      format version: TT_PARAMS_VERSION
 *   6       2      byte order of the payload: 0xFEFF as the payload holds it, FF FE: little-endian
 *   8       8      model: TT_MODEL_ID as 8 bytes, the first of the SHA-256 of the parameters'
 *                  layout (names, dtypes, shapes, arena offsets) and of the frozen constants
 *                  (all but the update multipliers, which the learning rate sets: a bundle of
 *                  the same network exported at another rate loads the blob)
 *   16      4      payload bytes: TT_PARAMS_BYTES - TT_PARAMS_HEADER_BYTES
 *   20      4      CRC-32 (IEEE 802.3, zlib's crc32) of bytes 0..19 and of the payload
 *   24      ...    payload: the tensors of tt_param(0), tt_param(1), ... as the arena holds them
 *                  (int8; int32 and float32 little-endian)
 * Every target of the bundle is little-endian; on a big-endian core both functions refuse. */
#define TT_PARAMS_VERSION $params_version
#define TT_PARAMS_HEADER_BYTES $params_header_bytes
#define TT_PARAMS_BYTES $params_bytes
#define TT_MODEL_ID "$model_id"

#define TT_PARAMS_OK 0
#define TT_PARAMS_E_SIZE (-1)       /* a NULL buffer, one shorter than TT_PARAMS_BYTES, or a
                                     * payload size other than this model's */
#define TT_PARAMS_E_MAGIC (-2)      /* not a parameter blob */
#define TT_PARAMS_E_VERSION (-3)    /* another format version */
#define TT_PARAMS_E_BYTE_ORDER (-4) /* a big-endian payload, or a big-endian core */
#define TT_PARAMS_E_MODEL (-5)      /* the blob of another model */
#define TT_PARAMS_E_CHECKSUM (-6)   /* a blob changed since it was written (a torn write) */

/* TT_PARAMS_BYTES: what tt_params_save() writes. */
int32_t tt_params_size(void);

/* Write the blob into buf[0 .. TT_PARAMS_BYTES). Returns TT_PARAMS_OK, TT_PARAMS_E_SIZE when
 * buf is NULL or size < TT_PARAMS_BYTES, or TT_PARAMS_E_BYTE_ORDER on a big-endian core. */
int tt_params_save(uint8_t *buf, int32_t size);

/* Check the blob in buf[0 .. size) (size >= TT_PARAMS_BYTES; the rest, e.g. of a flash page,
 * is not read) and copy its payload into the trained parameters. Returns TT_PARAMS_OK or the
 * first refusal of: TT_PARAMS_E_SIZE (NULL, or shorter than the header), _MAGIC, _VERSION,
 * _BYTE_ORDER, _MODEL, _SIZE (a payload size other than this model's, or size below
 * TT_PARAMS_BYTES), _CHECKSUM. A refused blob changes nothing. */
int tt_params_load(const uint8_t *buf, int32_t size);

#ifdef __cplusplus
}
#endif

#endif /* TT_MODEL_H */
"""

MODEL_SOURCE = """\
/*
 * tt_model.c: the on-device training step of $title.
 * Generated by tinytune: $n_calls kernel calls of tt_int8.h per step, in the order and on the
 * buffers that tinytune's lowering gives; see tt_model.h for the memory this file reserves.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tt_int8.h"
#include "tt_logmel.h"
#include "tt_model.h"

#if defined(__GNUC__) || defined(__clang__)
#define TT_ALIGNED __attribute__((aligned(8)))
#else
#define TT_ALIGNED
#endif

#ifdef TT_GUARD
/* The arena framed by guard bytes: a write past either end changes them. */
#define TT_GUARD_BYTES $guard_bytes
#define TT_GUARD_FILL 0xA5u
static struct {
    uint8_t before[TT_GUARD_BYTES];
    int8_t arena[TT_ARENA_BYTES];
    uint8_t after[TT_GUARD_BYTES];
} tt_guarded TT_ALIGNED;
#define tt_arena (tt_guarded.arena)
#else
static int8_t tt_arena[TT_ARENA_BYTES] TT_ALIGNED;
#endif
static float tt_scratch[$scratch_words];
static int32_t tt_exp[$exp_slots];
/* The rate: TT_LEARNING_RATE * tt_lr_scale, tt_lr_scale = 2^-tt_lr_halvings. */
static int32_t tt_lr_halvings = 0;
static float tt_lr_scale = 1.0f;

#define TT_ARENA(offset) ((void *)(tt_arena + (offset)))
#define TT_SCRATCH(offset) ((void *)((uint8_t *)tt_scratch + (offset)))
#define TT_EXPONENT(slot) ((void *)&tt_exp[slot])

/* -DTT_PROFILE: a counter is read when the step starts, after each call and when it ends
 * (platform/profile_main.c); otherwise the marks are nothing. */
#ifdef TT_PROFILE
void tt_profile_mark(int32_t call);
#define TT_MARK(call) tt_profile_mark(call)
#else
#define TT_MARK(call) ((void)0)
#endif

/* ---- constants ------------------------------------------------------------------------- */

$constants
/* ---- initial values of the trained parameters (copied into the arena) ------------------ */

$initial
static const tt_param_view tt_params[TT_N_PARAMS] = {
$views
};

/* ---- the operands of the calls that take structs --------------------------------------- */

$decls
/* ---- the loss --------------------------------------------------------------------------- */

/* e^d for d <= 0 and ln x for x >= 1, in double precision with + - * / only: every target
 * computes the same loss. The step never reads it; it is reported. */
static double tt_exp_nonpositive(double d) {
    double r, term = 1.0, sum = 1.0, scale = 1.0;
    int32_t k, i;
    if (!(d >= -60.0)) {
        return 0.0;
    }
    k = (int32_t)(-d / 0.6931471805599453);
    r = d + (double)k * 0.6931471805599453;
    for (i = 1; i < 24; i++) {
        term = term * r / (double)i;
        sum = sum + term;
    }
    for (i = 0; i < k; i++) {
        scale = scale * 0.5;
    }
    return sum * scale;
}

static double tt_log_from_one(double x) {
    double s, s2, t, sum = 0.0;
    int32_t k = 0, i;
    while (x > 1.4142135623730951) {
        x = x * 0.5;
        k++;
    }
    s = (x - 1.0) / (x + 1.0);
    s2 = s * s;
    t = s;
    for (i = 1; i < 40; i += 2) {
        sum = sum + t / (double)i;
        t = t * s2;
    }
    return 2.0 * sum + (double)k * 0.6931471805599453;
}

/* -log softmax(logits)[label] = max - logits[label] + ln sum_j e^(logits[j] - max). */
static float tt_cross_entropy(const float *logits, int32_t n, int32_t label) {
    double m = logits[0], total = 0.0, loss;
    int32_t j;
    for (j = 1; j < n; j++) {
        if (logits[j] > m) {
            m = logits[j];
        }
    }
    for (j = 0; j < n; j++) {
        total = total + tt_exp_nonpositive((double)logits[j] - m);
    }
    loss = (m - (double)logits[label]) + tt_log_from_one(total);
    return loss < 1.0e30 ? (float)loss : 1.0e30f;
}

/* ---- the step --------------------------------------------------------------------------- */

static void tt_forward(void) {
$forward
}

static void tt_backward(int32_t label, float *loss_out) {
$backward
}

/* ---- the API ---------------------------------------------------------------------------- */

void tt_model_init(void) {
#ifdef TT_GUARD
    memset(tt_guarded.before, (int)TT_GUARD_FILL, TT_GUARD_BYTES);
    memset(tt_guarded.after, (int)TT_GUARD_FILL, TT_GUARD_BYTES);
#endif
    memset(tt_arena, 0, TT_ARENA_BYTES);
    memset(tt_scratch, 0, sizeof tt_scratch);
    memset(tt_exp, 0, sizeof tt_exp);
    tt_lr_halvings = 0;
    tt_lr_scale = 1.0f;
$init_copies
}

int tt_set_lr_halvings(int32_t halvings) {
    int32_t i;
    if (halvings < 0 || halvings > TT_LR_MAX_HALVINGS) {
        return -1;
    }
    tt_lr_halvings = halvings;
    tt_lr_scale = 1.0f;
    for (i = 0; i < halvings; i++) {
        tt_lr_scale = tt_lr_scale * 0.5f;
    }
    return 0;
}

int tt_train_step(const int8_t *image, int label, float *loss_out) {
    if (label < 0 || label >= TT_N_CLASSES) {
        return -1;
    }
    TT_MARK(-1);
    memcpy(TT_ARENA($input_offset), image, TT_INPUT_BYTES);
    tt_forward();
    tt_backward((int32_t)label, loss_out);
    TT_MARK(TT_N_CALLS);
    return 0;
}

int tt_predict(const int8_t *image, float *logits_out) {
    const float *logits = (const float *)$logits;
    int best = 0, j;
    memcpy(TT_ARENA($input_offset), image, TT_INPUT_BYTES);
    tt_forward();
    for (j = 1; j < TT_N_CLASSES; j++) {
        if (logits[j] > logits[best]) {
            best = j;
        }
    }
    if (logits_out != NULL) {
        memcpy(logits_out, logits, TT_N_CLASSES * sizeof(float));
    }
    return best;
}

const tt_param_view *tt_param(int32_t index) {
    return index >= 0 && index < TT_N_PARAMS ? &tt_params[index] : NULL;
}

int tt_guard_intact(void) {
#ifdef TT_GUARD
    int32_t i;
    for (i = 0; i < TT_GUARD_BYTES; i++) {
        if (tt_guarded.before[i] != TT_GUARD_FILL || tt_guarded.after[i] != TT_GUARD_FILL) {
            return 0;
        }
    }
#endif
    return 1;
}

/* ---- the classes ----------------------------------------------------------------------- */

static const char *const tt_class_names[TT_N_CLASSES] = TT_CLASS_NAMES;

const char *tt_class_name(int32_t index) {
    return index >= 0 && index < TT_N_CLASSES ? tt_class_names[index] : NULL;
}
$input_impl
/* ---- saving what was learned (the blob of tt_model.h) ----------------------------------- */

static const uint8_t tt_model_id[8] = {$model_id_bytes};
static const uint8_t tt_params_magic[4] = {0x54, 0x54, 0x50, 0x42}; /* "TTPB" */

/* CRC-32 of IEEE 802.3 (reflected, polynomial 0xEDB88320), continuing `crc` (0 to begin). */
static uint32_t tt_crc32(uint32_t crc, const uint8_t *data, int32_t n) {
    int32_t i, bit;
    crc = ~crc;
    for (i = 0; i < n; i++) {
        crc ^= (uint32_t)data[i];
        for (bit = 0; bit < 8; bit++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

static void tt_put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t tt_get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int tt_little_endian(void) {
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* The blob's CRC-32: its first 20 bytes, then its payload. */
static uint32_t tt_params_crc(const uint8_t *blob) {
    uint32_t crc = tt_crc32(0u, blob, 20);
    return tt_crc32(crc, blob + TT_PARAMS_HEADER_BYTES, TT_PARAMS_BYTES - TT_PARAMS_HEADER_BYTES);
}

int32_t tt_params_size(void) {
    return TT_PARAMS_BYTES;
}

int tt_params_save(uint8_t *buf, int32_t size) {
    int32_t i, at = TT_PARAMS_HEADER_BYTES;
    if (buf == NULL || size < TT_PARAMS_BYTES) {
        return TT_PARAMS_E_SIZE;
    }
    if (!tt_little_endian()) {
        return TT_PARAMS_E_BYTE_ORDER;
    }
    memcpy(buf, tt_params_magic, 4);
    buf[4] = (uint8_t)TT_PARAMS_VERSION;
    buf[5] = 0;
    buf[6] = 0xFF;
    buf[7] = 0xFE;
    memcpy(buf + 8, tt_model_id, 8);
    tt_put_le32(buf + 16, (uint32_t)(TT_PARAMS_BYTES - TT_PARAMS_HEADER_BYTES));
    for (i = 0; i < TT_N_PARAMS; i++) {
        memcpy(buf + at, tt_params[i].data, (size_t)tt_params[i].nbytes);
        at += tt_params[i].nbytes;
    }
    tt_put_le32(buf + 20, tt_params_crc(buf));
    return TT_PARAMS_OK;
}

int tt_params_load(const uint8_t *buf, int32_t size) {
    int32_t i, at = TT_PARAMS_HEADER_BYTES;
    if (buf == NULL || size < TT_PARAMS_HEADER_BYTES) {
        return TT_PARAMS_E_SIZE;
    }
    if (memcmp(buf, tt_params_magic, 4) != 0) {
        return TT_PARAMS_E_MAGIC;
    }
    if (buf[4] != (uint8_t)TT_PARAMS_VERSION || buf[5] != 0) {
        return TT_PARAMS_E_VERSION;
    }
    if (buf[6] != 0xFF || buf[7] != 0xFE || !tt_little_endian()) {
        return TT_PARAMS_E_BYTE_ORDER;
    }
    if (memcmp(buf + 8, tt_model_id, 8) != 0) {
        return TT_PARAMS_E_MODEL;
    }
    if (tt_get_le32(buf + 16) != (uint32_t)(TT_PARAMS_BYTES - TT_PARAMS_HEADER_BYTES) ||
        size < TT_PARAMS_BYTES) {
        return TT_PARAMS_E_SIZE;
    }
    if (tt_get_le32(buf + 20) != tt_params_crc(buf)) {
        return TT_PARAMS_E_CHECKSUM;
    }
    for (i = 0; i < TT_N_PARAMS; i++) {
        memcpy(tt_params[i].data, buf + at, (size_t)tt_params[i].nbytes);
        at += tt_params[i].nbytes;
    }
    return TT_PARAMS_OK;
}
"""

PROFILE_HEADER = """\
/*
 * tt_profile.h: what platform/profile_main.c writes beside its times. Generated by tinytune.
 */
#ifndef TT_PROFILE_H
#define TT_PROFILE_H

#define TT_PROFILE_NAME $name
#define TT_PROFILE_DEVICE $device
#define TT_PROFILE_CLOCK_HZ $clock_hz

typedef struct {
    const char *op;
    const char *kernel;
} tt_profile_call;

/* the op and kernel of each of the step's calls, in order */
static const tt_profile_call tt_profile_calls[$n_calls] = {
$calls
};

/* the training graph as JSON (tinytune.ir.Graph), in pieces; NULL ends it */
static const char *const tt_profile_graph[] = {
$graph,
    NULL
};

#endif /* TT_PROFILE_H */
"""
