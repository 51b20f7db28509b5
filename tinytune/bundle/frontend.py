"""What makes a bundle's input of what the device records, as the search made it of its files:
a microphone's ``int16`` samples for an audio model (:class:`Frontend`), a sensor's values for
a sensor model (:class:`WindowInput`).

A keyword model (``audio:PATH``, :class:`~tinytune.data.AudioDataset`) was searched on the
log-mel features of its clips (:mod:`tinytune.data.logmel`), each a Q8 ``int16``, standardised
with the training split's mean and standard deviation and quantized as the network's input.
The bundle computes the same bytes from raw samples: ``tt_input_from_pcm16()`` runs the C twin
of the front-end (``kernels/tt_logmel.c``) frame by frame, then maps each ``int16`` feature to
int8 through :data:`LEVELS` thresholds. tinytune evaluates its own standardisation and input
quantization on all 65,536 ``int16`` values; the map is monotone (an affine map with a positive
slope, then rounding and clamping), so the 255 smallest values at which the int8 steps up give it
exactly, and the device finds a value's level by a binary search of 8 comparisons, with no
floating point. The thresholds are checked against the evaluated map before they are written.

A sensor model (``series:PATH``) was searched on its windows' values standardised per channel
and quantized: ``tt_input_from_values()`` does the same IEEE operations on float64 values (one
rounding to float32, then round half to even), its constants written as exact hexadecimal
doubles, so that it gives the search's bytes wherever it is given the values the search read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from string import Template
from typing import Any

import numpy as np

from tinytune.bundle.errors import BundleError
from tinytune.bundle.render import c_values
from tinytune.data.logmel import LogMelSpec

__all__ = [
    "FRONTEND_DECLS",
    "WINDOW_DECLS",
    "Frontend",
    "WindowInput",
    "c_double",
    "input_steps",
    "render_frontend",
    "render_window_input",
]

LEVELS = 255
"""Thresholds between the 256 int8 levels."""

_ALL = np.arange(-(2**15), 2**15, dtype=np.int64)


def input_steps(levels: np.ndarray) -> np.ndarray:
    """The thresholds of a monotone map from every ``int16`` value (``levels[v + 32768]``, the
    int8 of value ``v``): ``steps[k]`` is the smallest value whose level is above ``k - 128``
    (32768 where none is), so that a value's level is ``-128`` plus the number of thresholds
    at or below it.

    Raises:
        BundleError: a map that is not monotone, or is not one level for each ``int16``.
    """
    levels = np.asarray(levels, np.int64)
    if levels.shape != _ALL.shape or levels.min() < -128 or levels.max() > 127:
        raise BundleError(f"the input map needs {_ALL.size} int8 levels, got {levels.shape}")
    if np.any(np.diff(levels) < 0):
        raise BundleError(
            "the input map of the features is not monotone: its standardisation has a negative "
            "scale; a front-end bundle needs a positive one"
        )
    first = np.searchsorted(levels, np.arange(-127, 128), side="left")
    steps = (first - 2**15).astype(np.int32)
    if not np.array_equal(np.searchsorted(steps, _ALL, side="right") - 128, levels):
        raise BundleError("the thresholds of the input map do not reproduce it")
    return steps


@dataclass(frozen=True, eq=False)
class Frontend:
    """What the bundle needs to compute its input from raw samples.

    Attributes:
        spec: the log-mel front-end the search computed its features with.
        steps: :data:`LEVELS` ``int32`` thresholds of the features' int8 levels
            (:func:`input_steps`).
    """

    spec: LogMelSpec
    steps: np.ndarray

    @classmethod
    def of(cls, spec: LogMelSpec, to_input: Callable[[np.ndarray], np.ndarray]) -> Frontend:
        """The front-end of ``spec`` whose feature ``v`` becomes ``to_input(v)`` (the data set's
        standardisation and the network's input quantization, on an ``int16`` array)."""
        return cls(spec, input_steps(to_input(_ALL.astype(np.int16))))

    @property
    def scratch_bytes(self) -> int:
        """The static working memory of ``tt_input_from_pcm16``: one frame's FFT."""
        return self.spec.scratch_bytes

    @property
    def flash_bytes(self) -> int:
        """The bytes of its tables: window, twiddles, bands, weights and thresholds."""
        return self.spec.table_bytes + self.steps.astype(np.int32).nbytes

    def render(self) -> tuple[str, str, str]:
        """:func:`render_frontend` of it."""
        return render_frontend(self)

    def entry(self) -> dict[str, Any]:
        """What the manifest states of it (``input.frontend``), and the bundle's README."""
        spec = self.spec
        return {
            "function": "tt_input_from_pcm16",
            "features": "log-mel, Q8 log2 (tinytune.data.logmel)",
            "sample_rate": spec.sample_rate,
            "clip_samples": spec.clip,
            "window": spec.window,
            "hop": spec.hop,
            "fft": spec.fft,
            "bands": spec.bands,
            "frames": spec.frames,
            "low_hz": spec.low_hz,
            "high_hz": spec.high_hz,
            "scratch_bytes": self.scratch_bytes,
            "tables_bytes": self.flash_bytes,
        }


FRONTEND_DECLS = """
/* ---- from a microphone ------------------------------------------------------------------
 * TT_CLIP_SAMPLES int16 samples at TT_SAMPLE_RATE Hz (mono, 16-bit PCM, as the search's WAV
 * files held them, resampled to TT_SAMPLE_RATE) to the model's input in input[TT_INPUT_BYTES]:
 * the log-mel features that tinytune computed of them, standardised and quantized, byte for
 * byte. A shorter clip is padded with silence, a longer one cut. Uses TT_FRONTEND_SCRATCH_BYTES
 * of static SRAM (one frame's FFT) and about 100 bytes of stack, no floating point. Returns 0,
 * or -1 (input untouched) for a NULL pointer or n_samples < 0. Not reentrant. */
#define TT_SAMPLE_RATE $sample_rate
#define TT_CLIP_SAMPLES $clip
#define TT_FRONTEND_SCRATCH_BYTES $scratch_bytes
/* Its tables in flash (window, twiddles, bands, thresholds), beside TT_FLASH_BYTES. */
#define TT_FRONTEND_TABLE_BYTES $table_bytes
int tt_input_from_pcm16(const int16_t *samples, int32_t n_samples, int8_t *input);
"""

_IMPL = Template("""
/* ---- the input, from a microphone ------------------------------------------------------ */

/* The log-mel front-end the search used (tinytune.data.logmel.LogMelSpec): $window-sample
 * frames every $hop samples, a $fft-point FFT, $bands mel bands; its tables as tinytune made
 * them. */
static const int16_t tt_fe_hann[$window] = {
$hann
};
static const int16_t tt_fe_cos[$half] = {
$cos
};
static const int16_t tt_fe_sin[$half] = {
$sin
};
static const int16_t tt_fe_band_first[$bands] = {
$band_first
};
static const int16_t tt_fe_band_count[$bands] = {
$band_count
};
static const uint16_t tt_fe_band_weights[$n_weights] = {
$band_weights
};
static const tt_logmel_spec tt_fe_spec = {
    $clip, $window, $hop, $fft, $bands, tt_fe_hann, tt_fe_cos, tt_fe_sin, tt_fe_band_first,
    tt_fe_band_count, tt_fe_band_weights,
};

/* A feature's int8 level is -128 plus the number of these at or below it: tinytune's
 * standardisation and input quantization, evaluated on all 65536 int16 values. */
static const int32_t tt_fe_steps[$levels] = {
$steps
};

static int32_t tt_fe_scratch[2 * $fft];

static int8_t tt_fe_level(int32_t v) {
    int32_t low = 0, high = $levels;
    while (low < high) {
        int32_t mid = (low + high) >> 1;
        if (tt_fe_steps[mid] <= v) {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    return (int8_t)(low - 128);
}

int tt_input_from_pcm16(const int16_t *samples, int32_t n_samples, int8_t *input) {
    int16_t features[$bands];
    int32_t frame, band;
    if ((samples == NULL && n_samples > 0) || n_samples < 0 || input == NULL) {
        return -1;
    }
    for (frame = 0; frame < $frames; frame++) {
        tt_logmel_frame(&tt_fe_spec, samples, n_samples, frame, tt_fe_scratch, features);
        for (band = 0; band < $bands; band++) {
            input[frame * $bands + band] = tt_fe_level(features[band]);
        }
    }
    return 0;
}
""")


def render_frontend(frontend: Frontend) -> tuple[str, str, str]:
    """The declarations of ``tt_model.h`` and the definitions of ``tt_model.c`` of
    ``tt_input_from_pcm16``, and what the input's doc says of it."""
    spec = frontend.spec
    cos, sin = spec.twiddles
    fields = {
        "sample_rate": spec.sample_rate,
        "clip": spec.clip,
        "window": spec.window,
        "hop": spec.hop,
        "fft": spec.fft,
        "half": spec.fft // 2,
        "bands": spec.bands,
        "frames": spec.frames,
        "levels": LEVELS,
        "scratch_bytes": frontend.scratch_bytes,
        "table_bytes": frontend.flash_bytes,
        "n_weights": spec.band_weights.size,
        "hann": c_values(spec.hann.astype(np.int16)),
        "cos": c_values(cos.astype(np.int16)),
        "sin": c_values(sin.astype(np.int16)),
        "band_first": c_values(spec.band_first.astype(np.int16)),
        "band_count": c_values(spec.band_count.astype(np.int16)),
        "band_weights": c_values(spec.band_weights.astype(np.uint16)),
        "steps": c_values(frontend.steps.astype(np.int32)),
    }
    return (
        Template(FRONTEND_DECLS).substitute(fields),
        _IMPL.substitute(fields),
        "tt_input_from_pcm16() makes it of a microphone's samples (below).",
    )


def c_double(value: float) -> str:
    """A float64 value as an exact C hexadecimal literal (``0x1.8p+1``)."""
    import math

    v = float(value)
    if not math.isfinite(v):
        raise BundleError(f"the constant {value!r} is not finite; a bundle holds finite numbers")
    return v.hex()


@dataclass(frozen=True, eq=False)
class WindowInput:
    """What a sensor model's bundle needs to make its input of raw values: each channel's
    mean and standard deviation of the training split (float64) and the input's quantization
    (``scale`` as the quantizer holds it, a float64; ``zero``).

    The search's rule, which ``tt_input_from_values`` computes in the same IEEE operations:
    ``float32((v - mean[c]) / std[c])`` in float64, then ``round_half_even(f / scale) + zero``
    in float64, clamped to [-128, 127].
    """

    mean: np.ndarray
    std: np.ndarray
    scale: float
    zero: int

    def render(self) -> tuple[str, str, str]:
        """:func:`render_window_input` of it."""
        return render_window_input(self)

    def entry(self) -> dict[str, Any]:
        """What the manifest states of it (``input.frontend``)."""
        return {
            "function": "tt_input_from_values",
            "values": "float64, channels first, in the units of the search's files",
            "rule": "float32((v - mean[c]) / std[c]), then round half to even of it over "
            "the input's scale, plus its zero point, clamped to [-128, 127]",
        }

    def reference(self, values: np.ndarray) -> np.ndarray:
        """The int8 inputs of samples ``values`` (N, C, ...) in numpy, as the C computes them."""
        x = np.asarray(values, np.float64).reshape(len(values), self.mean.shape[0], -1)
        f = ((x - self.mean[:, None]) / self.std[:, None]).astype(np.float32)
        q = np.rint(f.astype(np.float64) / self.scale) + self.zero
        return np.clip(q, -128, 127).astype(np.int8).reshape(np.shape(values))


WINDOW_DECLS = """
/* ---- from a sensor ------------------------------------------------------------------------
 * values[TT_INPUT_BYTES] float64 samples, channels first (channel c's TT_INPUT_HEIGHT x
 * TT_INPUT_WIDTH values, then channel c + 1's: a window's C channels of T steps), in the units
 * the search's files held them, to the model's input in input[TT_INPUT_BYTES]: each channel
 * standardised with the training split's mean and standard deviation, then quantized, in the
 * IEEE operations of the search (float64, one rounding to float32, round half to even), byte
 * for byte. A value that is a float32 (a reading stored as one) converts to float64 exactly.
 * Returns 0, or -1 (input untouched) for a NULL pointer or a value that is not finite. */
int tt_input_from_values(const double *values, int8_t *input);
"""

_WINDOW_IMPL = Template("""
/* ---- the input, from a sensor ----------------------------------------------------------- */

/* Each channel's mean and standard deviation of the training split, and the input's scale,
 * exactly as tinytune holds them (float64). */
static const double tt_in_mean[$channels] = {$means};
static const double tt_in_std[$channels] = {$stds};
static const double tt_in_scale = $scale;

int tt_input_from_values(const double *values, int8_t *input) {
    int32_t c, i, per_channel = TT_INPUT_BYTES / $channels;
    if (values == NULL || input == NULL) {
        return -1;
    }
    for (i = 0; i < TT_INPUT_BYTES; i++) {
        if (!(values[i] - values[i] == 0.0)) { /* NaN or an infinity */
            return -1;
        }
    }
    for (c = 0; c < $channels; c++) {
        for (i = c * per_channel; i < (c + 1) * per_channel; i++) {
            float f = (float)((values[i] - tt_in_mean[c]) / tt_in_std[c]);
            double q = rint((double)f / tt_in_scale) + (double)($zero);
            input[i] = (int8_t)(q < -128.0 ? -128 : q > 127.0 ? 127 : (int32_t)q);
        }
    }
    return 0;
}
""")


def render_window_input(window: WindowInput) -> tuple[str, str, str]:
    """The declarations of ``tt_model.h`` and the definitions of ``tt_model.c`` of
    ``tt_input_from_values``, and what the input's doc says of it."""
    fields = {
        "channels": window.mean.shape[0],
        "means": ", ".join(c_double(v) for v in window.mean.tolist()),
        "stds": ", ".join(c_double(v) for v in window.std.tolist()),
        "scale": c_double(window.scale),
        "zero": int(window.zero),
    }
    return (
        WINDOW_DECLS,
        _WINDOW_IMPL.substitute(fields),
        "tt_input_from_values() makes it of a sensor's values (below).",
    )
