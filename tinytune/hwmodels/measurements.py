"""Measurement files: measured training steps of traced networks on one device, on disk.

A measurement file (format ``tinytune-latency/1``) holds measured training steps of traced
networks on one device:

.. code-block:: json

    {"format": "tinytune-latency/1", "device": "host", "precision": "fp32",
     "machine": {...}, "created_at": "2026-11-21T10:00:00+00:00",
     "measurements": [{"name": "...", "graph": {...}, "train_step_s": 0.021,
                       "train_step_median_s": 0.023, "inference_s": 0.006,
                       "samples": [...], "per_op_forward_s": {...},
                       "per_op_backward_s": {...}}]}

``train_step_s`` is the figure fitted (for the host: the fastest of many interleaved repeats,
see :mod:`tinytune.hwmodels.profiler`); the other fields are optional. A bundle's profiler
(``make run-profile-host`` in an exported bundle, ``platform/profile_main.c``) writes
``"engine": "bundle"`` and, per measurement, ``per_call``: the op, the kernel and the seconds
of every kernel call of the step, in order, which the fit uses to separate the phases; an
audio bundle's also ``frontend_s``: its front-end's seconds to make one clip's input of raw
samples (``tt_input_from_pcm16``), which the fit does not use.

``graph`` is the network's :class:`~tinytune.ir.Graph` as a JSON object, so a file can be
fitted anywhere, without the network. ``tinytune profile`` writes such files for the host; a
board's own runs (for example the exported bundle's step time) can be written in the same form.
:mod:`tinytune.hwmodels.fitting` fits a latency profile from them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinytune.errors import ConfigError
from tinytune.ir import Graph

__all__ = [
    "FORMAT",
    "PART_RANGE_S",
    "STEP_RANGE_S",
    "CalibrationError",
    "CallTime",
    "Measurement",
    "MeasurementFile",
    "load_measurements",
    "save_measurements",
    "staged_json",
    "write_json_atomic",
]

FORMAT = "tinytune-latency/1"

STEP_RANGE_S = (1e-9, 3600.0)
"""Seconds a measured step (or forward pass, or sample) may take. One nanosecond is the
finest tick of any counter that writes these files (``clock_gettime``; a Cortex-M's cycle
counter and QEMU's instruction count tick coarser), so a shorter step was not measured; an
hour is far beyond the training step of any network the latency model prices (seconds on a
microcontroller), so a longer one is a unit error or a hang."""

PART_RANGE_S = (0.0, 3600.0)
"""Seconds an op's forward pass or a kernel call may take: as :data:`STEP_RANGE_S`, but zero
is allowed, since a part shorter than the counter's tick reads as zero ticks."""


class CalibrationError(ConfigError):
    """Measurements cannot give a usable latency profile: an unreadable or malformed
    measurement file, or a fit that is not usable."""


@dataclass(frozen=True)
class CallTime:
    """One kernel call of a bundle's step: the graph op it belongs to, the kernel, seconds."""

    op: str
    kernel: str
    seconds: float


@dataclass(frozen=True)
class Measurement:
    """One measured network: its graph, the seconds of a training step that a fit uses and,
    where measured, a forward pass, the median step, every sample, each op's forward and
    backward pass, each kernel call of a bundle's step and an audio bundle's front-end (one
    clip's raw samples to the input)."""

    name: str
    graph: Graph
    train_step_s: float
    inference_s: float | None = None
    samples: tuple[float, ...] = ()
    train_step_median_s: float | None = None
    per_op_forward_s: dict[str, float] = dataclasses.field(default_factory=dict)
    per_call: tuple[CallTime, ...] = ()
    per_op_backward_s: dict[str, float] = dataclasses.field(default_factory=dict)
    frontend_s: float | None = None


@dataclass(frozen=True)
class MeasurementFile:
    """The contents of one measurement file: the device and precision measured, the machine
    that measured (:func:`tinytune.hwmodels.host.machine_info` for the host), when, what, and
    the engine that ran the steps (``bundle`` for a bundle's own kernels, ``""`` when the file
    does not say)."""

    device: str
    precision: str
    machine: dict[str, Any]
    created_at: str
    measurements: tuple[Measurement, ...]
    engine: str = ""


ENGINE_PRECISION = {"pytorch": "fp32", "bundle": "int8"}
"""The precision each measuring engine trains in: ``tinytune profile`` times PyTorch's fp32
step, a bundle's profiler its int8 step."""


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename, so that a
    failure never leaves a half-written file."""
    with staged_json(path, data):
        pass


@contextmanager
def staged_json(path: Path, data: Any) -> Iterator[Callable[[], None]]:
    """Write ``data`` as JSON to a temporary file beside ``path`` on entry, and rename it to
    ``path`` when the block ends without an error; an error in the block removes it and
    leaves ``path`` as it was, unless the block had already done the rename. What must happen
    only once the file is written (storing the same data elsewhere) goes in the block. The
    block gets the rename as a function, to call at the moment of its choosing (inside a
    database transaction, before its commit); called, it is not done again at the end.

    Raises:
        OSError: the temporary file cannot be written, or the rename fails.
        ValueError: ``data`` is not JSON (a NaN or an infinity included).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    placed = False

    def place() -> None:
        nonlocal placed
        if not placed:
            os.replace(tmp, path)
            placed = True

    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would make it, not mkstemp's owner-only
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, allow_nan=False)
            f.write("\n")
        yield place
        place()
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_measurements(path: Path, file: MeasurementFile) -> None:
    """Write ``file`` to ``path`` (atomically); :func:`load_measurements` reads it back."""
    write_json_atomic(
        path,
        {
            "format": FORMAT,
            "device": file.device,
            "precision": file.precision,
            **({"engine": file.engine} if file.engine else {}),
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
                    **({"per_op_backward_s": m.per_op_backward_s} if m.per_op_backward_s else {}),
                    **({"frontend_s": m.frontend_s} if m.frontend_s is not None else {}),
                    **(
                        {
                            "per_call": [
                                {"op": c.op, "kernel": c.kernel, "s": c.seconds}
                                for c in m.per_call
                            ]
                        }
                        if m.per_call
                        else {}
                    ),
                }
                for m in file.measurements
            ],
        },
    )


