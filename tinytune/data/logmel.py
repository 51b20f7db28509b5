"""The log-mel front-end of keyword audio, in integer arithmetic: what a device computes of every
clip it learns from, and what the search fine-tunes on, bit for bit.

A clip of 16-bit samples is cut into frames of ``window`` samples every ``hop`` samples. Each
frame is shifted left as far as its largest sample allows, up to 2**20 (a block exponent: a
quiet frame keeps as many bits as a loud one), weighted by a periodic Hann window (Q15) and
transformed by a radix-2 FFT of ``fft`` points whose every stage halves its outputs (so no value
outgrows the input's range). The power of each frequency bin below Nyquist is summed into
``bands`` triangular mel bands (HTK's mel scale, Q15 weights), and each band's energy ``E`` is
written as ``log2(E + 1)`` in Q8 (an ``int16``) less the frame's shift (twice its bits, for a
power) beyond :data:`HEADROOM`: the same scale for every frame, a loud frame's bits at
:data:`HEADROOM`. The integer operations are:

* a product of a Q15 weight rounds half up: ``(a * w + 2**14) >> 15`` (64-bit);
* a butterfly's sum and difference are halved the same way: ``(a ± t + 1) >> 1``;
* a band's energy is ``sum(w * (re**2 + im**2)) >> 15`` in unsigned 64 bits;
* the logarithm is exact to its last bit: the integer part is the position of the leading one,
  each of the eight fractional bits one squaring of the mantissa (Q30, truncated).

The tables (window, twiddles, band weights) are made here, in float64 by Python's ``math``, and
handed to the C front-end (``tt_logmel.c``) as they are: the C computes no table and no float,
so host, Arm and RISC-V give the same bytes as :func:`logmel` given the same tables.

The parameters default to 30 ms windows every 20 ms at 16 kHz with 40 bands from 125 Hz to
7.5 kHz over one-second clips (49 frames), as TensorFlow Lite Micro's keyword example does.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from tinytune.errors import ConfigError

__all__ = ["HEADROOM", "LOG_FRACTION_BITS", "PEAK_BITS", "LogMelSpec", "log2_q8", "logmel"]

HEADROOM = 5
"""The shift of a full-scale frame before the FFT, which the features' scale is stated at: every
frame is shifted to below 2**20, so that every stage's value stays below it and a band's energy
below 2**61 (an unsigned 64-bit sum)."""

PEAK_BITS = 20
"""The bits of the largest value of a frame after its shift."""

LOG_FRACTION_BITS = 8
"""The fractional bits of a band's ``log2`` (Q8)."""


