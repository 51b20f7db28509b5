"""Measurement files, fitting a device's latency profile from them, and resolving a device.

A measurement file holds measured training steps of traced networks on one device:

.. code-block:: json

    {"format": "tinytune-latency/1", "device": "host", "precision": "fp32",
     "machine": {...}, "created_at": "2026-11-21T10:00:00+00:00",
     "measurements": [{"name": "...", "graph": {...}, "train_step_s": 0.021,
                       "train_step_median_s": 0.023, "inference_s": 0.006,
                       "samples": [...], "per_op_forward_s": {...}}]}

``train_step_s`` is the figure fitted (for the host: the fastest of many interleaved repeats,
see :mod:`tinytune.hwmodels.profiler`); the other fields are optional.

``graph`` is the network's :class:`~tinytune.ir.Graph` as a JSON object, so a file can be
fitted anywhere, without the network. ``tinytune profile`` writes such files for the host; a
board's own runs (for example the exported bundle's step time) can be written in the same form.

:func:`calibrate` splits the measurements deterministically into a fit set and a held-out set,
fits the per-op coefficients by non-negative least squares on the fit set and reports the error
on both. A fit that is not usable (too few measurements, or coefficients that predict a
non-positive time for a measured network) raises :class:`CalibrationError`, so that nothing is
stored. :func:`resolve_device` gives the profile a search uses: the newest stored calibration of
the device, else its built-in profile.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tinytune.errors import ConfigError
from tinytune.hwmodels.devices import (
    CalibrationPoint,
    DeviceProfile,
    builtin_profiles,
)
from tinytune.hwmodels.latency import fit_coefficients, predict_latency
from tinytune.ir import Graph

__all__ = [
    "FORMAT",
    "MIN_FIT",
    "CalibrationError",
    "CalibrationResult",
    "Measurement",
    "MeasurementFile",
    "bytes_per_element",
    "calibrate",
    "device_names",
    "host_base",
    "host_profile",
    "load_measurements",
    "machine_info",
    "predict",
    "resolve_device",
    "save_measurements",
    "write_json_atomic",
]

FORMAT = "tinytune-latency/1"
MIN_FIT = 4
"""Fewest measurements a fit accepts."""


class CalibrationError(ConfigError):
    """Measurements cannot give a usable latency profile."""


@dataclass(frozen=True)
class Measurement:
    """One measured network: its graph and median seconds of a training step (and, when
    measured, of a forward pass)."""

    name: str
    graph: Graph
    train_step_s: float
    inference_s: float | None = None
    samples: tuple[float, ...] = ()
    train_step_median_s: float | None = None
    per_op_forward_s: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class MeasurementFile:
    device: str
    precision: str
    machine: dict[str, Any]
    created_at: str
    measurements: tuple[Measurement, ...]


def bytes_per_element(precision: str) -> int:
    return 1 if precision == "int8" else 4


def predict(profile: DeviceProfile, graph: Graph) -> tuple[float, float]:
    """Predicted seconds of one training step and of one forward pass of ``graph``."""
    report = predict_latency(graph, profile.coefficients, bytes_per_element(profile.precision))
    return report.train_step_s, report.inference_s


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


# -- files --------------------------------------------------------------------------------------


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename, so that a
    failure never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_measurements(path: Path, file: MeasurementFile) -> None:
    write_json_atomic(
        path,
        {
            "format": FORMAT,
            "device": file.device,
            "precision": file.precision,
            "machine": file.machine,
            "created_at": file.created_at,
            "measurements": [
                {
                    "name": m.name,
                    "graph": json.loads(m.graph.to_json()),
                    "train_step_s": m.train_step_s,
                    "train_step_median_s": m.train_step_median_s,
                    "inference_s": m.inference_s,
                    "samples": list(m.samples),
                    "per_op_forward_s": m.per_op_forward_s,
                }
                for m in file.measurements
            ],
        },
    )


def load_measurements(path: str | Path) -> MeasurementFile:
    """Read and check a measurement file.

    Raises:
        CalibrationError: the file is missing, not JSON, not a measurement file, empty, or one
            of its measurements is malformed (the message names the file and the entry).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise CalibrationError(f"measurement file {str(path)!r} does not exist") from e
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CalibrationError(
            f"measurement file {str(path)!r} is not readable JSON ({_first_line(e)}); expected "
            f"a file written by 'tinytune profile' (format {FORMAT!r})"
        ) from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CalibrationError(
            f"{str(path)!r} is not a tinytune measurement file: expected a JSON object with "
            f'"format": "{FORMAT}"'
        )
    entries = data.get("measurements")
    if not isinstance(entries, list) or not entries:
        raise CalibrationError(f"measurement file {str(path)!r} has no measurements")
    precision = data.get("precision")
    if precision not in ("fp32", "int8"):
        raise CalibrationError(
            f"measurement file {str(path)!r}: precision {precision!r} is not 'fp32' or 'int8'"
        )
    measurements = []
    for i, entry in enumerate(entries):
        try:
            measurements.append(_measurement(entry))
        except (KeyError, TypeError, ValueError) as e:
            raise CalibrationError(
                f"measurement {i} of {str(path)!r} is malformed ({_first_line(e)}); expected "
                "name, graph, train_step_s > 0"
            ) from e
    return MeasurementFile(
        device=str(data.get("device", "")),
        precision=precision,
        machine=dict(data.get("machine") or {}),
        created_at=str(data.get("created_at", "")),
        measurements=tuple(measurements),
    )


