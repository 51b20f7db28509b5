"""Measurement files made from a profile's predictions, for the calibration tests."""

from __future__ import annotations

import dataclasses

import numpy as np

from tinytune.hwmodels import PRECISIONS, get_device, predict_latency
from tinytune.hwmodels.latency import LatencyCoefficients
from tinytune.hwmodels.latency_fit import ModelForm, coefficients_from_vector
from tinytune.hwmodels.measurements import CallTime, Measurement, MeasurementFile
from tinytune.hwmodels.reference_models import build_reference, mobilenet_v1_id

MODELS = [
    "mlperf-ic-resnet8",
    "mlperf-vww-mobilenetv1",
    "mlperf-kws-dscnn",
    "mlperf-ad-autoencoder",
    *(mobilenet_v1_id(a, r, 3, 5) for a in (0.25, 0.5) for r in (64, 96)),
]

MORE_MODELS = [*MODELS, *(mobilenet_v1_id(a, r, 3, 5) for a in (0.35, 0.75) for r in (80, 128))]
"""Twelve reference networks."""

SMALL = ModelForm("op", "shared", ("macs", "constant"), ("constant",))
"""A form of eleven coefficients (one of them the update's): for the reference networks,
which are timed forward only, the smallest that holds times drawn with a set per op class
(:func:`form_truth`)."""


def form_truth(form: ModelForm, seed: int = 0) -> LatencyCoefficients:
    """Coefficients of ``form`` drawn at random (seconds per MAC about 1e-9, per op about
    1e-5): a device whose times that form, and every larger one, holds exactly."""
    rng = np.random.default_rng(seed)
    scale = {"macs": 1e-9, "bytes": 1e-10, "elements": 1e-9, "constant": 1e-5}
    tying = form.tying()
    feature = np.array([scale[f] for f in ("macs", "bytes", "elements", "constant")])
    # each parameter's feature: the column of the full model it first spreads to
    first = tying.argmax(axis=0) % len(feature)
    theta = rng.uniform(0.5, 1.5, tying.shape[1]) * feature[first]
    return coefficients_from_vector(tying @ theta, tying.sum(axis=1) > 0, form)


def predicted_file(
    precision: str = "int8",
    models: list[str] = MODELS,
    truth: LatencyCoefficients | None = None,
    device: str = "stm32f746",
    noise: float = 0.0,
) -> MeasurementFile:
    """Training steps as ``truth`` predicts them (by default the built-in stm32f746 profile:
    a profile in the model class, which a fit must reproduce on the networks it was fitted
    on), each multiplied by 1 + ``noise`` × a deterministic draw from [-1, 1]."""
    truth = truth if truth is not None else get_device("stm32f746").coefficients
    width = PRECISIONS[precision].activation
    draws = np.random.default_rng(7).uniform(-1.0, 1.0, len(models))
    measurements = []
    for model, draw in zip(models, draws, strict=True):
        graph = build_reference(model)
        report = predict_latency(graph, truth, width)
        step = report.train_step_s * (1.0 + noise * draw)
        measurements.append(Measurement(model, graph, step, report.inference_s))
    return MeasurementFile(device, precision, {"processor": "F746"}, "t0", tuple(measurements))


def timed(file: MeasurementFile, truth: LatencyCoefficients) -> MeasurementFile:
    """``file`` as a bundle's profiler writes it (engine ``bundle``), each op's calls timed as
    ``truth`` predicts them: its forward, its gradient to the input, and its weight gradient
    with the update."""
    kernel = {"forward": "conv2d_s8", "grad_input": "conv2d_grad_input"}
    width = PRECISIONS[file.precision].activation
    measurements = []
    for m in file.measurements:
        calls = []
        for name, phases in predict_latency(m.graph, truth, width).per_op:
            for phase in ("forward", "grad_input"):
                if phase in phases:
                    calls.append(CallTime(name, kernel[phase], phases[phase]))
            weight = [phases[p] for p in ("grad_weight", "update") if p in phases]
            if weight:
                calls.append(CallTime(name, "update_bias", sum(weight)))
        measurements.append(dataclasses.replace(m, per_call=tuple(calls)))
    return dataclasses.replace(file, measurements=tuple(measurements), engine="bundle")
