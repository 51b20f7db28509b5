"""Published whole-model inference latencies of reference networks on real devices.

Every row is a measurement that someone published, with its provenance as
``reference/hw-measurements.md`` names it, on a network that :mod:`.reference_models` can
rebuild (the row's ``model`` is a :func:`~tinytune.hwmodels.reference_models.build_reference`
id). They are the calibration data of the device profiles (:mod:`.devices`).

* MLPerf Tiny, closed division, v0.5–v1.1 (§1c): latency = 1000 / "Median throughput" of the
  EEMBC runner performance logs, for every submission on DISCO-F746NG, NUCLEO-H7A3ZI-Q and
  NUCLEO-L4R5ZI. The models did not change between rounds, so differences between rows of one
  board are the engine's.
* MLPerf Tiny v0.5, LatentAI LEIP 1.9.3 on a Raspberry Pi 4B (§1c, §1f), int8 and fp32; the
  thread count is not stated.
* ST model zoo (§1d), X-CUBE-AI 10.0.0 on STM32H747I-DISCO at 400 MHz, MobileNetV1/V2. The
  README does not say where the buffers lived. A run is marked ``external_memory`` when its
  activation RAM exceeds the largest contiguous on-chip SRAM of the STM32H747 (512 KiB AXI
  SRAM; X-CUBE-AI allocates the activations as one buffer by default) or its weights exceed the
  2 MiB on-chip flash — that rule is ours, and such rows are kept out of fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tinytune.errors import ConfigError
from tinytune.hwmodels.reference_models import mobilenet_v1_id, mobilenet_v2_id

__all__ = [
    "ANCHORS",
    "H747_CONTIGUOUS_SRAM_BYTES",
    "H747_FLASH_BYTES",
    "MLPERF_TINY_COMMITS",
    "Anchor",
]

KIB = 1024
H747_CONTIGUOUS_SRAM_BYTES = 512 * KIB  # AXI SRAM, the largest contiguous on-chip region
H747_FLASH_BYTES = 2048 * KIB


@dataclass(frozen=True)
class Anchor:
    """One published whole-model inference latency.

    Attributes:
        model: the reference network (a ``build_reference`` id).
        board: the board measured; ``part`` its chip; ``core`` its CPU core.
        clock_hz: the core clock during the measurement.
        engine: the inference engine and its version.
        precision: ``int8`` or ``fp32``.
        latency_s: the published latency of one inference, in seconds.
        source: where the number comes from (repository @ commit and file, or paper + table).
        activation_ram_bytes, weights_flash_bytes: the engine's reported buffers, when
            published.
        external_memory: the run needed off-chip memory (see the module docstring); such rows
            are kept out of fits.
    """

    model: str
    board: str
    part: str
    core: str
    clock_hz: float
    engine: str
    precision: str
    latency_s: float
    source: str
    activation_ram_bytes: int | None = None
    weights_flash_bytes: int | None = None
    external_memory: bool = False

    def __post_init__(self) -> None:
        if self.precision not in ("int8", "fp32"):
            raise ConfigError(f"anchor precision must be 'int8' or 'fp32', got {self.precision!r}")
        for name in ("clock_hz", "latency_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"anchor {name} must be a finite number > 0, got {v!r}")

    @property
    def cycles(self) -> float:
        """The latency in core clock cycles."""
        return self.latency_s * self.clock_hz


MLPERF_TINY_COMMITS = {  # round -> results repository @ commit
    "v0.5": "mlcommons/tiny_results_v0.5 @d75aef6",
    "v0.7": "mlcommons/tiny_results_v0.7 @64623f4",
    "v1.0": "mlcommons/tiny_results_v1.0 @c7761cf",
    "v1.1": "mlcommons/tiny_results_v1.1 @c32ef94",
}
_MLPERF_MODELS = (
    "mlperf-ic-resnet8",
    "mlperf-vww-mobilenetv1",
    "mlperf-kws-dscnn",
    "mlperf-ad-autoencoder",
)
_BOARDS = {  # board -> (part, core, clock MHz)
    "DISCO-F746NG": ("STM32F746NG", "Cortex-M7", 216),
    "NUCLEO-H7A3ZI-Q": ("STM32H7A3ZI", "Cortex-M7", 280),
    "NUCLEO-L4R5ZI": ("STM32L4R5ZI", "Cortex-M4F", 120),
}
# round, submitter, board, engine, IC / VWW / KWS / AD latency in ms
_MLPERF_ROWS = (
    ("v0.7", "plumerai", "DISCO-F746NG", "Plumerai IE", (65.151, 59.397, 19.555, 2.423)),
    ("v1.0", "plumerai", "DISCO-F746NG", "Plumerai IE", (64.767, 57.029, 19.125, 2.295)),
    ("v1.1", "bosch", "DISCO-F746NG", "Bosch HALE 1.0", (61.569, 57.176, 18.419, 1.703)),
    ("v1.1", "plumerai", "DISCO-F746NG", "Plumerai IE 2023.05", (62.877, 34.08, 17.749, 1.709)),
    ("v0.7", "STMicroelectronics", "NUCLEO-H7A3ZI-Q", "X-CUBE-AI 7.1.0",
     (70.363, 64.379, 22.29, 2.281)),
    ("v1.0", "STMicroelectronics", "NUCLEO-H7A3ZI-Q", "X-CUBE-AI 7.3.0",
     (54.345, 50.705, 16.76, 1.826)),
    ("v1.1", "Krai", "NUCLEO-H7A3ZI-Q", "X-CUBE-AI 8.0.0", (54.9, 50.335, 16.397, 1.827)),
    ("v1.1", "STMicroelectronics", "NUCLEO-H7A3ZI-Q", "X-CUBE-AI 8.1.0",
     (51.948, 29.629, 15.353, 1.818)),
    ("v1.1", "bosch", "NUCLEO-H7A3ZI-Q", "Bosch HALE 1.0", (46.832, 43.657, 14.715, 1.356)),
    ("v1.1", "plumerai", "NUCLEO-H7A3ZI-Q", "Plumerai IE 2023.05",
     (50.927, 26.817, 13.862, 1.348)),
    ("v0.5", "reference", "NUCLEO-L4R5ZI", "TFLM v2.3.1 (reference submission)",
     (704.225, 600.601, 181.917, 10.052)),
    ("v0.7", "STMicroelectronics", "NUCLEO-L4R5ZI", "X-CUBE-AI 7.1.0",
     (252.781, 254.647, 97.647, 9.666)),
    ("v0.7", "plumerai", "NUCLEO-L4R5ZI", "Plumerai IE", (184.638, 220.41, 73.546, 5.895)),
    ("v1.0", "OctoML", "NUCLEO-L4R5ZI", "microTVM + CMSIS-NN", (389.56, 301.205, 99.81, 8.605)),
    ("v1.0", "OctoML", "NUCLEO-L4R5ZI", "microTVM native", (389.257, 336.587, 144.03, 11.718)),
    ("v1.0", "STMicroelectronics", "NUCLEO-L4R5ZI", "X-CUBE-AI 7.3.0",
     (226.912, 230.468, 75.058, 7.579)),
    ("v1.0", "plumerai", "NUCLEO-L4R5ZI", "Plumerai IE", (173.16, 208.551, 71.659, 5.573)),
    ("v1.1", "Krai", "NUCLEO-L4R5ZI", "X-CUBE-AI 8.0.0", (221.976, 221.141, 72.68, 7.579)),
    ("v1.1", "STMicroelectronics", "NUCLEO-L4R5ZI", "X-CUBE-AI 8.1.0",
     (213.995, 118.694, 62.873, 6.857)),
    ("v1.1", "Skymizer", "NUCLEO-L4R5ZI", "ONNC + CMSIS_5 (mbed)",
     (298.686, 172.176, 82.001, 8.073)),
    ("v1.1", "bosch", "NUCLEO-L4R5ZI", "Bosch HALE 1.0", (179.019, 180.734, 62.68, 5.659)),
    ("v1.1", "plumerai", "NUCLEO-L4R5ZI", "Plumerai IE 2023.05",
     (167.757, 98.756, 47.781, 4.052)),
)  # fmt: skip


def _mlperf_anchors() -> tuple[Anchor, ...]:
    rows = []
    for rnd, submitter, board, engine, latencies_ms in _MLPERF_ROWS:
        part, core, mhz = _BOARDS[board]
        source = (
            f"MLPerf Tiny {rnd} closed, {MLPERF_TINY_COMMITS[rnd]}, {submitter} "
            f"{board} performance logs (1000 / median throughput)"
        )
        for model, ms in zip(_MLPERF_MODELS, latencies_ms, strict=True):
            rows.append(
                Anchor(model, board, part, core, mhz * 1e6, engine, "int8", ms / 1e3, source)
            )
    return tuple(rows)


def _leip_anchors() -> tuple[Anchor, ...]:
    source = (
        f"MLPerf Tiny v0.5 closed, {MLPERF_TINY_COMMITS['v0.5']}, closed/latentai/results/"
        "raspberry_pi_4_leip_framework/*/performance/performance_log.txt (median of 5 windows)"
    )
    latencies_ms = {"int8": (1.074, 2.599, 0.422, 0.192), "fp32": (1.312, 3.746, 0.393, 0.169)}
    return tuple(
        Anchor(
            model,
            "Raspberry Pi 4B",
            "BCM2711",
            "Cortex-A72",
            1.5e9,
            "LatentAI LEIP 1.9.3",
            precision,
            ms / 1e3,
            source,
        )
        for precision, row in latencies_ms.items()
        for model, ms in zip(_MLPERF_MODELS, row, strict=True)
    )


# model id, README row, latency ms, activation RAM KiB, weights flash KiB
_ST_ZOO_ROWS = (
    (mobilenet_v1_id(0.25, 224, 3, 5), "MBv1-0.25 fft Flowers 224×224×3", 163.78, 272.96, 214.69),
    (mobilenet_v1_id(0.5, 224, 3, 5), "MBv1-0.5 fft Flowers 224×224×3", 485.79, 449.58, 812.61),
    (mobilenet_v1_id(0.25, 96, 3, 5), "MBv1-0.25 fft Flowers 96×96×3", 29.94, 66.96, 214.69),
    (mobilenet_v1_id(0.25, 96, 1, 5), "MBv1-0.25 tfs Flowers 96×96×1", 28.34, 52.8, 214.55),
    (mobilenet_v1_id(0.25, 224, 3), "MBv1-0.25 ImageNet 224×224×3", 166.75, 272.96, 467.33),
    (mobilenet_v1_id(0.5, 224, 3), "MBv1-0.5 ImageNet 224×224×3", 504.37, 431.07, 1314.0),
    (mobilenet_v1_id(1.0, 224, 3), "MBv1-1.0 ImageNet 224×224×3", 1641.84, 1331.13, 4157.09),
    (mobilenet_v2_id(0.35, 128, 5), "MBv2-0.35 fft Flowers 128×128×3", 94.34, 237.32, 406.86),
    (mobilenet_v2_id(0.35, 224, 5), "MBv2-0.35 fft Flowers 224×224×3", 290.75, 832.64, 406.86),
    (mobilenet_v2_id(0.35, 128), "MBv2-0.35 ImageNet 128×128×3", 116.13, 237.32, 1654.5),
    (mobilenet_v2_id(0.35, 224), "MBv2-0.35 ImageNet 224×224×3", 313.92, 832.64, 1654.5),
    (mobilenet_v2_id(1.0, 224), "MBv2-1.0 ImageNet 224×224×3", 1106.64, 1727.02, 3458.97),
    (mobilenet_v2_id(1.4, 224), "MBv2-1.4 ImageNet 224×224×3", 2010.66, 2332.2, 6015.34),
)


def _st_zoo_anchors() -> tuple[Anchor, ...]:
    rows = []
    for model, row, ms, act_kib, weights_kib in _ST_ZOO_ROWS:
        family = "mobilenetv1" if model.startswith("mobilenetv1") else "mobilenetv2"
        act, weights = round(act_kib * KIB), round(weights_kib * KIB)
        rows.append(
            Anchor(
                model,
                "STM32H747I-DISCO",
                "STM32H747XI",
                "Cortex-M7",
                400e6,
                "X-CUBE-AI 10.0.0",
                "int8",
                ms / 1e3,
                f"STMicroelectronics/stm32ai-modelzoo @6f10965, image_classification/{family}/"
                f"README.md, row {row}",
                activation_ram_bytes=act,
                weights_flash_bytes=weights,
                external_memory=act > H747_CONTIGUOUS_SRAM_BYTES or weights > H747_FLASH_BYTES,
            )
        )
    return tuple(rows)


ANCHORS: tuple[Anchor, ...] = _mlperf_anchors() + _leip_anchors() + _st_zoo_anchors()