def load_measurements(path: str | Path) -> MeasurementFile:
    """Read and check a measurement file: every field of its type, every time in seconds
    within :data:`STEP_RANGE_S` (steps, forward passes, samples) or :data:`PART_RANGE_S` (an
    op's forward pass, a kernel call).

    Raises:
        CalibrationError: the file is missing, not JSON, not a measurement file, empty, a field
            is of the wrong type or unknown, or one of its measurements is malformed (the
            message names the file, the entry and the field).
    """
    path = Path(path)
    where = str(path)
    try:
        data = json.loads(path.read_text(), parse_constant=_no_constant)
    except FileNotFoundError as e:
        raise CalibrationError(f"measurement file {where!r} does not exist") from e
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CalibrationError(
            f"measurement file {where!r} is not readable JSON ({_first_line(e)}); expected "
            f"a file written by 'tinytune profile' (format {FORMAT!r})"
        ) from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CalibrationError(
            f"{where!r} is not a tinytune measurement file: expected a JSON object with "
            f'"format": "{FORMAT}"'
        )
    if unknown := sorted(set(data) - _FILE_KEYS):
        raise CalibrationError(
            f"measurement file {where!r} has unknown fields {unknown[:3]}; allowed: "
            f"{sorted(_FILE_KEYS)}"
        )
    entries = data.get("measurements")
    if entries is not None and not isinstance(entries, list):
        raise CalibrationError(
            f"measurement file {where!r}: measurements {_short(entries)} is not a JSON array"
        )
    if not entries:
        raise CalibrationError(f"measurement file {where!r} has no measurements")
    precision = data.get("precision")
    if precision not in ("fp32", "int8"):
        raise CalibrationError(
            f"measurement file {where!r}: precision {_short(precision)} is not 'fp32' or 'int8'"
        )
    for field, kind in (("device", "a name"), ("engine", "a name"), ("created_at", "a string")):
        if data.get(field) is not None and not isinstance(data[field], str):
            raise CalibrationError(
                f"measurement file {where!r}: {field} {_short(data[field])} is not {kind}"
            )
    machine = data.get("machine")
    if machine is not None and not isinstance(machine, dict):
        raise CalibrationError(
            f"measurement file {where!r}: machine {_short(machine)} is not a JSON object of "
            "the measuring machine's facts by name"
        )
    engine = data.get("engine")
    if engine in ENGINE_PRECISION and precision != ENGINE_PRECISION[engine]:
        raise CalibrationError(
            f"measurement file {where!r}: engine {engine!r} trains in "
            f"{ENGINE_PRECISION[engine]}, but the file says precision {precision!r}"
        )
    measurements = []
    for i, entry in enumerate(entries):
        try:
            measurements.append(_measurement(entry))
        except ValueError as e:
            raise CalibrationError(
                f"measurement {i} of {where!r} is malformed ({_first_line(e)}); expected "
                "name, graph and train_step_s (seconds)"
            ) from e
    return MeasurementFile(
        device=data.get("device") or "",
        precision=precision,
        machine=machine or {},
        created_at=data.get("created_at") or "",
        measurements=tuple(measurements),
        engine=engine or "",
    )


_FILE_KEYS = {"format", "device", "precision", "engine", "machine", "created_at", "measurements"}
_MEASUREMENT_KEYS = {
    "name",
    "graph",
    "train_step_s",
    "train_step_median_s",
    "inference_s",
    "samples",
    "per_op_forward_s",
    "per_op_backward_s",
    "per_call",
    "frontend_s",
}
_CALL_KEYS = {"op", "kernel", "s"}


