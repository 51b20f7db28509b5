"""This machine as a device: what it is (CPU, clock, memory) and its built-in profile.

:func:`machine_info` identifies the machine a measurement was taken on; :func:`host_base` is
the ``host`` device with no latency coefficients yet (what ``tinytune calibrate --device host``
fits); :func:`host_profile` is the built-in ``host`` profile: this machine's facts with the
coefficients shipped in ``hwmodels/data/host.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tinytune.hwmodels.latency import LatencyCoefficients
from tinytune.hwmodels.profile import DeviceProfile

__all__ = ["host_base", "host_profile", "machine_info"]


def machine_info() -> dict[str, Any]:
    """What identifies the host a measurement was taken on."""
    import torch

    return {
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "system": platform.system(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def host_base() -> DeviceProfile:
    """This machine as a device (PyTorch eager, fp32, one thread): its CPU, clock and memory,
    with no latency coefficients yet."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 1024**3
    return DeviceProfile(
        name="host",
        description="this machine: PyTorch eager, fp32, one thread",
        core=_cpu_model(),
        clock_hz=_cpu_clock_hz(),
        sram_bytes=int(ram),
        flash_bytes=int(shutil.disk_usage(Path.cwd()).total),
        precision="fp32",
        coefficients=LatencyCoefficients({}),
        source="not calibrated",
        engine="pytorch",
    )


@cache
def host_profile() -> DeviceProfile:
    """The built-in profile of ``host``: this machine's facts with the coefficients fitted on
    the development machine by ``bench/host_latency.py`` (see ``docs/bench/latency.md``).
    Calibrate it on your own machine (``tinytune profile`` then ``tinytune calibrate --device
    host``) for predictions that mean something there."""
    text = resources.files("tinytune.hwmodels").joinpath("data/host.json").read_text()
    shipped = DeviceProfile.from_dict(json.loads(text))
    base = host_base()
    return dataclasses.replace(
        shipped,
        core=base.core,
        clock_hz=base.clock_hz,
        sram_bytes=base.sram_bytes,
        flash_bytes=base.flash_bytes,
        source=f"{shipped.source}: the development machine's; the core shown is this "
        "machine's, whose own profile `tinytune profile` and `tinytune calibrate` fit",
    )


def _cpuinfo(field: str) -> str | None:
    """The first value of ``field`` in /proc/cpuinfo (Linux), or None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def _cpu_clock_hz() -> float:
    try:
        return float(_cpuinfo("cpu MHz") or 1000.0) * 1e6
    except ValueError:
        return 1e9