def _measurement(entry: Any) -> Measurement:
    if not isinstance(entry, dict):
        raise TypeError("not a JSON object")
    step = float(entry["train_step_s"])
    infer = entry.get("inference_s")
    infer = None if infer is None else float(infer)
    median = entry.get("train_step_median_s")
    median = None if median is None else float(median)
    for what, v in (("train_step_s", step), ("inference_s", infer), ("median", median)):
        if v is not None and (not math.isfinite(v) or v <= 0):
            raise ValueError(f"{what} {v!r} is not a finite number > 0")
    graph_data = entry["graph"]
    if not isinstance(graph_data, dict):
        raise TypeError("graph is not a JSON object")
    graph = Graph.from_json(json.dumps(graph_data))
    if not graph.ops:
        raise ValueError("graph has no ops")
    per_op = {str(k): float(v) for k, v in (entry.get("per_op_forward_s") or {}).items()}
    return Measurement(
        name=str(entry["name"]),
        graph=graph,
        train_step_s=step,
        inference_s=infer,
        samples=tuple(float(s) for s in entry.get("samples") or ()),
        train_step_median_s=median,
        per_op_forward_s=per_op,
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


# -- fitting ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationResult:
    """A fitted profile and how well it predicts.

    Attributes:
        profile: the device profile with the new coefficients, calibration points and errors.
        fit: a JSON-ready summary (sizes, in-sample and held-out error, inputs) for storage.
    """

    profile: DeviceProfile
    fit: dict[str, Any]


def _split(measurements: Sequence[Measurement], held_out: float) -> tuple[list[int], list[int]]:
    """Deterministic split: measurements ordered by a hash of their name, every k-th held out.

    ``held_out`` is a count (>= 1) or a fraction (< 1) of the measurements.
    """
    n = len(measurements)
    count = round(held_out * n) if held_out < 1 else int(held_out)
    if count < 0 or n - count < MIN_FIT:
        raise CalibrationError(
            f"{n} measurements leave {n - count} to fit after holding out {count}; a fit needs "
            f"at least {MIN_FIT}: measure more networks or hold out fewer (--held-out)"
        )
    order = sorted(range(n), key=lambda i: hashlib.sha256(measurements[i].name.encode()).digest())
    held = sorted(order[:: max(1, n // count)][:count]) if count else []
    fit = [i for i in range(n) if i not in set(held)]
    return fit, held


def _errors(profile: DeviceProfile, ms: Sequence[Measurement]) -> list[float]:
    return [predict(profile, m.graph)[0] / m.train_step_s - 1.0 for m in ms]


def _summary(errors: Sequence[float]) -> dict[str, float | int | None]:
    if not errors:
        return {"n": 0, "within_10": None, "median_abs_error": None, "max_abs_error": None}
    absolute = [abs(e) for e in errors]
    return {
        "n": len(errors),
        "within_10": sum(a <= 0.10 for a in absolute) / len(absolute),
        "median_abs_error": statistics.median(absolute),
        "max_abs_error": max(absolute),
    }


def calibrate(
    files: Sequence[MeasurementFile], base: DeviceProfile, *, held_out: float = 0.25
) -> CalibrationResult:
    """Fit ``base``'s latency coefficients anew from measurement files of that device.

    Raises:
        CalibrationError: the files disagree on precision, there are too few measurements, or
            the fitted coefficients predict a non-positive time for a measured network.
    """
    if not files:
        raise CalibrationError("no measurement files given")
    precisions = {f.precision for f in files}
    if len(precisions) > 1:
        raise CalibrationError(f"measurement files mix precisions {sorted(precisions)}")
    precision = precisions.pop()
    ms = [m for f in files for m in f.measurements]
    names = [m.name for m in ms]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise CalibrationError(f"the same network is measured twice: {dup[:3]}")
    fit_idx, held_idx = _split(ms, held_out)
    fit_ms = [ms[i] for i in fit_idx]
    held_ms = [ms[i] for i in held_idx]
    coef = fit_coefficients(
        [m.graph for m in fit_ms],
        [m.train_step_s for m in fit_ms],
        bytes_per_element=bytes_per_element(precision),
    )
    machine = files[0].machine
    draft = dataclasses.replace(base, precision=precision, coefficients=coef)
    bad = [m.name for m in ms if not predict(draft, m.graph)[0] > 0]
    if bad:
        raise CalibrationError(
            f"the fit predicts no time for {len(bad)} measured networks (e.g. {bad[0]!r}); the "
            "measurements do not constrain the model: measure more varied networks"
        )
    fit_summary = _summary(_errors(draft, fit_ms))
    held_summary = _summary(_errors(draft, held_ms))
    # the same held-out prediction against the median repeat, where it was recorded
    against_median = _summary(
        [
            predict(draft, m.graph)[0] / m.train_step_median_s - 1.0
            for m in held_ms
            if m.train_step_median_s
        ]
    )
    engine = f"pytorch {machine.get('torch', '?')} eager" if base.name == "host" else "measured"
    board = str(machine.get("processor") or files[0].device or base.name)
    points = tuple(
        CalibrationPoint(
            model=m.name,
            engine=engine,
            board=board,
            measured_s=m.train_step_s,
            fitted_s=predict(draft, m.graph)[0],
            loo_predicted_s=None,
        )
        for m in ms
    )
    held_text = (
        f"{held_summary['within_10']:.0%} of {held_summary['n']} held-out networks within ±10 %"
        if held_summary["n"]
        else "no held-out networks"
    )
    profile = dataclasses.replace(
        draft,
        calibration=points,
        loo_median_error=held_summary["median_abs_error"],
        loo_within_10=held_summary["within_10"],
        source=(
            f"measured training steps of {len(ms)} networks on {board} "
            f"({dt.date.today().isoformat()}); {held_text}"
        ),
        notes=(
            "Fitted by non-negative least squares on relative error over "
            f"{len(fit_ms)} networks; the error columns are on {len(held_ms)} held-out ones."
        ),
    )
    fit = {
        "n_fit": len(fit_ms),
        "n_held_out": len(held_ms),
        "fit": fit_summary,
        "held_out": held_summary,
        "held_out_vs_median": against_median,
        "held_out_names": [m.name for m in held_ms],
        "precision": precision,
        "machine": machine,
        "files": [f.created_at for f in files],
    }
    return CalibrationResult(profile, fit)


# -- the devices a search can use ---------------------------------------------------------------


def _cpu_clock_hz() -> float:
    try:
        return float(_cpuinfo("cpu MHz") or 1000.0) * 1e6
    except ValueError:
        return 1e9


def host_base() -> DeviceProfile:
    """This machine as a device (PyTorch eager, fp32, one thread): its CPU, clock and memory,
    with no latency coefficients yet."""
    from tinytune.hwmodels.latency import LatencyCoefficients

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
    )


@cache
def host_profile() -> DeviceProfile:
    """The built-in profile of ``host``: this machine's facts with the coefficients fitted on
    the development machine by ``bench/host_latency.py`` (see ``docs/benchmarks.md``).
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
        source=f"{shipped.source} (on the development machine, not this one)",
    )


def _builtins() -> dict[str, DeviceProfile]:
    return {**builtin_profiles(), "host": host_profile()}


def device_names() -> list[str]:
    return sorted(_builtins())


def resolve_device(name: str, store: Any | None = None) -> tuple[DeviceProfile, int | None]:
    """The profile of device ``name``: its newest calibration in ``store``, else the built-in
    one. Returns the profile and the calibration id it came from (None for a built-in).

    Raises:
        ConfigError: no such device (the message lists the known ones).
    """
    builtins = _builtins()
    if name not in builtins:
        raise ConfigError(f"unknown device {name!r}; known devices: {', '.join(sorted(builtins))}")
    if store is not None:
        record = store.latest_calibration(name)
        if record is not None:
            return DeviceProfile.from_dict(record.profile), record.id
    return builtins[name], None
