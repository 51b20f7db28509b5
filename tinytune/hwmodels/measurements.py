"""Measurement files: measured training steps of traced networks on one device, on disk.

A measurement file (format ``tinytune-latency/1``) holds measured training steps of traced
networks on one device:

.. code-block:: json

    {"format": "tinytune-latency/1", "device": "host", "precision": "fp32",
     "machine": {...}, "created_at": "2026-11-21T10:00:00+00:00",
     "measurements": [{"name": "...", "graph": {...}, "train_step_s": 0.021,
                       "train_step_median_s": 0.023, "inference_s": 0.006,
                       "samples": [...], "per_op_forward_s": {...}}]}

``train_step_s`` is the figure fitted (for the host: the fastest of many interleaved repeats,
see :mod:`tinytune.hwmodels.profiler`); the other fields are optional. A bundle's profiler
(``make run-profile-host`` in an exported bundle, ``platform/profile_main.c``) writes
``"engine": "bundle"`` and, per measurement, ``per_call``: the op, the kernel and the seconds
of every kernel call of the step, in order, which the fit uses to separate the phases.

``graph`` is the network's :class:`~tinytune.ir.Graph` as a JSON object, so a file can be
fitted anywhere, without the network. ``tinytune profile`` writes such files for the host; a
board's own runs (for example the exported bundle's step time) can be written in the same form.
:mod:`tinytune.hwmodels.fitting` fits a latency profile from them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinytune.errors import ConfigError
from tinytune.ir import Graph

__all__ = [
    "FORMAT",
    "CalibrationError",
    "CallTime",
    "Measurement",
    "MeasurementFile",
    "load_measurements",
    "save_measurements",
    "write_json_atomic",
]

FORMAT = "tinytune-latency/1"


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
    where measured, a forward pass, the median step, every sample, each op's forward and each
    kernel call of a bundle's step."""

    name: str
    graph: Graph
    train_step_s: float
    inference_s: float | None = None
    samples: tuple[float, ...] = ()
    train_step_median_s: float | None = None
    per_op_forward_s: dict[str, float] = dataclasses.field(default_factory=dict)
    per_call: tuple[CallTime, ...] = ()


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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would make it, not mkstemp's owner-only
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
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
    for field in ("device", "engine"):
        if data.get(field) is not None and not isinstance(data[field], str):
            raise CalibrationError(
                f"measurement file {str(path)!r}: {field} {data[field]!r} is not a name"
            )
    engine = data.get("engine")
    if engine in ENGINE_PRECISION and precision != ENGINE_PRECISION[engine]:
        raise CalibrationError(
            f"measurement file {str(path)!r}: engine {engine!r} trains in "
            f"{ENGINE_PRECISION[engine]}, but the file says precision {precision!r}"
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
        engine=str(data.get("engine") or ""),
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
    per_call = tuple(
        CallTime(str(c["op"]), str(c["kernel"]), float(c["s"]))
        for c in entry.get("per_call") or ()
    )
    if any(not math.isfinite(c.seconds) or c.seconds < 0 for c in per_call):
        raise ValueError("a per_call time is not a finite number >= 0")
    if unknown := sorted({c.op for c in per_call} - {op.name for op in graph.ops}):
        raise ValueError(f"per_call names ops the graph does not have: {unknown[:3]}")
    return Measurement(
        name=str(entry["name"]),
        graph=graph,
        train_step_s=step,
        inference_s=infer,
        samples=tuple(float(s) for s in entry.get("samples") or ()),
        train_step_median_s=median,
        per_op_forward_s=per_op,
        per_call=per_call,
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
