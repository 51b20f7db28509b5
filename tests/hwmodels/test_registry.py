"""The device registry: a conformance suite run on every device it knows, and the lookup with a
stored calibration handed in."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tinytune.errors import ConfigError
from tinytune.hwmodels import (
    ENGINES,
    PRECISIONS,
    Calibration,
    DeviceProfile,
    default_engine,
    device_engines,
    device_names,
    get_device,
    predict_latency,
    profile_label,
)
from tinytune.hwmodels.builtin_devices import builtin_boards, builtin_profiles
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


def test_the_registry_holds_the_fitted_profiles_the_boards_and_the_host() -> None:
    assert device_names() == sorted([*builtin_profiles(), *builtin_boards(), "host"])
    assert not set(builtin_profiles()) & set(builtin_boards())
    assert device_names() == sorted(device_names())


ENGINE_PAIRS = [(n, e) for n in device_names() for e in device_engines(n)]


@pytest.mark.parametrize(("name", "engine"), ENGINE_PAIRS)
def test_every_device_and_engine_conforms(name: str, engine: str) -> None:
    profile = get_device(name, engine=engine)
    assert isinstance(profile, DeviceProfile) and profile.name == name
    assert profile.engine == engine and engine in ENGINES
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
def test_every_device_takes_its_calibration(name: str) -> None:  # of its default engine
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


# --- engines ---------------------------------------------------------------------------------


def test_the_bundle_is_the_default_engine_where_it_has_a_profile() -> None:
    assert device_engines("stm32f746") == ["bundle", "published"]
    assert device_engines("stm32h743") == ["bundle", "published"]
    assert device_engines("host") == ["bundle", "pytorch"]
    assert device_engines("nrf52840") == ["bundle", "published"]
    assert device_engines("rpi4") == ["published"]
    assert device_engines("rp2040") == ["bundle"] == device_engines("esp32c3")
    assert default_engine("stm32f746") == "bundle" == get_device("stm32f746").engine
    assert get_device("stm32f746", engine="published") == builtin_profiles()["stm32f746"]
    assert get_device("host", engine="pytorch").precision == "fp32"
    assert get_device("host").precision == "int8" == get_device("stm32f746").precision
    with pytest.raises(ConfigError, match="'rpi4' has no 'bundle' engine; its engines: pub"):
        get_device("rpi4", engine="bundle")
    with pytest.raises(ConfigError, match="'rp2040' has no 'published' engine; its engines: bu"):
        get_device("rp2040", engine="published")


def test_cortex_m7_parts_share_the_bundle_cycles_at_their_clocks() -> None:
    """One fit of instruction counts, in seconds at each part's clock: the same cycles."""
    f746, h743 = get_device("stm32f746"), get_device("stm32h743")
    graph = trace(_Tiny(), torch.zeros(1, 2, 8, 8))
    cycles = [
        predict_latency(graph, p.coefficients, 1).train_step_s * p.clock_hz for p in (f746, h743)
    ]
    assert cycles[0] == pytest.approx(cycles[1], rel=1e-12)
    assert f746.clock_hz == 216e6 and h743.clock_hz == 480e6
    assert "time at 1 cycle per instruction" in f746.notes and "here at 480 MHz" in h743.notes
    assert f746.loo_within_10 is not None and f746.loo_within_10 >= 0.9


def test_the_nrf52840_has_the_cortex_m4_fit_at_its_clock() -> None:
    """The Cortex-M4F part's bundle profile is its own fit (instruction counts of the
    -mcpu=cortex-m4 image under QEMU's MPS2-AN386), at 64 MHz, with the Cortex-M4's note."""
    nrf = get_device("nrf52840")
    assert nrf.engine == "bundle" and nrf.clock_hz == 64e6 and nrf.core == "Cortex-M4F"
    assert "Cortex-M4 issues at most one instruction a cycle" in nrf.notes
    assert "profile-cortex-m4" in nrf.notes and "here at" not in nrf.notes  # fitted at 64 MHz
    assert nrf.loo_within_10 is not None and nrf.loo_within_10 >= 0.9
    f746 = get_device("stm32f746")
    assert nrf.coefficients != f746.coefficients  # not the Cortex-M7's fit at another clock


def test_a_calibration_names_its_engine() -> None:
    published = _calibration("stm32f746", cid=4)  # the default engine's: the bundle's
    assert published.profile.engine == "bundle"
    assert get_device("stm32f746", published) is published.profile
    with pytest.raises(ConfigError, match="describes the 'bundle' engine of stm32f746, not 'pub"):
        get_device("stm32f746", published, "published")
    # a profile stored before engines were named is of the device's former engine
    old = get_device("stm32f746", engine="published").to_dict()
    del old["engine"]
    assert DeviceProfile.from_dict(old).engine == "published"
    old_host = get_device("host", engine="pytorch").to_dict()
    del old_host["engine"]
    assert DeviceProfile.from_dict(old_host).engine == "pytorch"
    with pytest.raises(ConfigError, match="unknown engine 'tflite'; known engines: bundle, pub"):
        dataclasses.replace(get_device("host"), engine="tflite")


def test_a_printed_profile_leaves_out_its_anchors() -> None:
    from tinytune.hwmodels.registry import get_device

    profile = get_device("stm32f746")
    assert len(profile.calibration) > 10
    text = repr(profile)
    assert "name='stm32f746'" in text and "engine=" in text
    assert "calibration=" not in text and "CalibrationPoint" not in text
