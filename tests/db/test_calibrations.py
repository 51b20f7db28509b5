"""Device calibrations in the Store: newest wins, history kept, bad values refused."""

from __future__ import annotations

import math

import pytest

from tinytune.errors import StorageError

PROFILE = {"name": "host", "clock_hz": 2.0e9, "coefficients": {"linear": {"forward": [1e-9, 0.0]}}}


def test_newest_calibration_is_in_use_and_history_is_kept(store) -> None:
    assert store.latest_calibration("host") is None
    first = store.add_calibration("host", PROFILE, {"held_out_within_10": 0.8})
    second = store.add_calibration("host", PROFILE | {"clock_hz": 3.0e9}, {"n_fit": 60})
    store.add_calibration("stm32f746", PROFILE, {})
    latest = store.latest_calibration("host")
    assert latest is not None and latest.id == second > first
    assert latest.profile["clock_hz"] == 3.0e9 and latest.fit == {"n_fit": 60}
    assert latest.created_at.tzinfo is not None
    assert [c.id for c in store.calibrations("host")] == [first, second]
    assert len(store.calibrations()) == 3


@pytest.mark.parametrize(
    ("device", "profile", "fit"),
    [("", PROFILE, {}), ("host", [1, 2], {}), ("host", PROFILE, {"x": math.nan})],
)
def test_bad_calibration_is_refused_and_nothing_is_written(
    sqlite_store, device, profile, fit
) -> None:
    sqlite_store.add_calibration("host", PROFILE, {"ok": True})
    with pytest.raises(StorageError):
        sqlite_store.add_calibration(device, profile, fit)
    assert [c.fit for c in sqlite_store.calibrations()] == [{"ok": True}]


def test_the_calibration_of_an_engine(sqlite_store) -> None:
    """Without an engine the bundle's newest calibration wins, else the newest of any; with one,
    the newest of that engine."""
    import dataclasses

    from tinytune.hwmodels import get_device

    def add(engine: str) -> int:
        profile = dataclasses.replace(get_device("stm32f746", engine=engine), source=engine)
        return sqlite_store.add_calibration("stm32f746", profile.to_dict(), {})

    assert sqlite_store.latest_device_calibration("stm32f746") is None
    published = add("published")
    assert sqlite_store.latest_device_calibration("stm32f746").id == published
    assert sqlite_store.latest_device_calibration("stm32f746", "bundle") is None
    bundle = add("bundle")
    add("published")
    assert sqlite_store.latest_device_calibration("stm32f746").id == bundle
    assert sqlite_store.latest_device_calibration("stm32f746", "bundle").id == bundle
    assert sqlite_store.latest_device_calibration("stm32f746", "published").id == bundle + 1


def test_a_forced_calibration_is_kept_marked(sqlite_store) -> None:
    """One stored with --force is in use, and marked so in its record and its label; one
    stored without is not."""
    from tinytune.hwmodels import get_device

    profile = get_device("stm32f746", engine="published").to_dict()
    plain = sqlite_store.add_calibration("stm32f746", profile, {})
    forced = sqlite_store.add_calibration("stm32f746", profile, {}, forced=True)
    assert [c.forced for c in sqlite_store.calibrations("stm32f746")] == [False, True]
    latest = sqlite_store.latest_device_calibration("stm32f746")
    assert latest.id == forced > plain and latest.forced
    assert latest.label == (
        f"calibration {forced} (FORCED: held-out error above the accuracy required)"
    )
    sqlite_store.add_calibration("stm32f746", profile, {})
    latest = sqlite_store.latest_device_calibration("stm32f746")
    assert not latest.forced and latest.label == f"calibration {forced + 1}"
