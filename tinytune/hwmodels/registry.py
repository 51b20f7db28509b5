"""The devices a search can target, by name, and the profile each one uses.

A profile describes one engine on one device (:data:`~tinytune.hwmodels.profile.ENGINES`).
The built-in profiles are the microcontroller and Linux-board profiles fitted on published
measurements (:func:`~tinytune.hwmodels.builtin_devices.builtin_profiles`), this machine under
PyTorch (:func:`tinytune.hwmodels.host.host_profile`) and the exported bundle's own kernels
(:func:`tinytune.hwmodels.bundle_engine.bundle_profile`: the Cortex-M7 parts, the nRF52840, the
RP2040, the ESP32-C3 and this machine). The RP2040 and the ESP32-C3 are known from their
datasheets alone (:func:`~tinytune.hwmodels.builtin_devices.builtin_boards`): no latency of them
is published, so the bundle is their only engine. A device's default engine is the bundle where it
has one: what ``tinytune export`` deploys. A :class:`Calibration` is a profile fitted on the
device's own measurements (``tinytune calibrate``); handed to :func:`get_device`, it takes the
place of the built-in profile of its engine. Where calibrations are stored is the caller's
concern: this module reads no database.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tinytune.errors import ConfigError
from tinytune.hwmodels.builtin_devices import builtin_profiles
from tinytune.hwmodels.host import host_profile
from tinytune.hwmodels.profile import DeviceProfile

__all__ = [
    "Calibration",
    "check_device",
    "default_engine",
    "device_engines",
    "device_names",
    "get_device",
    "profile_label",
]


@dataclass(frozen=True)
class Calibration:
    """A stored calibration of one device: a profile fitted on the device's measurements.

    Attributes:
        id: the stored calibration's id (the newest of a device is the one in use).
        device: the registry name of the device it calibrates.
        profile: the fitted profile; its name is ``device``.
        forced: stored although its held-out error missed the accuracy a profile needs
            (``tinytune calibrate --force``); in use all the same, and labelled so.
    """

    id: int
    device: str
    profile: DeviceProfile
    forced: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.id, bool) or not isinstance(self.id, int) or self.id < 1:
            raise ConfigError(f"calibration id must be an integer >= 1, got {self.id!r}")
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"calibration device must be a device name, got {self.device!r}")
        if not isinstance(self.profile, DeviceProfile):
            raise ConfigError(f"calibration profile must be a DeviceProfile, got {self.profile!r}")
        if self.profile.name != self.device:
            raise ConfigError(
                f"calibration {self.id} of device {self.device!r} holds a profile of "
                f"{self.profile.name!r}; expected a profile named {self.device!r}"
            )
        if not isinstance(self.forced, bool):
            raise ConfigError(f"calibration forced must be True or False, got {self.forced!r}")

    @classmethod
    def parse(
        cls, id: int, device: str, profile: Mapping[str, Any], *, forced: bool = False
    ) -> Calibration:
        """A calibration from stored plain values: its id, the device name, the profile as
        :meth:`DeviceProfile.to_dict` wrote it, and whether it was forced.

        Raises:
            ConfigError: a malformed profile, or one of another device.
        """
        parsed = DeviceProfile.from_dict(profile)
        return cls(id=id, device=device, profile=parsed, forced=forced)

    @property
    def label(self) -> str:
        """Where the profile came from, for people: ``calibration 7``, or ``calibration 7
        (FORCED: held-out error above the accuracy required)`` for a forced one."""
        mark = " (FORCED: held-out error above the accuracy required)" if self.forced else ""
        return f"calibration {self.id}{mark}"


def profile_label(calibration: Calibration | None) -> str:
    """Where a device's profile came from: ``calibration 7``, or ``built-in`` without one."""
    return "built-in" if calibration is None else calibration.label


def device_names() -> list[str]:
    """The names of every device a search can target, ``host`` included, sorted."""
    return sorted({name for name, _ in _catalogue()})


def device_engines(name: str) -> list[str]:
    """The engines with a built-in profile on device ``name``, the default first.

    Raises:
        ConfigError: an unknown device (the message lists the known ones).
    """
    check_device(name)
    engines = sorted(e for n, e in _catalogue() if n == name)
    return sorted(engines, key=lambda e: e != "bundle")


def default_engine(name: str) -> str:
    """The engine a search on ``name`` predicts by default: the bundle's kernels where a
    profile of them exists, else the device's only engine."""
    return device_engines(name)[0]


def get_device(
    name: str, calibration: Calibration | None = None, engine: str | None = None
) -> DeviceProfile:
    """The profile of ``engine`` on device ``name``: ``calibration``'s when one of that engine
    is given, else the built-in one. Without ``engine``: the calibration's engine, or else
    :func:`default_engine`.

    Raises:
        ConfigError: an unknown name or engine (the message lists the known ones), or a
            calibration of another device or engine.
    """
    check_device(name)
    engine = engine or (calibration.profile.engine if calibration else default_engine(name))
    if calibration is not None:
        if calibration.device != name:
            raise ConfigError(
                f"{calibration.label} is of device {calibration.device!r}, not {name!r}; "
                f"expected a calibration of {name!r} or none"
            )
        if calibration.profile.engine != engine:
            raise ConfigError(
                f"{calibration.label} describes the {calibration.profile.engine!r} engine of "
                f"{name}, not {engine!r}"
            )
        if calibration.forced and not calibration.profile.forced:
            return dataclasses.replace(calibration.profile, forced=True)
        return calibration.profile
    load = _catalogue().get((name, engine))
    if load is None:
        raise ConfigError(
            f"device {name!r} has no {engine!r} engine; its engines: "
            f"{', '.join(device_engines(name))}"
        )
    return load()


def check_device(name: str) -> None:
    """Refuse a device name that the registry does not know.

    Raises:
        ConfigError: ``name`` is not a known device (the message lists the known ones).
    """
    if name not in device_names():
        raise ConfigError(f"unknown device {name!r}; known devices: {', '.join(device_names())}")


def _catalogue() -> dict[tuple[str, str], Callable[[], DeviceProfile]]:
    """Every built-in (device, engine) and how to get its profile (some read package data)."""
    from tinytune.hwmodels.bundle_engine import bundle_devices, bundle_profile

    found: dict[tuple[str, str], Callable[[], DeviceProfile]] = {
        (p.name, p.engine): (lambda p=p: p) for p in builtin_profiles().values()
    }
    found["host", "pytorch"] = host_profile
    for name in bundle_devices():
        found[name, "bundle"] = functools.partial(bundle_profile, name)
    return found
