"""The log-mel front-end: ``tt_logmel.c`` gives ``tinytune.data.logmel.logmel``'s bytes on the
host (and under the sanitizers), on aarch64, the Cortex-M7, M4 and M0+ and RV32IMC (under QEMU);
the numpy reference is the float64 log-mel of the same tables above its rounding floor, its
logarithm the exact ``floor(256 log2(E + 1))``, and a spec it cannot run is refused."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.bundle.support import needs
from tests.lowering.harness import HERE, RUN_ENV, SANITIZE, needs_gcc, run_program
from tests.lowering.test_kernel_paths import ARM, PLATFORM, QEMU_ARM, TARGETS
from tinytune.data.logmel import HEADROOM, PEAK_BITS, LogMelSpec, log2_q8, logmel
from tinytune.errors import ConfigError
from tinytune.lowering import csrc_dir

CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror")
FRONTEND = ("tt_logmel.c",)
SECOND = np.arange(16_000) / 16_000


def clips(rng: np.random.Generator) -> list[np.ndarray]:
    """A tone, white noise at full scale, a quiet hiss, silence, a constant at the lowest value,
    a square wave at full scale, a short clip (padded) and a long one (cut), a tone under
    speech-like bursts."""
    square = np.full(16_000, 32767, np.int16)
    square[::2] = -32768
    bursts = rng.normal(0, 1, 16_000) * np.abs(np.sin(2 * np.pi * 3 * SECOND)) * 2000
    return [
        (8000 * np.sin(2 * np.pi * 1000 * SECOND)).astype(np.int16),
        rng.integers(-32768, 32768, 16_000).astype(np.int16),
        rng.normal(0, 3, 16_000).astype(np.int16),
        np.zeros(16_000, np.int16),
        np.full(16_000, -32768, np.int16),
        square,
        rng.integers(-32768, 32768, 9_000).astype(np.int16),
        rng.integers(-300, 300, 20_000).astype(np.int16),
        (bursts + 500 * np.sin(2 * np.pi * 440 * SECOND)).astype(np.int16),
    ]


SPECS = [
    LogMelSpec(),
    LogMelSpec(window=400, hop=160, fft=512, bands=32, low_hz=20.0, high_hz=8000.0),
    LogMelSpec(sample_rate=8000, clip=8000, window=256, hop=128, fft=256, bands=20, high_hz=3800),
]


def _tables(spec: LogMelSpec) -> list[np.ndarray]:
    head = np.array([spec.clip, spec.window, spec.hop, spec.fft, spec.bands], np.int32)
    return [head, *(t.astype(np.int32) for t in spec.tables)]


def _build(tmp: Path, extra: tuple[str, ...] = ()) -> Path:
    src = csrc_dir()
    out = tmp / "logmel_driver"
    cmd = ["gcc", *CFLAGS, "-O2", *extra, f"-I{src}", str(HERE / "logmel_driver.c"),
           *(str(src / s) for s in FRONTEND), "-o", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        if extra and "san" in done.stderr:
            pytest.skip(f"gcc cannot build with sanitizers here: {done.stderr.splitlines()[-1]}")
        pytest.fail(f"gcc failed:\n{done.stderr[-4000:]}")
    return out


@needs_gcc
@pytest.mark.parametrize("variant", ["O2", "sanitized"])
def test_the_c_front_end_gives_the_references_bytes_on_the_host(
    tmp_path: Path, variant: str
) -> None:
    binary = _build(tmp_path, SANITIZE if variant == "sanitized" else ())
    rng = np.random.default_rng(7)
    for spec in SPECS:
        given = clips(rng)
        out = run_program(binary, [], [*_tables(spec), *(c.astype(np.int32) for c in given)])
        for i, clip in enumerate(given):
            assert out[2 * i].tolist() == [0]
            expected = logmel(clip, spec).astype(np.int32).reshape(-1)
            assert np.array_equal(out[2 * i + 1], expected), (spec, i)


def _header(spec: LogMelSpec, given: list[np.ndarray]) -> str:
    def array(kind: str, name: str, values: np.ndarray) -> str:
        return f"static const {kind} {name}[] = {{{', '.join(map(str, values.tolist()))}}};\n"

    text = "#include <stdint.h>\n"
    for name, value in (("CLIP", spec.clip), ("WINDOW", spec.window), ("HOP", spec.hop),
                        ("FFT", spec.fft), ("BANDS", spec.bands), ("FRAMES", spec.frames),
                        ("CLIPS", len(given))):  # fmt: skip
        text += f"#define LM_{name} {value}\n"
    cos, sin = spec.twiddles
    text += array("int16_t", "lm_hann", spec.hann) + array("int16_t", "lm_cos", cos)
    text += array("int16_t", "lm_sin", sin) + array("int16_t", "lm_first", spec.band_first)
    text += array("int16_t", "lm_count", spec.band_count)
    text += array("uint16_t", "lm_weights", spec.band_weights)
    for i, clip in enumerate(given):
        text += array("int16_t", f"lm_clip{i}", clip)
    text += "static const int16_t *const lm_clips[] = {"
    text += ", ".join(f"lm_clip{i}" for i in range(len(given))) + "};\n"
    text += f"static const int32_t lm_lengths[] = {{{', '.join(str(c.size) for c in given)}}};\n"
    return text


def _printed(spec: LogMelSpec, given: list[np.ndarray]) -> str:
    lines = []
    for i, clip in enumerate(given):
        lines.append(f"clip {i}: 0")
        lines += [" ".join(map(str, row)) for row in logmel(clip, spec).tolist()]
    return "\n".join(lines) + "\n"


RV32 = ("-march=rv32imc", "-mabi=ilp32", "--specs=picolibc.specs", "--oslib=semihost",
        "--crt0=semihost", "-Wl,--defsym=__flash=0x80000000", "-Wl,--defsym=__flash_size=0x400000",
        "-Wl,--defsym=__ram=0x80400000", "-Wl,--defsym=__ram_size=0x400000",
        "-Wl,--defsym=__stack_size=0x2000")  # fmt: skip
QEMU_RV32 = ["qemu-system-riscv32", "-M", "virt", "-bios", "none", "-nographic", "-monitor",
             "none", "-serial", "none", "-chardev", "stdio,id=tt", "-semihosting-config",
             "enable=on,target=native,chardev=tt", "-kernel"]  # fmt: skip


def _target(target: str) -> tuple[str, tuple[str, ...], list[str]]:
    """The compiler, its flags and the command that runs the image, of ``target``."""
    if target == "aarch64":
        return "aarch64-linux-gnu-gcc", ("-static",), ["qemu-aarch64"]
    if target == "rv32imc":
        return "riscv64-unknown-elf-gcc", RV32, QEMU_RV32
    flags, machine = TARGETS[target]
    platform = ("-T", str(PLATFORM / "cortex_m7.ld"), str(PLATFORM / "cortex_m7_startup.c"))
    run = ["qemu-system-arm", "-M", machine, *QEMU_ARM, "-kernel"]
    return "arm-none-eabi-gcc", (*flags, *ARM, *platform), run


@pytest.mark.slow
@pytest.mark.parametrize(
    "target",
    [pytest.param(t, marks=needs(t)) for t in ("aarch64", *TARGETS, "rv32imc")],
)
def test_every_target_gives_the_references_bytes(target: str, tmp_path: Path) -> None:
    """The default front-end on four clips (a tone, full-scale noise, a quiet hiss, a square
    wave at full scale), built for the target and run under QEMU."""
    spec = LogMelSpec()
    picked = [clips(np.random.default_rng(3))[i] for i in (0, 1, 2, 5)]
    (tmp_path / "logmel_clips.h").write_text(_header(spec, picked))
    compiler, flags, run = _target(target)
    src, elf = csrc_dir(), tmp_path / "logmel.elf"
    cmd = [compiler, *CFLAGS, "-O2", *flags, f"-I{src}", f"-I{tmp_path}",
           str(HERE / "logmel_print.c"), *(str(src / s) for s in FRONTEND),
           "-o", str(elf)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    ran = subprocess.run(
        [*run, str(elf)], capture_output=True, text=True, env=RUN_ENV,
        stdin=subprocess.DEVNULL, timeout=600, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout == _printed(spec, picked)


def _float_logmel(clip: np.ndarray, spec: LogMelSpec) -> np.ndarray:
    """log2 of each band's energy, in float64 with numpy's FFT, of the same tables and scale."""
    padded = np.zeros(spec.clip)
    padded[: min(clip.size, spec.clip)] = clip[: spec.clip]
    starts = np.arange(spec.frames) * spec.hop
    frames = padded[starts[:, None] + np.arange(spec.window)] * (spec.hann / 32768.0)
    power = np.abs(np.fft.rfft(frames * 2.0**HEADROOM, n=spec.fft) / spec.fft) ** 2
    energy, offset = np.zeros((spec.frames, spec.bands)), 0
    for band, (first, count) in enumerate(zip(spec.band_first, spec.band_count, strict=True)):
        weights = spec.band_weights[offset : offset + count] / 32768.0
        energy[:, band] = (power[:, first : first + count] * weights).sum(axis=1)
        offset += count
    return np.log2(energy)


def test_the_features_are_the_float_log_mel_above_the_rounding_floor() -> None:
    """Within 0.06 of log2 units (0.4 dB) of float64 wherever a band's energy is 2**12 above one
    unit of its frame's scale (the FFT's roundings are a few units), for every clip but silence
    and a constant, at two sets of parameters; silence is log2(1) at the largest shift."""
    compared = 0
    for spec in SPECS[:2]:
        for i, clip in enumerate(clips(np.random.default_rng(5))):
            if i in (3, 4):  # silence and a constant: no band holds energy
                continue
            padded = np.zeros(spec.clip, np.int64)
            padded[: min(clip.size, spec.clip)] = clip[: spec.clip]
            starts = np.arange(spec.frames) * spec.hop
            peak = np.abs(padded[starts[:, None] + np.arange(spec.window)]).max(axis=1)
            shift = PEAK_BITS - np.array([int(p).bit_length() for p in peak])
            unit = -2.0 * (shift - HEADROOM)  # log2 of one unit of the frame's scale
            with np.errstate(divide="ignore"):
                expected = _float_logmel(clip, spec)
            held = expected > unit[:, None] + 12
            got = logmel(clip, spec) / 256.0
            assert (np.abs(got - expected)[held] < 0.06).all(), (spec, i)
            compared += int(held.sum())
    assert compared > 10_000  # of 2 x 7 x 49 x ~36 (a square wave's energy is above the bands)
    silence = logmel(np.zeros(100, np.int16))
    assert (silence == -2 * (PEAK_BITS - HEADROOM) * 256).all()


def _exact_log2_q8(value: int) -> int:
    """floor(256 log2(value + 1)), by integers: the largest k with 2**k <= (value + 1)**256."""
    power = (value + 1) ** 256
    low, high = 256 * value.bit_length() - 256 if value else 0, 256 * (value + 1).bit_length()
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if (1 << middle) <= power else (low, middle)
    return low


def test_the_logarithm_is_exact() -> None:
    rng = np.random.default_rng(11)
    values = np.concatenate(
        [
            np.arange(3000, dtype=np.uint64),
            rng.integers(0, 2**62, 20_000, dtype=np.uint64),
            (np.uint64(1) << rng.integers(0, 62, 500).astype(np.uint64)) - np.uint64(1),
        ]
    )
    got = log2_q8(values).astype(np.int64).tolist()
    assert got == [_exact_log2_q8(int(v)) for v in values]
    assert math.floor(256 * math.log2(1001)) == got[1000]


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"fft": 500}, "fft must be a power of two"),
        ({"window": 600}, "window (600) must fit in the fft"),
        ({"clip": 100}, "a clip (100) must hold a window"),
        ({"high_hz": 9000.0}, "high_hz <= 8000"),
        ({"bands": 200}, "holds no FFT bin"),
        ({"hop": 0}, "hop must be a positive integer"),
    ],
)
def test_a_spec_it_cannot_run_is_refused(given: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        LogMelSpec(**given)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="1-D int16"):
        logmel(np.zeros(10, np.int32))
