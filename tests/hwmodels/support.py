"""Measurement files made from a built-in profile's predictions, for the calibration tests."""

from __future__ import annotations

from tinytune.hwmodels import PRECISIONS, get_device, predict_latency
from tinytune.hwmodels.measurements import Measurement, MeasurementFile
from tinytune.hwmodels.reference_models import build_reference, mobilenet_v1_id

MODELS = [
    "mlperf-ic-resnet8",
    "mlperf-vww-mobilenetv1",
    "mlperf-kws-dscnn",
    "mlperf-ad-autoencoder",
    *(mobilenet_v1_id(a, r, 3, 5) for a in (0.25, 0.5) for r in (64, 96)),
]


def predicted_file(precision: str = "int8", models: list[str] = MODELS) -> MeasurementFile:
    """Training steps as the built-in stm32f746 profile predicts them: a profile in the
    model class, which a fit must reproduce on the networks it was fitted on."""
    truth = get_device("stm32f746")
    width = PRECISIONS[precision].activation
    measurements = []
    for model in models:
        graph = build_reference(model)
        report = predict_latency(graph, truth.coefficients, width)
        measurements.append(Measurement(model, graph, report.train_step_s, report.inference_s))
    return MeasurementFile(
        "stm32f746", precision, {"processor": "F746"}, "t0", tuple(measurements)
    )
