"""Fitting a device's latency profile from measurement files, and how well it predicts.

:func:`calibrate` splits the measurements (:mod:`tinytune.hwmodels.measurements`)
deterministically into a fit set and a held-out set, fits the per-op coefficients by
non-negative least squares on the fit set (:func:`~tinytune.hwmodels.latency.fit_coefficients`)
and reports the error on both. A fit that is not usable (too few measurements, or coefficients
that predict a non-positive time for a measured network) raises
:class:`~tinytune.hwmodels.measurements.CalibrationError`, so that nothing is stored.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tinytune.hwmodels.devices import CalibrationPoint, DeviceProfile, unnamed_engine
from tinytune.hwmodels.latency import fit_coefficients, predict_latency
from tinytune.hwmodels.measurements import CalibrationError, Measurement, MeasurementFile
from tinytune.hwmodels.memory import PRECISIONS
from tinytune.ir import Graph

__all__ = ["MIN_FIT", "CalibrationResult", "calibrate"]

MIN_FIT = 4
"""Fewest measurements a fit accepts."""


@dataclass(frozen=True)
class CalibrationResult:
    """A fitted profile and how well it predicts.

    Attributes:
        profile: the device profile with the new coefficients, calibration points and errors.
        fit: a JSON-ready summary (sizes, in-sample and held-out error, inputs) for storage.
    """

    profile: DeviceProfile
    fit: dict[str, Any]


def calibrate(
    files: Sequence[MeasurementFile], base: DeviceProfile, *, held_out: float = 0.25
) -> CalibrationResult:
    """Fit ``base``'s latency coefficients anew from measurement files of that device.

    Args:
        files: measurement files of one precision.
        base: the device's profile; everything but the coefficients, calibration and
            provenance is kept.
        held_out: held-out networks, a count (a whole number >= 1) or a fraction (< 1) of
            the measurements.

    Raises:
        CalibrationError: the files were measured on another device than ``base`` or disagree
            on it or on precision, ``held_out`` is neither a count nor a fraction, there are
            too few measurements, or the fitted coefficients predict a non-positive time for a
            measured network.
    """
    if not files:
        raise CalibrationError("no measurement files given")
    if len(measured_on := sorted({f.device for f in files if f.device})) > 1:
        raise CalibrationError(
            f"measurement files of different devices {measured_on} cannot be fitted together"
        )
    if measured_on and measured_on[0] != base.name:
        raise CalibrationError(
            f"the measurement files were measured on {measured_on[0]!r}, not on "
            f"{base.name!r}: fit them as device {measured_on[0]!r} (--device "
            f"{measured_on[0]}); a bundle's profiler run on a Linux board names itself 'host' "
            f"unless built with PROFILE_TARGET (make profile-aarch64 PROFILE_TARGET={base.name})"
        )
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
    engines = {f.engine for f in files}
    if len(engines) > 1:
        raise CalibrationError(
            f"measurement files of different engines {sorted(engines)} cannot be fitted together"
        )
    engine = engines.pop() or unnamed_engine(base.name)
    coef = fit_coefficients(
        [m.graph for m in fit_ms],
        [m.train_step_s for m in fit_ms],
        bytes_per_element=PRECISIONS[precision].activation,
        calls=[[(c.op, c.kernel, c.seconds) for c in m.per_call] for m in fit_ms],
    )
    machine = files[0].machine
    draft = dataclasses.replace(base, precision=precision, coefficients=coef, engine=engine)
    bad = [m.name for m in ms if not _train_step_s(draft, m.graph) > 0]
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
            _train_step_s(draft, m.graph) / m.train_step_median_s - 1.0
            for m in held_ms
            if m.train_step_median_s
        ]
    )
    described = {
        "bundle": f"tinytune bundle ({machine.get('counter', 'timed')})",
        "pytorch": f"pytorch {machine.get('torch', '?')} eager",
    }.get(engine, "measured")
    board = str(machine.get("processor") or files[0].device or base.name)
    timed_calls = sum(1 for m in fit_ms if m.per_call)
    points = tuple(
        CalibrationPoint(
            model=m.name,
            engine=described,
            board=board,
            measured_s=m.train_step_s,
            fitted_s=_train_step_s(draft, m.graph),
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
            f"measured training steps of {len(ms)} networks on {board}"
            + (f", counted by {machine['counter']}" if "counter" in machine else "")
            + f" ({dt.date.today().isoformat()}); {held_text}"
        ),
        notes=(
            "Fitted by non-negative least squares on relative error over "
            f"{len(fit_ms)} networks"
            + (
                f" and the timed kernel calls of {timed_calls} of them (phases measured)"
                if timed_calls
                else ""
            )
            + f"; the error columns are on {len(held_ms)} held-out ones."
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
        "engine": engine,
        "timed_calls": timed_calls,
        "machine": machine,
        "files": [f.created_at for f in files],
    }
    return CalibrationResult(profile, fit)


def _train_step_s(profile: DeviceProfile, graph: Graph) -> float:
    """Predicted seconds of one training step of ``graph`` at the profile's precision."""
    width = PRECISIONS[profile.precision].activation
    return predict_latency(graph, profile.coefficients, width).train_step_s


def _split(measurements: Sequence[Measurement], held_out: float) -> tuple[list[int], list[int]]:
    """Deterministic split: measurements ordered by a hash of their name, every k-th held out.

    ``held_out`` is a count (a whole number >= 1) or a fraction (0 to 1) of the measurements.
    """
    n = len(measurements)
    if not (held_out >= 0 and (held_out < 1 or float(held_out).is_integer())):
        raise CalibrationError(
            f"--held-out must be a count (a whole number >= 1) or a fraction (0 to 1), got "
            f"{held_out:g}"
        )
    if held_out > n:  # shown as given, not as int(): int(1e308) has 309 digits
        raise CalibrationError(
            f"--held-out {held_out:g} would hold out {held_out:g} networks of {n} measured; a "
            f"fit needs at least {MIN_FIT} besides those held out: measure more networks or "
            "hold out fewer"
        )
    count = round(held_out * n) if held_out < 1 else int(held_out)
    if n - count < MIN_FIT:
        raise CalibrationError(
            f"{n} measurement{'' if n == 1 else 's'} leave{'s' if n == 1 else ''} {n - count} "
            f"to fit after holding out {count}; a fit needs at least {MIN_FIT}: measure more "
            "networks or hold out fewer (--held-out)"
        )
    order = sorted(range(n), key=lambda i: hashlib.sha256(measurements[i].name.encode()).digest())
    held = sorted(order[:: max(1, n // count)][:count]) if count else []
    fit = [i for i in range(n) if i not in set(held)]
    return fit, held


def _errors(profile: DeviceProfile, ms: Sequence[Measurement]) -> list[float]:
    return [_train_step_s(profile, m.graph) / m.train_step_s - 1.0 for m in ms]


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
