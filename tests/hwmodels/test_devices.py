"""Device profiles: the calibration fit against synthetic truth and hand-computed cases, the
published anchors, and a suite run on every profile fitted on them (the suite that every device
of the registry passes is in ``test_registry.py``)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from tinytune.errors import ConfigError
from tinytune.hwmodels.anchor_fit import (
    ATOMDB_M7_CYCLES_PER_MAC,
    PRIOR_CYCLES_PER_MAC,
    CycleScales,
    coefficients_from_scales,
    cycle_features,
    fit_profile,
    fit_scales,
    leave_one_out,
    loo_summary,
)
from tinytune.hwmodels.anchors import ANCHORS, Anchor
from tinytune.hwmodels.builtin_devices import builtin_profiles
from tinytune.hwmodels.latency import FEATURES, OP_CLASSES, PHASES, predict_latency
from tinytune.hwmodels.profile import DeviceProfile
from tinytune.hwmodels.reference_models import build_reference, mobilenet_v1_id, mobilenet_v2_id

BUILTIN = ("stm32f746", "stm32h743", "nrf52840", "rpi4")  # fitted on published anchors


def _anchor(model: str, latency_s: float, clock_hz: float = 100e6, **kw: Any) -> Anchor:
    fields = dict(
        board="B", part="P", core="C", clock_hz=clock_hz, engine="E", precision="int8",
        latency_s=latency_s, source="synthetic",
    )  # fmt: skip
    return Anchor(model, **{**fields, **kw})  # type: ignore[arg-type]


# --- the fit ---------------------------------------------------------------------------------


def test_fit_recovers_known_scales_exactly() -> None:
    truth = np.array([1.3, 12.0, 2500.0])  # cycles per weighted MAC, per element, per op
    models = [
        "mlperf-ic-resnet8",
        "mlperf-vww-mobilenetv1",
        "mlperf-kws-dscnn",
        "mlperf-ad-autoencoder",
        mobilenet_v1_id(0.25, 96, 1, 5),
        mobilenet_v2_id(0.35, 128, 5),
    ]
    clocks = [216e6, 280e6, 120e6, 400e6, 64e6, 480e6]  # cycles make them comparable
    anchors = [
        _anchor(m, cycle_features(build_reference(m), PRIOR_CYCLES_PER_MAC) @ truth / f, f)
        for m, f in zip(models, clocks, strict=True)
    ]
    fit = fit_profile(anchors, PRIOR_CYCLES_PER_MAC, 100e6)
    np.testing.assert_allclose(fit.scales.as_array(), truth, rtol=1e-9)
    assert fit.loo_median_error == pytest.approx(0.0, abs=1e-9)
    assert fit.loo_within_10 == 1.0
    for point, anchor in zip(fit.calibration, anchors, strict=True):
        assert point.measured_s == pytest.approx(anchor.cycles / 100e6, rel=1e-12)
        assert point.fitted_s == pytest.approx(point.measured_s, rel=1e-9)
        assert point.loo_predicted_s == pytest.approx(point.measured_s, rel=1e-9)


def test_fit_scales_by_hand() -> None:
    # one feature: minimise (s·1/1 − 1)² + (s·4/8 − 1)²  →  s = (1 + 0.5) / (1 + 0.25) = 1.2
    features = np.array([[1.0, 0.0, 0.0], [4.0, 0.0, 0.0]])
    np.testing.assert_allclose(fit_scales(features, np.array([1.0, 8.0])), [1.2, 0.0, 0.0])
    # non-negativity: a negative least-squares solution is clamped to 0
    features = np.array([[1.0, 1.0, 0.0], [1.0, 2.0, 0.0]])
    scales = fit_scales(features, np.array([2.0, 1.0]))  # unconstrained: s = (3, −1)
    assert np.all(scales >= 0) and scales[1] == 0.0


def test_leave_one_out_by_hand() -> None:
    features = np.array([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [4.0, 0.0, 0.0]])
    cycles = np.array([1.0, 2.0, 8.0])
    # without row 0: ratios 1 and 0.5 → s = 1.2; without row 1: the same; without row 2: s = 1
    predicted = leave_one_out(features, cycles)
    np.testing.assert_allclose(predicted, [1.2, 2.4, 4.0])
    median, within = loo_summary(predicted, cycles)  # errors +0.2, +0.2, −0.5
    assert median == pytest.approx(0.2) and within == 0.0
    # grouped: rows 0 and 1 are held out together (fit on row 2: s = 2), row 2 alone (s = 1)
    np.testing.assert_allclose(leave_one_out(features, cycles, ["a", "a", "b"]), [2.0, 4.0, 4.0])
    assert np.isnan(leave_one_out(features, cycles, ["a", "a", "a"])).all()
    assert loo_summary(np.full(3, np.nan), cycles) == (None, None)


def test_coefficients_from_scales_by_hand() -> None:
    coef = coefficients_from_scales(CycleScales(2.0, 10.0, 100.0), PRIOR_CYCLES_PER_MAC, 100.0)
    np.testing.assert_allclose(coef.get("conv_dw", "forward"), [2 * 4.70 / 100, 0, 0.1, 1.0])
    np.testing.assert_allclose(coef.get("linear", "forward"), [2 * 1.57 / 100, 0, 0.1, 1.0])
    for cls in OP_CLASSES:
        for phase in ("grad_input", "grad_weight"):
            np.testing.assert_array_equal(coef.get(cls, phase), coef.get(cls, "forward"))
        np.testing.assert_allclose(coef.get(cls, "update"), [0, 0, (2 * 35 + 10) / 100, 1.0])


def test_the_prior() -> None:
    assert ATOMDB_M7_CYCLES_PER_MAC["conv_kxk"] == 2.24  # the published median, kept
    assert PRIOR_CYCLES_PER_MAC["conv_kxk"] == PRIOR_CYCLES_PER_MAC["conv_pw"] == 1.04
    assert PRIOR_CYCLES_PER_MAC["conv_dw"] == 4.70
    with pytest.raises(ConfigError, match="one value per op class"):
        fit_profile([_anchor("mlperf-kws-dscnn", 0.01)], {"conv_pw": 1.0}, 1e6)


def test_fit_rejects_bad_anchor_sets() -> None:
    with pytest.raises(ConfigError, match="at least one anchor"):
        fit_profile([], PRIOR_CYCLES_PER_MAC, 1e6)
    mixed = [
        _anchor("mlperf-kws-dscnn", 0.01),
        _anchor("mlperf-ad-autoencoder", 0.01, precision="fp32"),
    ]
    with pytest.raises(ConfigError, match="share a precision"):
        fit_profile(mixed, PRIOR_CYCLES_PER_MAC, 1e6)
    external = [_anchor("mlperf-kws-dscnn", 0.01, external_memory=True)]
    with pytest.raises(ConfigError, match="external memory"):
        fit_profile(external, PRIOR_CYCLES_PER_MAC, 1e6)
    with pytest.raises(ConfigError, match="clock_hz"):
        fit_profile([_anchor("mlperf-kws-dscnn", 0.01)], PRIOR_CYCLES_PER_MAC, 0.0)


# --- the published anchors -------------------------------------------------------------------


def test_anchors_are_buildable_and_counted() -> None:
    for a in ANCHORS:
        build_reference(a.model)
    boards = [a.board for a in ANCHORS]
    assert boards.count("DISCO-F746NG") == 16
    assert boards.count("NUCLEO-H7A3ZI-Q") == 24
    assert boards.count("NUCLEO-L4R5ZI") == 48
    assert boards.count("Raspberry Pi 4B") == 8
    assert boards.count("STM32H747I-DISCO") == 13
    external = {a.model for a in ANCHORS if a.external_memory}
    assert external == {
        mobilenet_v1_id(1.0, 224),
        mobilenet_v2_id(0.35, 224, 5),
        mobilenet_v2_id(0.35, 224),
        mobilenet_v2_id(1.0, 224),
        mobilenet_v2_id(1.4, 224),
    }


@pytest.mark.parametrize(
    ("board", "engine", "model", "cycles_per_mac"),
    [  # the derived figures printed in reference/hw-measurements.md §1c, §1d
        ("NUCLEO-L4R5ZI", "TFLM v2.3.1 (reference submission)", "mlperf-ic-resnet8", 6.8),
        ("NUCLEO-L4R5ZI", "TFLM v2.3.1 (reference submission)", "mlperf-vww-mobilenetv1", 9.6),
        ("NUCLEO-L4R5ZI", "TFLM v2.3.1 (reference submission)", "mlperf-kws-dscnn", 8.2),
        ("NUCLEO-L4R5ZI", "TFLM v2.3.1 (reference submission)", "mlperf-ad-autoencoder", 4.6),
        ("NUCLEO-H7A3ZI-Q", "X-CUBE-AI 8.1.0", "mlperf-vww-mobilenetv1", 1.1),
        ("DISCO-F746NG", "Bosch HALE 1.0", "mlperf-ad-autoencoder", 1.4),
        ("STM32H747I-DISCO", "X-CUBE-AI 10.0.0", mobilenet_v1_id(1.0, 224), 1.15),
        ("STM32H747I-DISCO", "X-CUBE-AI 10.0.0", mobilenet_v2_id(1.4, 224), 1.38),
    ],
)
def test_anchor_transcription(board: str, engine: str, model: str, cycles_per_mac: float) -> None:
    from tinytune.hwmodels.reference_models import conv_linear_macs

    (a,) = [a for a in ANCHORS if (a.board, a.engine, a.model) == (board, engine, model)]
    derived = a.cycles / conv_linear_macs(build_reference(model))
    assert derived == pytest.approx(cycles_per_mac, abs=0.051)


# --- every profile fitted on published anchors -----------------------------------------------


def test_builtin_names() -> None:
    assert tuple(builtin_profiles()) == BUILTIN
    builtin_profiles().clear()  # a copy: the registry is not affected
    assert tuple(builtin_profiles()) == BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
def test_profile_coefficients_are_positive(name: str) -> None:
    coef = builtin_profiles()[name].coefficients
    for cls in OP_CLASSES:
        for phase in PHASES:
            c = coef.get(cls, phase)
            assert c.shape == (len(FEATURES),) and np.all(c >= 0)
            assert c[FEATURES.index("macs")] + c[FEATURES.index("elements")] > 0, (cls, phase)
            assert c[FEATURES.index("bytes")] == 0.0


@pytest.mark.parametrize("name", BUILTIN)
def test_profile_calibration(name: str) -> None:
    profile = builtin_profiles()[name]
    assert profile.precision in ("int8", "fp32") and profile.clock_hz > 0
    assert profile.sram_bytes > 0 and profile.flash_bytes > 0
    assert len(profile.calibration) >= 4 and profile.source and profile.notes
    assert profile.loo_median_error is not None and math.isfinite(profile.loo_median_error)
    assert profile.loo_within_10 is not None and 0.0 <= profile.loo_within_10 <= 1.0
    for point in profile.calibration:
        report = predict_latency(build_reference(point.model), profile.coefficients)
        assert report.inference_s == pytest.approx(point.fitted_s, rel=1e-9)
        assert 1 / 3 < point.fitted_s / point.measured_s < 3  # a sane factor, in sample
        assert point.loo_predicted_s is not None and point.loo_predicted_s > 0


@pytest.mark.parametrize("name", ["stm32f746", "stm32h743", "nrf52840"])
def test_microcontroller_profiles_generalise(name: str) -> None:
    profile = builtin_profiles()[name]
    assert profile.loo_median_error is not None and profile.loo_median_error < 0.15
    assert all(0.5 < p.fitted_s / p.measured_s < 1.5 for p in profile.calibration)


def test_profile_facts() -> None:
    f746, h743, nrf, rpi = (builtin_profiles()[n] for n in BUILTIN)
    assert (f746.clock_hz, f746.sram_bytes, f746.flash_bytes) == (216e6, 320 * 1024, 1024**2)
    assert (h743.clock_hz, h743.sram_bytes, h743.flash_bytes) == (480e6, 512 * 1024, 2 * 1024**2)
    assert (nrf.clock_hz, nrf.sram_bytes, nrf.flash_bytes) == (64e6, 256 * 1024, 1024**2)
    assert (rpi.clock_hz, rpi.sram_bytes, rpi.flash_bytes) == (1.5e9, 1024**3, 8 * 1024**3)
    assert [p.precision for p in (f746, h743, nrf, rpi)] == ["int8", "int8", "int8", "fp32"]
    assert {p.board for p in h743.calibration} == {"NUCLEO-H7A3ZI-Q", "STM32H747I-DISCO"}
    assert {p.board for p in nrf.calibration} == {"NUCLEO-L4R5ZI"}
    # the same network is slower on a slower clock of the same core family
    kws = build_reference("mlperf-kws-dscnn")
    assert (
        predict_latency(kws, nrf.coefficients).inference_s
        > predict_latency(kws, f746.coefficients).inference_s
    )


# --- profile files and their errors ----------------------------------------------------------


def _edit(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(builtin_profiles()["stm32f746"].to_dict()))
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("colour",), "red", "unknown keys \\['colour'\\]"),
        (("notes",), _DELETE, "missing keys \\['notes'\\]"),
        (("precision",), "int4", "precision"),
        (("sram_bytes",), -1, "sram_bytes"),
        (("sram_bytes",), "320KB", "sram_bytes"),
        (("clock_hz",), True, "clock_hz"),
        (("name",), "", "name"),
        (("coefficients", "conv_pw", "forward"), [1.0, 2.0], "coefficients"),
        (("coefficients", "conv_pw", "forward"), ["a", 0, 0, 0], "coefficients"),
        (("coefficients", "conv_pw", "forward"), [-1.0, 0, 0, 0], "coefficients"),
        (("coefficients", "conv_3d"), {}, "op class"),
        (("coefficients", "conv_pw"), [1, 2, 3, 4], "coefficients"),
        (("calibration",), "none", "calibration"),
        (("calibration", 0, "fitted_s"), _DELETE, "missing keys \\['fitted_s'\\]"),
        (("calibration", 0, "measured_s"), 0.0, "measured_s"),
        (("loo_within_10",), 1.5, "loo_within_10"),
        (("loo_median_error",), "small", "loo_median_error"),
    ],
)
def test_malformed_profiles_are_rejected(path: tuple[Any, ...], value: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DeviceProfile.from_dict(_edit(path, value))


@pytest.mark.parametrize("data", [None, [], "stm32f746", 3])
def test_a_profile_must_be_an_object(data: Any) -> None:
    with pytest.raises(ConfigError, match="JSON object"):
        DeviceProfile.from_dict(data)
