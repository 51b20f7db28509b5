"""Fitting a latency profile from measurement files: a fit of synthetic measurements made by a
known profile, the deterministic held-out split, and the fits that are refused; measurement
files on disk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.hwmodels.support import MODELS, predicted_file
from tinytune.hwmodels import get_device, predict_latency
from tinytune.hwmodels.fitting import MIN_FIT, calibrate
from tinytune.hwmodels.measurements import (
    FORMAT,
    CalibrationError,
    CallTime,
    MeasurementFile,
    load_measurements,
    save_measurements,
)


def test_a_fit_reproduces_measurements_made_by_a_profile() -> None:
    base = get_device("stm32f746")
    result = calibrate([predicted_file()], base, held_out=2)
    fit = result.fit
    assert (fit["n_fit"], fit["n_held_out"]) == (len(MODELS) - 2, 2)
    assert fit["fit"]["median_abs_error"] == pytest.approx(0.0, abs=1e-6)
    assert fit["precision"] == "int8" and len(fit["held_out_names"]) == 2
    profile = result.profile
    assert (profile.name, profile.clock_hz, profile.sram_bytes) == (
        base.name,
        base.clock_hz,
        base.sram_bytes,
    )
    assert [p.model for p in profile.calibration] == MODELS
    assert {p.board for p in profile.calibration} == {"F746"}
    assert profile.loo_median_error == fit["held_out"]["median_abs_error"]


def test_the_held_out_split_is_deterministic() -> None:
    base = get_device("stm32f746")
    first = calibrate([predicted_file()], base, held_out=0.25).fit["held_out_names"]
    assert len(first) == 2 and calibrate([predicted_file()], base).fit["held_out_names"] == first
    reversed_order = predicted_file(models=MODELS[::-1])  # chosen by name, not by position
    assert set(calibrate([reversed_order], base).fit["held_out_names"]) == set(first)
    assert calibrate([predicted_file()], base, held_out=0).fit["n_held_out"] == 0


def test_unusable_fits_are_refused() -> None:
    base = get_device("stm32f746")
    with pytest.raises(CalibrationError, match="no measurement files"):
        calibrate([], base)
    with pytest.raises(CalibrationError, match=f"at least {MIN_FIT}"):
        calibrate([predicted_file()], base, held_out=len(MODELS) - MIN_FIT + 1)
    with pytest.raises(CalibrationError, match="mix precisions"):
        calibrate([predicted_file("int8", MODELS[:4]), predicted_file("fp32", MODELS[4:])], base)
    with pytest.raises(CalibrationError, match="measured twice"):
        calibrate([predicted_file(), predicted_file()], base)


def test_a_measurement_file_round_trips(tmp_path: Path) -> None:
    file = predicted_file(models=MODELS[:2])
    path = tmp_path / "sub" / "f746.json"
    save_measurements(path, file)
    assert json.loads(path.read_text())["format"] == FORMAT
    loaded = load_measurements(path)
    assert (loaded.device, loaded.precision, loaded.machine) == ("stm32f746", "int8", file.machine)
    for a, b in zip(loaded.measurements, file.measurements, strict=True):
        assert (a.name, a.train_step_s, a.inference_s) == (b.name, b.train_step_s, b.inference_s)
        assert a.graph.to_json() == b.graph.to_json()
    assert [p.name for p in tmp_path.joinpath("sub").iterdir()] == ["f746.json"]  # no temp file
    with pytest.raises(CalibrationError, match="does not exist"):
        load_measurements(tmp_path / "missing.json")


def _timed(file: MeasurementFile) -> MeasurementFile:
    """``file`` as a bundle's profiler writes it: engine ``bundle``, each op's forward timed."""
    truth = get_device("stm32f746")
    measurements = tuple(
        dataclasses.replace(
            m,
            per_call=tuple(
                CallTime(name, "conv2d_s8", phases["forward"])
                for name, phases in predict_latency(m.graph, truth.coefficients, 1).per_op
            ),
        )
        for m in file.measurements
    )
    return dataclasses.replace(file, measurements=measurements, engine="bundle")


def test_timed_calls_and_the_engine_round_trip_and_reach_the_profile(tmp_path: Path) -> None:
    file = _timed(predicted_file())
    save_measurements(tmp_path / "b.json", file)
    loaded = load_measurements(tmp_path / "b.json")
    assert loaded.engine == "bundle"
    assert [m.per_call for m in loaded.measurements] == [m.per_call for m in file.measurements]
    result = calibrate([loaded], get_device("stm32f746"), held_out=2)
    assert result.profile.engine == "bundle" and result.fit["timed_calls"] == len(MODELS) - 2
    assert result.fit["fit"]["median_abs_error"] == pytest.approx(0.0, abs=1e-6)
    assert "timed kernel calls" in result.profile.notes
    assert calibrate([predicted_file()], get_device("stm32f746")).profile.engine == "published"
    with pytest.raises(CalibrationError, match=r"different devices \['host', 'stm32f746'\]"):
        host = dataclasses.replace(predicted_file(models=MODELS[4:]), device="host")
        calibrate([predicted_file(models=MODELS[:4]), host], result.profile)
    with pytest.raises(CalibrationError, match="different engines"):
        calibrate(
            [_timed(predicted_file(models=MODELS[:4])), predicted_file(models=MODELS[4:])],
            result.profile,
        )


def test_files_of_another_device_are_refused() -> None:
    """A host's measurements cannot become a microcontroller's latency model."""
    host = dataclasses.replace(predicted_file(), device="host")
    with pytest.raises(CalibrationError, match=r"measured on 'host', not on 'stm32f746'.*host"):
        calibrate([host], get_device("stm32f746"))
    assert calibrate([host], get_device("host")).profile.name == "host"


def test_a_timed_call_of_an_unknown_op_is_malformed(tmp_path: Path) -> None:
    file = _timed(predicted_file(models=MODELS[:1]))
    save_measurements(tmp_path / "b.json", file)
    data = json.loads((tmp_path / "b.json").read_text())
    data["measurements"][0]["per_call"][0]["op"] = "nowhere"
    (tmp_path / "b.json").write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"measurement 0 .* ops the graph does not have"):
        load_measurements(tmp_path / "b.json")
