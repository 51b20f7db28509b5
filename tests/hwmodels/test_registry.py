"""The device registry: a conformance suite run on every device it knows, and the lookup with a
stored calibration handed in."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tinytune.errors import ConfigError
from tinytune.hwmodels import (
    PRECISIONS,
    Calibration,
    DeviceProfile,
    device_names,
    get_device,
    predict_latency,
    profile_label,
)
from tinytune.hwmodels.devices import builtin_profiles
from tinytune.ir import trace
from tinytune.models.layers import Classifier, ConvUnit, GlobalAvgPool


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = ConvUnit(torch.randn(4, 2, 3, 3), torch.zeros(4), act="relu", index=0)
        self.pool = GlobalAvgPool()
        self.fc = Classifier(4, 3, torch.Generator().manual_seed(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.conv(x)))


def _calibration(device: str, cid: int = 7) -> Calibration:
    """A stored calibration of ``device``: its built-in profile, twice as fast, as plain values
    the way the database holds them."""
    base = get_device(device)
    faster = dataclasses.replace(base, clock_hz=2 * base.clock_hz, source="measured here")
    return Calibration.parse(cid, device, json.loads(json.dumps(faster.to_dict())))


# --- every device ----------------------------------------------------------------------------


def test_the_registry_holds_the_fitted_profiles_and_the_host() -> None:
    assert device_names() == sorted([*builtin_profiles(), "host"])
    assert device_names() == sorted(device_names())


@pytest.mark.parametrize("name", device_names())
def test_every_device_conforms(name: str) -> None:
    profile = get_device(name)
    assert isinstance(profile, DeviceProfile) and profile.name == name
    assert profile.clock_hz > 0 and profile.sram_bytes > 0 and profile.flash_bytes > 0
    assert profile.precision in PRECISIONS and profile.description and profile.source
    graph = trace(_Tiny(), torch.zeros(1, 2, 8, 8))
    width = PRECISIONS[profile.precision].activation
    report = predict_latency(graph, profile.coefficients, width)
    assert report.train_step_s >= report.inference_s > 0
    data = json.loads(json.dumps(profile.to_dict()))
    assert DeviceProfile.from_dict(data) == profile
    assert DeviceProfile.from_dict(data).to_dict() == profile.to_dict()


@pytest.mark.parametrize("name", device_names())
def test_every_device_takes_its_calibration(name: str) -> None:
    calibration = _calibration(name)
    profile = get_device(name, calibration)
    assert profile is calibration.profile and profile != get_device(name)
    assert profile.clock_hz == 2 * get_device(name).clock_hz
    assert get_device(name, None) is get_device(name)


# --- the lookup and its errors -------------------------------------------------------------


def test_unknown_device_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as err:
        get_device("esp32")
    message = str(err.value)
    assert "'esp32'" in message and f"known devices: {', '.join(device_names())}" in message
    with pytest.raises(ConfigError, match="unknown device 'esp32'"):
        get_device("esp32", _calibration("host"))


def test_a_calibration_of_another_device_is_refused() -> None:
    calibration = _calibration("nrf52840", cid=3)
    with pytest.raises(ConfigError) as err:
        get_device("stm32f746", calibration)
    assert "calibration 3" in str(err.value) and "'nrf52840'" in str(err.value)
    assert "'stm32f746'" in str(err.value)


def test_a_calibration_holds_a_profile_of_its_device() -> None:
    profile = get_device("stm32f746").to_dict()
    with pytest.raises(ConfigError, match="holds a profile of 'stm32f746'"):
        Calibration.parse(1, "nrf52840", profile)
    with pytest.raises(ConfigError, match="unknown keys"):
        Calibration.parse(1, "stm32f746", profile | {"colour": "red"})
    for bad in (0, -1, True, "7"):
        with pytest.raises(ConfigError, match="calibration id"):
            Calibration(bad, "stm32f746", get_device("stm32f746"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="calibration device"):
        Calibration(1, "", get_device("stm32f746"))


def test_where_a_profile_came_from() -> None:
    calibration = _calibration("host", cid=12)
    assert calibration.label == "calibration 12" == profile_label(calibration)
    assert profile_label(None) == "built-in"
