"""Fitting a device's latency profile from measurement files, and how well it predicts.

:func:`fit_latency` splits the measurements (:mod:`tinytune.hwmodels.measurements`)
deterministically into a fit set and a held-out set. On the fit set it fits the per-op
coefficients by non-negative least squares (:func:`~tinytune.hwmodels.latency_fit.solve`) on each
network's whole step and on its timed parts (a bundle's kernel calls, or each op's forward and
backward pass on the host), so that a dozen networks give hundreds of rows. The full model has
a coefficient per (cost class, phase, feature), more than a few networks determine; the fit
therefore chooses among :data:`MODEL_FORMS` — which coefficients are shared across classes or
phases, which features are used — the one that predicts whole steps best in cross-validation
over whole networks (:func:`select_form`), and fits it on the whole fit set. It reports the
error on the fit set, in cross-validation and on the held-out networks, and whether that meets
:data:`REQUIRED_ACCURACY` on at least :data:`MIN_CHECKED` networks; a fit that does not is
returned with the reason (:attr:`CalibrationResult.shortfall`), for the caller to refuse or to
store marked.

A fit that is not usable at all (too few measurements, or coefficients that predict a
non-positive time for a measured network) raises
:class:`~tinytune.hwmodels.measurements.CalibrationError`, so that nothing is stored.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinytune.hwmodels.latency import FEATURES, predict_latency
from tinytune.hwmodels.latency_fit import (
    FitSystem,
    ModelForm,
    coefficients_from_vector,
    fit_system,
    solve,
)
from tinytune.hwmodels.measurements import CalibrationError, Measurement, MeasurementFile
from tinytune.hwmodels.memory import PRECISIONS
from tinytune.hwmodels.profile import CalibrationPoint, DeviceProfile, unnamed_engine
from tinytune.ir import Graph

__all__ = [
    "EAGER_ENGINES",
    "ENOUGH_NETWORKS",
    "MIN_CHECKED",
    "MIN_FIT",
    "MODEL_FORMS",
    "REQUIRED_ACCURACY",
    "Accuracy",
    "CalibrationResult",
    "fit_latency",
    "forms_for",
    "networks_to_add",
    "select_form",
]

MIN_FIT = 4
"""Fewest measurements a fit accepts."""

MODEL_FORMS = tuple(
    ModelForm(classes, phases, features, update)
    for classes, phases, features, update in itertools.product(
        ("shared", "op", "cost"),
        ("shared", "forward-backward", "each"),
        (("macs", "constant"), ("macs", "bytes", "constant"), FEATURES),
        (("constant",), ("elements", "constant")),
    )
)
"""The forms a calibration chooses among, from one coefficient set for every class and phase
on two features to a set per cost class and phase on every feature. In each the update phase
has one set for every class (:attr:`~tinytune.hwmodels.latency_fit.ModelForm.update_features`),
per op or per op and trained element: with a set per class, a class whose weights few
measured networks train priced the update of a network that trains many of them several
times too high (a held-out step 5.7× its measured time, 48 networks on the host)."""

MIN_CHECKED = 12
"""Fewest networks whose errors (held out, and cross-validated over the others) a stored
profile's accuracy rests on. From 6 networks the checks passed for fits that predicted other
networks up to 27 % off on the host and 146 % off in Cortex-M7 counts
(``docs/calibration.md``)."""

CV_FOLDS = 10
"""Folds of the cross-validation over whole networks (one network a fold below that many)."""

SCORE_TIE = 1e-6
"""Cross-validated scores (mean |relative error|) this close are a tie, which the form with
fewer coefficients wins: a form that holds the measurements exactly scores 0 to rounding, as
do the larger forms that contain it."""

EAGER_ENGINES = frozenset({"pytorch"})
"""Engines that run the work around a convolution (its activation, a ReLU's mask, a trained
scale, a trained bias's gradient) as kernels of their own, whose fits price it apart
(:data:`~tinytune.hwmodels.latency.EAGER_CLASSES`); a bundle's kernels do it inside the
convolution's and are fitted per kernel call."""


def forms_for(engine: str) -> tuple[ModelForm, ...]:
    """The forms a calibration of ``engine``'s measurements chooses among: :data:`MODEL_FORMS`,
    with the eager classes fitted where the engine runs that work apart
    (:data:`EAGER_ENGINES`)."""
    if engine not in EAGER_ENGINES:
        return MODEL_FORMS
    return tuple(dataclasses.replace(f, eager=True) for f in MODEL_FORMS)


ENOUGH_NETWORKS = {"pytorch": 40, "bundle": 40}
"""Networks to measure on a device, by the engine measured, for a fit that meets
:data:`REQUIRED_ACCURACY` (``docs/calibration.md`` has the error against the number measured);
other engines take the largest."""


@dataclass(frozen=True)
class Accuracy:
    """The held-out error a calibration must reach to become a device's profile.

    Attributes:
        median: the largest median |relative error| over held-out networks.
        worst: the largest |relative error| of any one held-out network.
    """

    median: float = 0.10
    worst: float = 0.25

    def __post_init__(self) -> None:
        for name in ("median", "worst"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise CalibrationError(f"accuracy {name} must be a number > 0, got {value!r}")

    def met_by(self, summary: dict[str, Any]) -> bool:
        """Whether an error summary (:func:`_summary`; none is no evidence against) meets it."""
        if not summary["n"]:
            return True
        return (
            summary["median_abs_error"] <= self.median and summary["max_abs_error"] <= self.worst
        )

    def describe(self) -> str:
        """The accuracy in words, for messages."""
        return f"median within ±{self.median:.0%}, every network within ±{self.worst:.0%}"


REQUIRED_ACCURACY = Accuracy()
"""What a calibration's held-out and cross-validated errors must meet to be stored unmarked."""


@dataclass(frozen=True)
class CalibrationResult:
    """A fitted profile and how well it predicts.

    Attributes:
        profile: the device profile with the new coefficients, calibration points and errors.
        fit: a JSON-ready summary (sizes, the form chosen, in-sample, cross-validated and
            held-out error, inputs) for storage.
        shortfall: ``None`` when the fit meets the accuracy it was asked for, else one
            sentence: what was measured and how far from that accuracy the fit predicts.
        more_networks: how many more networks to measure when it falls short (else 0).
    """

    profile: DeviceProfile
    fit: dict[str, Any]
    shortfall: str | None = None
    more_networks: int = 0


def fit_latency(
    files: Sequence[MeasurementFile],
    base: DeviceProfile,
    *,
    held_out: float = 0.25,
    required: Accuracy = REQUIRED_ACCURACY,
) -> CalibrationResult:
    """Fit ``base``'s latency coefficients anew from measurement files of that device.

    Args:
        files: measurement files of one precision.
        base: the device's profile; everything but the coefficients, calibration and
            provenance is kept.
        held_out: held-out networks, a count (a whole number >= 1) or a fraction (< 1) of
            the measurements.
        required: the accuracy the held-out networks (and the cross-validation over the fit
            set) must reach; a fit that does not is returned with its shortfall.

    Raises:
        CalibrationError: the files were measured on another device than ``base`` or disagree
            on it or on precision, ``held_out`` is neither a count nor a fraction, there are
            too few measurements, or the fitted coefficients predict a non-positive time for a
            measured network.
    """
    precision, engine, ms = _checked(files, base)
    fit_idx, held_idx = _split(ms, held_out)
    fit_ms = [ms[i] for i in fit_idx]
    held_ms = [ms[i] for i in held_idx]
    system = fit_system(
        [m.graph for m in fit_ms],
        [m.train_step_s for m in fit_ms],
        PRECISIONS[precision].activation,
        calls=[[(c.op, c.kernel, c.seconds) for c in m.per_call] for m in fit_ms],
        forward=[m.per_op_forward_s for m in fit_ms],
        backward=[m.per_op_backward_s for m in fit_ms],
    )
    form, cv_errors, scores = select_form(system, forms_for(engine))
    coef = coefficients_from_vector(*solve(system, form), form)
    draft = dataclasses.replace(base, precision=precision, coefficients=coef, engine=engine)
    bad = [m.name for m in ms if not _train_step_s(draft, m.graph) > 0]
    if bad:
        raise CalibrationError(
            f"the fit predicts no time for {len(bad)} measured networks (e.g. {bad[0]!r}); the "
            "measurements do not constrain the model: measure more varied networks"
        )
    cv_summary = _summary(cv_errors)
    held_summary = _summary(_errors(draft, held_ms))
    shortfall, more = None, 0
    met = required.met_by(held_summary) and required.met_by(cv_summary)
    if not met or len(ms) < MIN_CHECKED:
        shortfall = _shortfall(len(ms), held_summary, cv_summary, required)
        more = networks_to_add(len(ms), engine)
    profile = _fitted_profile(draft, files, ms, fit_ms, held_ms, form, cv_summary, held_summary)
    fit = {
        "n_fit": len(fit_ms),
        "n_held_out": len(held_ms),
        "form": form.to_dict(),
        "form_text": form.describe(),
        "n_rows": len(system.b),
        "forms_tried": scores,
        "fit": _summary(_errors(draft, fit_ms)),
        "cross_validated": cv_summary,
        "held_out": held_summary,
        **_held_out_record(draft, held_ms),
        "required": dataclasses.asdict(required),
        "meets_required": shortfall is None,
        "precision": precision,
        "engine": engine,
        "timed_calls": sum(1 for m in fit_ms if m.per_call),
        "timed_ops": sum(1 for m in fit_ms if not m.per_call and m.per_op_forward_s),
        "machine": files[0].machine,
        "files": [f.created_at for f in files],
    }
    return CalibrationResult(profile, fit, shortfall, more)


def _held_out_record(draft: DeviceProfile, held_ms: list[Measurement]) -> dict[str, Any]:
    """The held-out networks' names, and their prediction against the median repeat where it
    was recorded."""
    against_median = [
        _train_step_s(draft, m.graph) / m.train_step_median_s - 1.0
        for m in held_ms
        if m.train_step_median_s
    ]
    return {
        "held_out_vs_median": _summary(against_median),
        "held_out_names": [m.name for m in held_ms],
    }


def _checked(
    files: Sequence[MeasurementFile], base: DeviceProfile
) -> tuple[str, str, list[Measurement]]:
    """The files' precision, engine and measurements, checked to be of ``base``'s device, of
    one precision and one engine, each network once."""
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
    ms = [m for f in files for m in f.measurements]
    names = [m.name for m in ms]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise CalibrationError(f"the same network is measured twice: {dup[:3]}")
    engines = {f.engine for f in files}
    if len(engines) > 1:
        raise CalibrationError(
            f"measurement files of different engines {sorted(engines)} cannot be fitted together"
        )
    return precisions.pop(), engines.pop() or unnamed_engine(base.name), ms


def _fitted_profile(
    draft: DeviceProfile,
    files: Sequence[MeasurementFile],
    ms: list[Measurement],
    fit_ms: list[Measurement],
    held_ms: list[Measurement],
    form: ModelForm,
    cv_summary: dict[str, Any],
    held_summary: dict[str, Any],
) -> DeviceProfile:
    """``draft`` (the fitted coefficients) with its calibration points, its held-out error and
    the words that say how it was fitted."""
    machine = files[0].machine
    described = {
        "bundle": f"tinytune bundle ({machine.get('counter', 'timed')})",
        "pytorch": f"pytorch {machine.get('torch', '?')} eager",
    }.get(draft.engine, "measured")
    board = str(machine.get("processor") or files[0].device or draft.name)
    timed_calls = sum(1 for m in fit_ms if m.per_call)
    timed_ops = sum(1 for m in fit_ms if not m.per_call and m.per_op_forward_s)
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
    checked = held_summary if held_summary["n"] else cv_summary
    held_text = (
        f"{held_summary['within_10']:.0%} of {held_summary['n']} held-out networks within ±10 %"
        if held_summary["n"]
        else f"{cv_summary['within_10']:.0%} within ±10 % in cross-validation, none held out"
    )
    parts = [
        f"the timed kernel calls of {timed_calls} of them (phases measured)"
        if timed_calls
        else "",
        f"the timed forward (and backward) pass of each op of {timed_ops} of them"
        if timed_ops
        else "",
    ]
    return dataclasses.replace(
        draft,
        calibration=points,
        loo_median_error=checked["median_abs_error"],
        loo_within_10=checked["within_10"],
        source=(
            f"measured training steps of {len(ms)} networks on {board}"
            + (f", counted by {machine['counter']}" if "counter" in machine else "")
            + f" ({dt.date.today().isoformat()}); {held_text}"
        ),
        notes=(
            "Fitted by non-negative least squares on relative error over "
            f"{len(fit_ms)} networks"
            + "".join(f" and {p}" for p in parts if p)
            + f", in the form that cross-validation over those networks chose ({form.describe()})"
            + f"; the error columns are on {len(held_ms)} held-out ones"
            + (" (cross-validated: none held out)." if not held_ms else ".")
        ),
    )


def select_form(
    system: FitSystem, forms: Sequence[ModelForm] = MODEL_FORMS
) -> tuple[ModelForm, list[float], list[dict[str, Any]]]:
    """The form that predicts whole steps best in cross-validation over whole networks.

    Each network's rows (its step and its timed parts) stay together: scikit-learn's
    :class:`~sklearn.model_selection.GroupKFold` over :data:`CV_FOLDS` folds (one network a
    fold when there are fewer) fits each form on the other folds' rows and predicts each
    held-out network's step. The score is the mean |relative error| over networks; of forms
    that score the same (within :data:`SCORE_TIE`), the one with fewer coefficients wins.
    (The one-standard-error rule, the fewest coefficients within a standard error of the
    best, chose smaller forms that predicted held-out host networks worse: 65 % within ±10 %
    from 48 networks against 73 %.)

    Returns:
        the form, its cross-validated relative error of each network (in the order of
        ``system.network``), and every form's score (JSON-ready).
    """
    from sklearn.model_selection import GroupKFold

    networks = np.unique(system.network)
    folds = list(
        GroupKFold(n_splits=min(CV_FOLDS, len(networks))).split(system.a, groups=system.network)
    )
    steps = np.flatnonzero(system.step)  # one per network, in network order
    tried = []
    for form in forms:
        errors = np.zeros(len(networks))
        for train, _ in folds:
            rows = np.zeros(len(system.b), dtype=bool)
            rows[train] = True
            x, _ = solve(system, form, rows)
            tested = ~rows[steps]
            errors[tested] = system.a[steps[tested]] @ x - 1.0
        tried.append((float(np.mean(np.abs(errors))), form, errors))
    least = min(score for score, _, _ in tried)
    # the fewest coefficients among the forms that score the best (to rounding)
    _, form, errors = min(
        (t for t in tried if t[0] <= least + SCORE_TIE),
        key=lambda t: (t[1].n_params, t[0]),
    )
    scores = [{**f.to_dict(), "cv_mean_abs_error": score} for score, f, _ in tried]
    return form, [float(e) for e in errors], scores


def networks_to_add(measured: int, engine: str) -> int:
    """How many networks to measure besides ``measured`` for a fit that meets the accuracy
    required: up to :data:`ENOUGH_NETWORKS` of the engine, or twice as many as measured when
    that many already fell short."""
    enough = ENOUGH_NETWORKS.get(engine, max(ENOUGH_NETWORKS.values()))
    return max(enough, 2 * measured) - measured


def _shortfall(
    measured: int,
    held: dict[str, Any],
    cross_validated: dict[str, Any],
    required: Accuracy,
) -> str:
    """One sentence: what was measured, and the errors that miss ``required`` (or that they
    rest on fewer than :data:`MIN_CHECKED` networks)."""
    said = []
    for name, s in (("held-out", held), ("cross-validated", cross_validated)):
        if s["n"] and not required.met_by(s):
            said.append(
                f"{name} error median {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%} "
                f"over {s['n']} network{'s' * (s['n'] != 1)}"
            )
    if not said:
        return (
            f"{measured} networks measured, too few to check the accuracy a profile needs "
            f"({required.describe()}) on: it takes at least {MIN_CHECKED}"
        )
    return (
        f"{measured} networks measured; {' and '.join(said)}, short of the accuracy a "
        f"profile needs ({required.describe()})"
    )


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
