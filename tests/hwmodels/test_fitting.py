"""Fitting a latency profile from measurement files: a fit of synthetic measurements made by a
known profile, the form that cross-validation chooses, the accuracy a stored profile needs,
the deterministic held-out split, and the fits that are refused; measurement files on disk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import nnls

from tests.hwmodels.support import MODELS, MORE_MODELS, SMALL, form_truth, predicted_file, timed
from tinytune.hwmodels import get_device, predict_latency
from tinytune.hwmodels.fitting import (
    MIN_CHECKED,
    MIN_FIT,
    MODEL_FORMS,
    Accuracy,
    fit_latency,
    forms_for,
    networks_to_add,
    select_form,
)
from tinytune.hwmodels.latency import FEATURES
from tinytune.hwmodels.latency_fit import ModelForm, fit_system
from tinytune.hwmodels.measurements import (
    FORMAT,
    CalibrationError,
    CallTime,
    MeasurementFile,
    load_measurements,
    save_measurements,
)


def test_a_fit_recovers_a_profile_of_one_of_its_forms() -> None:
    """Steps and timed calls that an 11-coefficient form predicts exactly: cross-validation
    chooses that form, not a larger one that holds them as well, and the fit predicts
    held-out networks exactly."""
    base = get_device("stm32f746")
    truth = form_truth(SMALL)
    file = timed(predicted_file(models=MORE_MODELS, truth=truth), truth)
    result = fit_latency([file], base, held_out=2)
    fit = result.fit
    assert (fit["n_fit"], fit["n_held_out"]) == (len(MORE_MODELS) - 2, 2)
    form = {**fit["form"], "features": tuple(fit["form"]["features"])}
    assert ModelForm(**{**form, "update_features": tuple(form["update_features"])}) == SMALL
    assert fit["form_text"] == SMALL.describe() and SMALL.n_params == 11
    for errors in ("fit", "cross_validated", "held_out"):
        assert fit[errors]["max_abs_error"] == pytest.approx(0.0, abs=1e-6)
    assert result.shortfall is None and fit["meets_required"] and result.more_networks == 0
    assert fit["precision"] == "int8" and len(fit["held_out_names"]) == 2
    assert len(fit["forms_tried"]) == len(MODEL_FORMS)
    profile = result.profile
    assert (profile.name, profile.clock_hz, profile.sram_bytes) == (
        base.name,
        base.clock_hz,
        base.sram_bytes,
    )
    assert [p.model for p in profile.calibration] == MORE_MODELS
    assert {p.board for p in profile.calibration} == {"F746"}
    assert profile.loo_median_error == fit["held_out"]["median_abs_error"]
    assert SMALL.describe() in profile.notes


def test_few_networks_do_not_get_the_full_model() -> None:
    """Steps of a profile with a coefficient per (cost class, phase, feature), eight networks
    measured: cross-validation chooses a smaller form than the largest tried, one that predicts
    networks it was not fitted on better (the truth a profile of the largest form, drawn at
    random, not the built-in one, whose form is a fit's choice)."""
    largest = max(MODEL_FORMS, key=lambda f: f.n_params)
    assert (largest.classes, largest.phases, largest.features) == ("cost", "each", FEATURES)
    file = predicted_file(truth=form_truth(largest))
    result = fit_latency([file], get_device("stm32f746"), held_out=0)

    def key(f: dict) -> tuple:
        return f["classes"], f["phases"], tuple(f["features"]), tuple(f["update_features"])

    tried = {key(f): f["cv_mean_abs_error"] for f in result.fit["forms_tried"]}
    assert len(tried) == len(MODEL_FORMS) and result.fit["n_held_out"] == 0
    chosen = key(result.fit["form"])
    assert chosen != key(largest.to_dict()) and tried[chosen] < tried[key(largest.to_dict())]
    # with none held out, the profile's error columns are the cross-validated ones
    cv = result.fit["cross_validated"]
    assert result.profile.loo_median_error == cv["median_abs_error"]


def test_the_cross_validation_leaves_whole_networks_out() -> None:
    """Each network's cross-validated error, against scipy's nnls fitted by hand on the other
    networks' rows (their steps and their ops' timed forward passes), columns scaled to unit
    norm: fewer networks than folds, so each is left out alone."""
    file = predicted_file(truth=form_truth(SMALL), noise=0.2, models=MODELS[:6])
    ms = file.measurements
    forward = [
        {name: phases["forward"] * (1.1 + 0.01 * k) for k, (name, phases) in enumerate(
            predict_latency(m.graph, form_truth(SMALL), 1).per_op)}
        for m in ms
    ]  # fmt: skip
    system = fit_system([m.graph for m in ms], [m.train_step_s for m in ms], 1, None, forward)
    assert system.step.sum() == 6 and len(system.b) == 6 + sum(len(m.graph.ops) for m in ms)
    form = ModelForm("shared", "shared", ("macs", "constant"))
    _, errors, _ = select_form(system, [form])
    tying = form.tying()
    for i in range(len(ms)):
        rows = system.network != i
        a = system.a[rows] @ tying
        norms = np.linalg.norm(a, axis=0)
        theta = nnls(a / norms, system.b[rows])[0] / norms
        step = system.a[(system.network == i) & system.step][0]
        assert errors[i] == pytest.approx(step @ tying @ theta - 1.0, rel=1e-6, abs=1e-9)


def test_a_fit_short_of_the_accuracy_says_so() -> None:
    """Steps 60 % off a profile's, either way: the fit is returned with what it misses and the
    networks to add; an accuracy that the same errors meet takes it."""
    file = predicted_file(truth=form_truth(SMALL), noise=0.6, models=MORE_MODELS)
    result = fit_latency([file], get_device("stm32f746"), held_out=3)
    held = result.fit["held_out"]
    assert result.shortfall is not None and not result.fit["meets_required"]
    assert f"{len(MORE_MODELS)} networks measured" in result.shortfall
    assert f"max {held['max_abs_error']:.1%} over 3 networks" in result.shortfall
    assert "median within ±10%, every network within ±25%" in result.shortfall
    assert result.more_networks == 40 - len(MORE_MODELS)
    loose = Accuracy(median=10.0, worst=10.0)
    assert (
        fit_latency([file], get_device("stm32f746"), held_out=3, required=loose).shortfall is None
    )
    # fewer networks than an accuracy is checked on: refused however small their errors
    truth = form_truth(SMALL)
    few = fit_latency([timed(predicted_file(truth=truth), truth)], get_device("stm32f746"))
    assert few.fit["held_out"]["max_abs_error"] == pytest.approx(0.0, abs=1e-6)
    assert few.shortfall == (
        f"{len(MODELS)} networks measured, too few to check the accuracy a profile needs "
        f"(median within ±10%, every network within ±25%) on: it takes at least {MIN_CHECKED}"
    )
    assert few.more_networks == 40 - len(MODELS)


def test_accuracy_and_networks_to_add_by_hand() -> None:
    summary = {"n": 3, "median_abs_error": 0.10, "max_abs_error": 0.25}
    assert Accuracy().met_by(summary)
    assert not Accuracy().met_by({**summary, "max_abs_error": 0.2501})
    assert not Accuracy().met_by({**summary, "median_abs_error": 0.11})
    assert Accuracy().met_by({"n": 0, "median_abs_error": None, "max_abs_error": None})
    assert networks_to_add(12, "pytorch") == 28
    assert networks_to_add(40, "pytorch") == 40  # as many as fell short, again
    assert networks_to_add(6, "published") == 34
    for bad in (0.0, -0.1, True, "10%"):
        with pytest.raises(CalibrationError, match="accuracy median must be a number > 0"):
            Accuracy(median=bad)  # type: ignore[arg-type]


def test_the_held_out_split_is_deterministic() -> None:
    base = get_device("stm32f746")
    first = fit_latency([predicted_file()], base, held_out=0.25).fit["held_out_names"]
    assert len(first) == 2 and fit_latency([predicted_file()], base).fit["held_out_names"] == first
    reversed_order = predicted_file(models=MODELS[::-1])  # chosen by name, not by position
    assert set(fit_latency([reversed_order], base).fit["held_out_names"]) == set(first)
    assert fit_latency([predicted_file()], base, held_out=0).fit["n_held_out"] == 0


def test_unusable_fits_are_refused() -> None:
    base = get_device("stm32f746")
    with pytest.raises(CalibrationError, match="no measurement files"):
        fit_latency([], base)
    with pytest.raises(CalibrationError, match=f"at least {MIN_FIT}"):
        fit_latency([predicted_file()], base, held_out=len(MODELS) - MIN_FIT + 1)
    with pytest.raises(CalibrationError, match="mix precisions"):
        fit_latency([predicted_file("int8", MODELS[:4]), predicted_file("fp32", MODELS[4:])], base)
    with pytest.raises(CalibrationError, match="measured twice"):
        fit_latency([predicted_file(), predicted_file()], base)


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
    result = fit_latency([loaded], get_device("stm32f746"), held_out=2)
    assert result.profile.engine == "bundle" and result.fit["timed_calls"] == len(MODELS) - 2
    assert result.fit["n_rows"] == sum(
        1 + len(m.graph.ops) for m in loaded.measurements if m.name not in result.fit[
            "held_out_names"]
    )  # fmt: skip
    assert "timed kernel calls" in result.profile.notes
    assert fit_latency([predicted_file()], get_device("stm32f746")).profile.engine == "published"
    with pytest.raises(CalibrationError, match=r"different devices \['host', 'stm32f746'\]"):
        host = dataclasses.replace(predicted_file(models=MODELS[4:]), device="host")
        fit_latency([predicted_file(models=MODELS[:4]), host], result.profile)
    with pytest.raises(CalibrationError, match="different engines"):
        fit_latency(
            [_timed(predicted_file(models=MODELS[:4])), predicted_file(models=MODELS[4:])],
            result.profile,
        )


def test_files_of_another_device_are_refused() -> None:
    """A host's measurements cannot become a microcontroller's latency model."""
    host = dataclasses.replace(predicted_file(), device="host")
    with pytest.raises(CalibrationError, match=r"measured on 'host', not on 'stm32f746'.*host"):
        fit_latency([host], get_device("stm32f746"))
    assert fit_latency([host], get_device("host")).profile.name == "host"


def test_a_timed_call_of_an_unknown_op_is_malformed(tmp_path: Path) -> None:
    file = _timed(predicted_file(models=MODELS[:1]))
    save_measurements(tmp_path / "b.json", file)
    data = json.loads((tmp_path / "b.json").read_text())
    data["measurements"][0]["per_call"][0]["op"] = "nowhere"
    (tmp_path / "b.json").write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"measurement 0 .* ops the graph does not have"):
        load_measurements(tmp_path / "b.json")


def test_a_pytorch_fit_prices_the_eager_work_apart_and_a_bundle_fit_does_not() -> None:
    """Steps of a profile that prices each activation apart from its convolution, measured
    with PyTorch: the fit chooses among the forms with the eager classes and predicts every
    network exactly; read as a bundle's, among the forms without them."""
    assert forms_for("bundle") == MODEL_FORMS
    eager = forms_for("pytorch")
    assert [dataclasses.replace(f, eager=False) for f in eager] == list(MODEL_FORMS)
    assert all(f.eager for f in eager)
    form = dataclasses.replace(SMALL, eager=True)
    file = predicted_file("fp32", MORE_MODELS, form_truth(form), "host")
    host = fit_latency(
        [dataclasses.replace(file, engine="pytorch")], get_device("host"), held_out=2
    )
    assert host.fit["form_text"] == form.describe()
    for errors in ("fit", "held_out"):  # (10 whole steps: a fold of 9 leaves some class unseen)
        assert host.fit[errors]["max_abs_error"] == pytest.approx(0.0, abs=1e-6)
    bundle = fit_latency(
        [dataclasses.replace(file, engine="bundle")], get_device("host"), held_out=2
    )
    assert not bundle.fit["form"]["eager"]
