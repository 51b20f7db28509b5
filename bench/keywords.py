"""A keyword folder of synthesised voices, in the Speech Commands layout (``audio:PATH``).

Each keyword is a short sequence of vowel-like sounds, each a formant pair (F1, F2) that glides
to the next; a speaker is a voice: its pitch (80-250 Hz), the length of its vocal tract (the
formants scaled by 0.85-1.15), its speaking rate and its loudness. A clip is the keyword spoken
by one speaker (a glottal pulse train at the speaker's pitch, jittered, through two resonators
that follow the formants), placed at a random moment of one second, with a little noise of the
room. Files are named ``SPEAKER_nohash_N.wav`` (16 kHz, mono, 16 bits), so that the data set
holds each speaker's clips in one split: the test speakers' voices are never heard in training.

    python3 -m bench.keywords /tmp/keywords --speakers 30 --takes 2
"""

from __future__ import annotations

import argparse
import math
import wave
from pathlib import Path

import numpy as np

RATE = 16_000

KEYWORDS: dict[str, tuple[tuple[float, float], ...]] = {
    "yes": ((300, 2300), (550, 1850), (450, 1900)),
    "no": ((450, 1400), (500, 1000), (400, 850)),
    "up": ((640, 1200), (600, 1150)),
    "down": ((500, 1100), (750, 1250), (400, 1000)),
    "left": ((400, 1800), (550, 1750), (450, 1650)),
    "right": ((350, 1300), (750, 1300), (400, 2100)),
    "stop": ((500, 1500), (600, 900), (550, 950)),
    "go": ((550, 1100), (450, 850)),
    "on": ((700, 1100), (650, 1050), (450, 1350)),
    "off": ((650, 1000), (600, 950)),
    "bed": ((400, 2000), (600, 1800), (450, 1700)),
    "cat": ((400, 1900), (750, 1650), (500, 1800)),
    "dog": ((450, 1600), (650, 1000), (450, 1400)),
    "wow": ((350, 800), (700, 1200), (350, 800)),
}
"""Each keyword's formant targets (Hz), spoken in order."""


def _resonate(signal: np.ndarray, freqs: np.ndarray, bandwidth: float) -> np.ndarray:
    """``signal`` through a two-pole resonator whose centre follows ``freqs`` sample by sample."""
    r = math.exp(-math.pi * bandwidth / RATE)
    out = np.zeros_like(signal)
    y1 = y2 = 0.0
    cos = np.cos(2 * np.pi * freqs / RATE)
    for n, x in enumerate(signal):
        y = (1 - r) * x + 2 * r * cos[n] * y1 - r * r * y2
        out[n] = y
        y1, y2 = y, y1
    return out


def speak(keyword: str, voice: dict[str, float], rng: np.random.Generator) -> np.ndarray:
    """One second of ``keyword`` spoken by ``voice``, 16-bit samples."""
    targets = np.array(KEYWORDS[keyword], dtype=np.float64) * voice["tract"]
    length = int(RATE * voice["rate"] * (0.18 * len(targets) + 0.1))
    t = np.linspace(0, len(targets) - 1, length)
    f1 = np.interp(t, np.arange(len(targets)), targets[:, 0])
    f2 = np.interp(t, np.arange(len(targets)), targets[:, 1])
    pitch = voice["pitch"] * (1 + 0.08 * np.sin(np.linspace(0, np.pi, length)))
    pitch *= 1 + 0.01 * rng.standard_normal(length)
    phase = np.cumsum(pitch / RATE)
    pulses = np.diff(np.floor(phase), prepend=0.0)  # one at each glottal period
    source = np.convolve(pulses, np.exp(-np.arange(40) / 6.0))[:length]
    voiced = _resonate(source, f1, 90.0) + 0.6 * _resonate(source, f2, 120.0)
    envelope = np.sin(np.linspace(0, np.pi, length)) ** 0.6
    word = voiced * envelope
    word *= voice["loudness"] / (np.abs(word).max() + 1e-9)
    clip = np.zeros(RATE)
    start = int(rng.integers(0, RATE - length)) if length < RATE else 0
    clip[start : start + length] = word[: RATE - start]
    clip += rng.normal(0, voice["loudness"] * 0.01, RATE)
    return np.clip(np.round(clip), -32768, 32767).astype(np.int16)


def voice(rng: np.random.Generator) -> dict[str, float]:
    return {
        "pitch": float(rng.uniform(80, 250)),
        "tract": float(rng.uniform(0.85, 1.15)),
        "rate": float(rng.uniform(0.8, 1.25)),
        "loudness": float(rng.uniform(2000, 20000)),
    }


def write(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(RATE)
        f.writeframes(samples.astype("<i2").tobytes())


def make(
    out: Path, speakers: int, takes: int, keywords: int, seed: int = 0, first: int = 0
) -> int:
    """Write the folder of ``keywords`` keywords from number ``first``; the number of clips."""
    rng = np.random.default_rng(seed)
    words = list(KEYWORDS)[first : first + keywords]
    count = 0
    for s in range(speakers):
        v, name = voice(rng), f"{s:08x}"
        for word in words:
            (out / word).mkdir(parents=True, exist_ok=True)
            for take in range(takes):
                write(out / word / f"{name}_nohash_{take}.wav", speak(word, v, rng))
                count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--speakers", type=int, default=30)
    parser.add_argument("--takes", type=int, default=2)
    parser.add_argument("--keywords", type=int, default=8)
    parser.add_argument("--first", type=int, default=0, help="the first keyword's number")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n = make(args.out, args.speakers, args.takes, args.keywords, args.seed, args.first)
    print(f"{n} clips of {args.keywords} keywords by {args.speakers} speakers in {args.out}")


if __name__ == "__main__":
    main()