def _measurement(entry: Any) -> Measurement:
    """One entry of ``measurements``, checked field by field.

    Raises:
        ValueError: a field is missing, unknown, of the wrong type or out of its range.
    """
    if not isinstance(entry, dict):
        raise ValueError(f"{_short(entry)} is not a JSON object")
    if unknown := sorted(set(entry) - _MEASUREMENT_KEYS):
        raise ValueError(f"unknown fields {unknown[:3]}; allowed: {sorted(_MEASUREMENT_KEYS)}")
    for field in ("name", "graph", "train_step_s"):
        if field not in entry:
            raise ValueError(f"{field} is missing")
    name = entry["name"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"name {_short(name)} is not a non-empty string")
    step = _seconds(entry["train_step_s"], "train_step_s", STEP_RANGE_S)
    infer, median, frontend = (
        None if entry.get(field) is None else _seconds(entry[field], field, STEP_RANGE_S)
        for field in ("inference_s", "train_step_median_s", "frontend_s")
    )
    samples = tuple(
        _seconds(v, f"samples[{k}]", STEP_RANGE_S) for k, v in enumerate(_list(entry, "samples"))
    )
    graph = _graph(entry["graph"])
    per_op, per_op_backward = (
        _per_op(entry, f) for f in ("per_op_forward_s", "per_op_backward_s")
    )
    per_call = tuple(_call(c, f"per_call[{k}]") for k, c in enumerate(_list(entry, "per_call")))
    if unknown := sorted({c.op for c in per_call} - {op.name for op in graph.ops}):
        raise ValueError(f"per_call names ops the graph does not have: {unknown[:3]}")
    return Measurement(
        name=name,
        graph=graph,
        train_step_s=step,
        inference_s=infer,
        samples=samples,
        train_step_median_s=median,
        per_op_forward_s=per_op,
        per_call=per_call,
        per_op_backward_s=per_op_backward,
        frontend_s=frontend,
    )


def _per_op(entry: dict[str, Any], field: str) -> dict[str, float]:
    """``entry[field]``, seconds by op name (an empty one when it is absent)."""
    data = entry.get(field)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{field} {_short(data)} is not a JSON object of op names to seconds")
    return {k: _seconds(v, f"{field}[{k!r}]", PART_RANGE_S) for k, v in data.items()}


def _seconds(value: Any, field: str, bounds: tuple[float, float]) -> float:
    """``value`` as seconds within ``bounds``; ``field`` names it in the error."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{field} {_short(value)} is not a number of seconds")
    # compared as given: NaN and the infinities fall outside, and an integer too large for a
    # float is out of range rather than an OverflowError
    if not low <= value <= high:
        raise ValueError(f"{field} {_short(value)} is outside {_range(bounds)} seconds")
    return float(value)


def _list(entry: dict[str, Any], field: str) -> list[Any]:
    value = entry.get(field)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{field} {_short(value)} is not a JSON array")
    return value


def _call(data: Any, field: str) -> CallTime:
    """One timed kernel call, ``{"op": ..., "kernel": ..., "s": ...}``."""
    from tinytune.hwmodels.latency import KERNEL_PHASES

    if not isinstance(data, dict) or set(data) != _CALL_KEYS:
        raise ValueError(f"{field} {_short(data)} is not a JSON object of op, kernel and s")
    for key in ("op", "kernel"):
        if not isinstance(data[key], str):
            raise ValueError(f"{field}.{key} {_short(data[key])} is not a name")
    if data["kernel"] not in KERNEL_PHASES:
        raise ValueError(
            f"{field}.kernel {data['kernel']!r} is not a kernel of the bundle; known: "
            f"{sorted(KERNEL_PHASES)}"
        )
    return CallTime(data["op"], data["kernel"], _seconds(data["s"], f"{field}.s", PART_RANGE_S))


def _graph(data: Any) -> Graph:
    """The traced network of a measurement, checked to be one the latency model can price:
    every op's cost class and features (finite numbers >= 0) can be worked out."""
    import numpy as np

    from tinytune.hwmodels.latency import cost_class, phase_features

    if not isinstance(data, dict):
        raise ValueError(f"graph {_short(data)} is not a JSON object")
    try:
        graph = Graph.from_json(json.dumps(data))
        features = []
        for op in graph.ops:
            cost_class(op)  # reads the convolution's groups, kernel and weight shape
            features.extend(phase_features(op, graph).values())
    except (AttributeError, IndexError, KeyError, OverflowError, TypeError, ValueError) as e:
        problem = f"no {e.args[0]!r}" if isinstance(e, KeyError) and e.args else _first_line(e)
        raise ValueError(f"graph is not a traced network ({problem})") from e
    if not graph.ops:
        raise ValueError("graph has no ops")
    if unnamed := [op.name for op in graph.ops if not isinstance(op.name, str)]:
        raise ValueError(f"graph has an op named {_short(unnamed[0])}, which is not a name")
    for f in features:
        if f.dtype.kind != "f" or not (np.isfinite(f).all() and (f >= 0).all()):
            raise ValueError(
                "graph is not a traced network (an op's sizes or multiply-accumulates are "
                "not finite numbers >= 0)"
            )
    return graph


def _no_constant(name: str) -> float:
    """Refuses JSON's non-standard ``NaN``, ``Infinity`` and ``-Infinity``, which Python's
    reader would otherwise take as numbers."""
    raise ValueError(f"{name} is not a JSON number")


def _range(bounds: tuple[float, float]) -> str:
    return f"{bounds[0]:g} to {bounds[1]:g}"


def _short(value: Any, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters so that an error stays one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
