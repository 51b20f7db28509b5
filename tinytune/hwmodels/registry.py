"""The devices a search can target, by name, and the profile each one uses.

The built-in profiles are the microcontroller and Linux-board profiles fitted on published
measurements (:func:`tinytune.hwmodels.devices.builtin_profiles`) and this machine
(:func:`tinytune.hwmodels.host.host_profile`). A :class:`Calibration` is a profile fitted on
the device's own measurements (``tinytune calibrate``); handed to :func:`get_device`, it takes
the place of the built-in profile. Where calibrations are stored is the caller's concern: this
module reads no database and no file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tinytune.errors import ConfigError
from tinytune.hwmodels.devices import DeviceProfile, builtin_profiles
from tinytune.hwmodels.host import host_profile

__all__ = ["Calibration", "device_names", "get_device", "profile_label"]


@dataclass(frozen=True)
class Calibration:
    """A stored calibration of one device: a profile fitted on the device's measurements.

    Attributes:
        id: the stored calibration's id (the newest of a device is the one in use).
        device: the registry name of the device it calibrates.
        profile: the fitted profile; its name is ``device``.
    """

    id: int
    device: str
    profile: DeviceProfile

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

    @classmethod
    def parse(cls, id: int, device: str, profile: Mapping[str, Any]) -> Calibration:
        """A calibration from stored plain values: its id, the device name, and the profile
        as :meth:`DeviceProfile.to_dict` wrote it.

        Raises:
            ConfigError: a malformed profile, or one of another device.
        """
        return cls(id=id, device=device, profile=DeviceProfile.from_dict(profile))

    @property
    def label(self) -> str:
        """Where the profile came from, for people: ``calibration 7``."""
        return f"calibration {self.id}"


def profile_label(calibration: Calibration | None) -> str:
    """Where a device's profile came from: ``calibration 7``, or ``built-in`` without one."""
    return "built-in" if calibration is None else calibration.label


def device_names() -> list[str]:
    """The names of every device a search can target, ``host`` included, sorted."""
    return sorted(_builtins())


def get_device(name: str, calibration: Calibration | None = None) -> DeviceProfile:
    """The profile of device ``name``: ``calibration``'s when one is given, else the built-in
    one.

    Raises:
        ConfigError: an unknown name (the message lists the known ones), or a calibration of
            another device.
    """
    builtins = _builtins()
    if name not in builtins:
        raise ConfigError(f"unknown device {name!r}; known devices: {', '.join(sorted(builtins))}")
    if calibration is None:
        return builtins[name]
    if calibration.device != name:
        raise ConfigError(
            f"{calibration.label} is of device {calibration.device!r}, not {name!r}; expected "
            f"a calibration of {name!r} or none"
        )
    return calibration.profile


def _builtins() -> dict[str, DeviceProfile]:
    return {**builtin_profiles(), "host": host_profile()}