@dataclass(frozen=True)
class LogMelSpec:
    """The front-end's parameters.

    Attributes:
        sample_rate: samples per second of the clips.
        clip: samples per clip (a shorter recording is padded with zeros, a longer one cut).
        window, hop: a frame's samples, and the step between frames.
        fft: the FFT's points, a power of two of at least ``window``.
        bands: mel bands.
        low_hz, high_hz: the lowest and highest frequency the bands cover.
    """

    sample_rate: int = 16_000
    clip: int = 16_000
    window: int = 480
    hop: int = 320
    fft: int = 512
    bands: int = 40
    low_hz: float = 125.0
    high_hz: float = 7_500.0

    def __post_init__(self) -> None:
        for name in ("sample_rate", "clip", "window", "hop", "fft", "bands"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"log-mel {name} must be a positive integer, got {value!r}")
        if self.fft & (self.fft - 1) or not 8 <= self.fft <= 4096:
            raise ConfigError(f"log-mel fft must be a power of two in [8, 4096], got {self.fft}")
        if self.window > self.fft:
            raise ConfigError(
                f"log-mel window ({self.window}) must fit in the fft ({self.fft} points)"
            )
        if self.clip < self.window:
            raise ConfigError(f"a clip ({self.clip}) must hold a window ({self.window})")
        if not 0.0 <= self.low_hz < self.high_hz <= self.sample_rate / 2:
            raise ConfigError(
                f"log-mel bands must lie in 0 <= low_hz < high_hz <= {self.sample_rate / 2:g}, "
                f"got {self.low_hz:g} and {self.high_hz:g}"
            )
        counts = self._bands[1]
        if (counts == 0).any():
            empty = int(np.flatnonzero(counts == 0)[0])
            raise ConfigError(
                f"log-mel band {empty} of {self.bands} holds no FFT bin: fewer bands, a wider "
                f"range or a longer fft ({self.fft}) give each band a bin"
            )

    def at(self, frames: int) -> LogMelSpec:
        """This front-end made to give ``frames`` frames of a clip, its bands in proportion
        (``round(bands * frames / self.frames)``, as a network's input keeps its aspect at
        another height): the hop is the longest that gives them, the window this one's or, where
        the hop outgrows it, the hop's up to the fft's points (fewer frames then read every
        sample where the fft allows, and skip ``hop - fft`` of them where it does not). The
        clip, rate, fft and frequency range stay.

        Raises:
            ConfigError: fewer than two frames, or bands too few for a bin each.
        """
        if isinstance(frames, bool) or not isinstance(frames, numbers.Integral) or frames < 2:
            raise ConfigError(f"a log-mel front-end makes two frames or more, got {frames!r}")
        frames = int(frames)
        if frames == self.frames:
            return self
        bands = max(1, round(self.bands * frames / self.frames))
        window = min(self.fft, max(self.window, (self.clip - self.window) // (frames - 1)))
        hop = (self.clip - window) // (frames - 1)
        if hop < 1:
            raise ConfigError(
                f"a clip of {self.clip} samples cannot give {frames} frames of {window}"
            )
        return replace(self, window=window, hop=hop, bands=bands)

    @property
    def frames(self) -> int:
        """Frames of one clip."""
        return 1 + (self.clip - self.window) // self.hop

    @property
    def bins(self) -> int:
        """FFT bins from 0 Hz to Nyquist."""
        return self.fft // 2 + 1

    @cached_property
    def hann(self) -> np.ndarray:
        """The periodic Hann window, Q15 (``int16``, ``window`` values)."""
        w = [0.5 - 0.5 * math.cos(2.0 * math.pi * n / self.window) for n in range(self.window)]
        return np.array([round(v * 32767.0) for v in w], np.int16)

    @cached_property
    def twiddles(self) -> tuple[np.ndarray, np.ndarray]:
        """``cos`` and ``sin`` of ``2 pi k / fft`` for ``k < fft / 2``, Q15 (``int16``)."""
        angles = [2.0 * math.pi * k / self.fft for k in range(self.fft // 2)]
        return (
            np.array([round(math.cos(a) * 32767.0) for a in angles], np.int16),
            np.array([round(math.sin(a) * 32767.0) for a in angles], np.int16),
        )

    @cached_property
    def bit_reversed(self) -> np.ndarray:
        """The FFT's input order: index ``i`` with its bits reversed."""
        bits = self.fft.bit_length() - 1
        return np.array([int(f"{i:0{bits}b}"[::-1], 2) for i in range(self.fft)])

    @cached_property
    def _bands(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        def mel(hz: float) -> float:
            return 2595.0 * math.log10(1.0 + hz / 700.0)

        low, high = mel(self.low_hz), mel(self.high_hz)
        edges = [low + (high - low) * i / (self.bands + 1) for i in range(self.bands + 2)]
        mels = [mel(k * self.sample_rate / self.fft) for k in range(self.bins)]
        firsts, counts, weights = [], [], []
        for b in range(self.bands):
            lo, centre, hi = edges[b], edges[b + 1], edges[b + 2]
            q = [
                round(max(0.0, min((m - lo) / (centre - lo), (hi - m) / (hi - centre))) * 32767.0)
                for m in mels
            ]
            nonzero = [k for k, v in enumerate(q) if v]
            first = nonzero[0] if nonzero else 0
            count = nonzero[-1] - first + 1 if nonzero else 0
            firsts.append(first)
            counts.append(count)
            weights += q[first : first + count]
        return (
            np.array(firsts, np.int16),
            np.array(counts, np.int16),
            np.array(weights, np.uint16),
        )

    @property
    def band_first(self) -> np.ndarray:
        """Each band's first FFT bin (``int16``)."""
        return self._bands[0]

    @property
    def band_count(self) -> np.ndarray:
        """Each band's bins, from its first (``int16``)."""
        return self._bands[1]

    @property
    def band_weights(self) -> np.ndarray:
        """The bands' weights, Q15 (``uint16``), band after band, ``band_count`` each."""
        return self._bands[2]

    @property
    def tables(self) -> tuple[np.ndarray, ...]:
        """What the C front-end is handed, in its order: the window, the twiddles' cosines and
        sines, each band's first bin and bin count, the bands' weights."""
        return (self.hann, *self.twiddles, self.band_first, self.band_count, self.band_weights)

    @property
    def table_bytes(self) -> int:
        """The bytes of :attr:`tables`, as a device holds them in flash."""
        return sum(t.nbytes for t in self.tables)

    @property
    def scratch_bytes(self) -> int:
        """The working memory of one frame: the FFT's real and imaginary parts (``int32``)."""
        return 2 * 4 * self.fft


def _round_shift(values: np.ndarray, bits: int) -> np.ndarray:
    return (values + (1 << (bits - 1))) >> bits


def _fft(re: np.ndarray, im: np.ndarray, spec: LogMelSpec) -> None:
    """The radix-2 FFT of each row of ``re`` + i ``im`` (``int64``), in place, each stage
    halving its outputs."""
    n = spec.fft
    order = spec.bit_reversed
    re[:] = re[:, order]
    im[:] = im[:, order]
    cos, sin = (t.astype(np.int64) for t in spec.twiddles)
    half = 1
    while half < n:
        step = n // (2 * half)
        j = np.arange(half)
        starts = np.arange(0, n, 2 * half)
        a = (starts[:, None] + j[None, :]).reshape(-1)
        b = a + half
        wr = np.tile(cos[j * step], starts.size)
        wi = -np.tile(sin[j * step], starts.size)
        tr = _round_shift(re[:, b] * wr - im[:, b] * wi, 15)
        ti = _round_shift(re[:, b] * wi + im[:, b] * wr, 15)
        ar, ai = re[:, a], im[:, a]
        re[:, a], im[:, a] = (ar + tr + 1) >> 1, (ai + ti + 1) >> 1
        re[:, b], im[:, b] = (ar - tr + 1) >> 1, (ai - ti + 1) >> 1
        half *= 2


def log2_q8(energy: np.ndarray) -> np.ndarray:
    """``log2(energy + 1)`` in Q8 (``int16``) of unsigned 64-bit energies: the leading one's
    position, then one squaring of the Q30 mantissa for each fractional bit."""
    v = energy.astype(np.uint64) + np.uint64(1)
    msb = np.zeros(v.shape, np.int64)
    rest = v.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        big = rest >= (np.uint64(1) << np.uint64(shift))
        msb += np.where(big, shift, 0)
        rest = np.where(big, rest >> np.uint64(shift), rest)
    # the mantissa v / 2**msb in [1, 2), Q30
    up = np.clip(30 - msb, 0, None).astype(np.uint64)
    down = np.clip(msb - 30, 0, None).astype(np.uint64)
    mantissa = np.where(msb <= 30, v << up, v >> down)
    out = msb << LOG_FRACTION_BITS
    for bit in range(LOG_FRACTION_BITS - 1, -1, -1):
        mantissa = (mantissa * mantissa) >> np.uint64(30)
        carry = mantissa >= (np.uint64(1) << np.uint64(31))
        out += np.where(carry, 1 << bit, 0)
        mantissa = np.where(carry, mantissa >> np.uint64(1), mantissa)
    return out.astype(np.int16)


def logmel(samples: np.ndarray, spec: LogMelSpec | None = None) -> np.ndarray:
    """The log-mel features (``int16``, Q8 ``log2``) of one clip, ``(frames, bands)``.

    Args:
        samples: the clip's ``int16`` samples at ``spec.sample_rate``; padded with zeros or cut
            to ``spec.clip``.

    Raises:
        ConfigError: samples that are not a 1-D ``int16`` array.
    """
    spec = spec or LogMelSpec()
    if not isinstance(samples, np.ndarray) or samples.dtype != np.int16 or samples.ndim != 1:
        raise ConfigError("log-mel samples must be a 1-D int16 array")
    clip = np.zeros(spec.clip, np.int64)
    clip[: min(spec.clip, samples.size)] = samples[: spec.clip]
    starts = np.arange(spec.frames) * spec.hop
    frames = clip[starts[:, None] + np.arange(spec.window)[None, :]]
    peak = np.abs(frames).max(axis=1)
    shift = PEAK_BITS - np.array([int(p).bit_length() for p in peak], np.int64)
    re = np.zeros((spec.frames, spec.fft), np.int64)
    re[:, : spec.window] = _round_shift(
        (frames * spec.hann.astype(np.int64)) << shift[:, None], 15
    )
    im = np.zeros_like(re)
    _fft(re, im, spec)
    power = (re[:, : spec.bins] ** 2 + im[:, : spec.bins] ** 2).astype(np.uint64)
    energy = np.zeros((spec.frames, spec.bands), np.uint64)
    offset = 0
    for band, (first, count) in enumerate(zip(spec.band_first, spec.band_count, strict=True)):
        w = spec.band_weights[offset : offset + count].astype(np.uint64)
        energy[:, band] = (power[:, first : first + count] * w).sum(axis=1) >> np.uint64(15)
        offset += count
    below = 2 * (shift - HEADROOM) * (1 << LOG_FRACTION_BITS)
    return (log2_q8(energy).astype(np.int64) - below[:, None]).astype(np.int16)
