"""Fitting a latency model's coefficients (:mod:`tinytune.hwmodels.latency`) to measured times.

:func:`fit_coefficients` fits them from measured step times by non-negative least squares on
relative error, so that small and large networks weigh alike, with the rows of the kernels'
and ops' own timings where there are (:func:`~tinytune.hwmodels.latency.call_rows`,
:func:`~tinytune.hwmodels.latency.op_rows`). A :class:`ModelForm` ties coefficients together
(across classes, phases, features) so that fewer measurements determine them; :func:`solve`
fits any form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinytune.errors import ConfigError
from tinytune.hwmodels.latency import (
    BACKWARD_TIMED,
    COST_CLASSES,
    EAGER_CLASSES,
    FEATURES,
    PHASES,
    SUBCLASSES,
    LatencyCoefficients,
    _design_row,
    call_rows,
    op_rows,
)
from tinytune.ir import Graph

__all__ = [
    "CLASS_SHARING",
    "FULL_FORM",
    "PHASE_SHARING",
    "FitSystem",
    "ModelForm",
    "coefficients_from_vector",
    "fit_coefficients",
    "fit_system",
    "solve",
]


CLASS_SHARING = ("cost", "op", "shared")
PHASE_SHARING = ("each", "forward-backward", "shared")


@dataclass(frozen=True)
class ModelForm:
    """Which of the latency model's coefficients a fit keeps apart, and which it shares.

    The full model has a coefficient per (cost class, phase, feature). A form ties some of
    them to one value, so that fewer networks determine it: a fit of a form solves for its
    parameters, and each (cost class, phase, feature) takes its group's value.

    Attributes:
        classes: ``cost`` (each cost class apart), ``op`` (a few-pixel class shares its op
            class's coefficients) or ``shared`` (one set for every class).
        phases: ``each`` (each phase apart), ``forward-backward`` (the three backward phases
            share one set) or ``shared`` (one set for every phase).
        features: the features fitted; the others' coefficients are 0.
        eager: whether the eager classes (:data:`EAGER_CLASSES`) are fitted, for an engine
            that runs the work around a convolution as kernels of its own (PyTorch eager);
            without, they are 0 and the convolutions' coefficients include that work.
        update_features: when not empty, the update phase has a set of its own on these
            features, the same for every class: an SGD step costs the same per trained
            parameter (and per trained tensor) whatever op the parameter belongs to, and one
            set priced by many networks does not extrapolate as a class's set seen with few
            trained parameters does. Empty: the update is priced as ``phases`` says.
    """

    classes: str = "cost"
    phases: str = "each"
    features: tuple[str, ...] = FEATURES
    update_features: tuple[str, ...] = ()
    eager: bool = False

    def __post_init__(self) -> None:
        if self.classes not in CLASS_SHARING:
            raise ConfigError(f"unknown class sharing {self.classes!r}; allowed: {CLASS_SHARING}")
        if self.phases not in PHASE_SHARING:
            raise ConfigError(f"unknown phase sharing {self.phases!r}; allowed: {PHASE_SHARING}")
        if not self.features or not set(self.features) <= set(FEATURES):
            raise ConfigError(f"features must be some of {FEATURES}, got {self.features!r}")
        if not set(self.update_features) <= set(FEATURES):
            raise ConfigError(
                f"update features must be some of {FEATURES}, got {self.update_features!r}"
            )

    def class_group(self, cls: str) -> str:
        """The group whose coefficients price cost class ``cls``."""
        if self.classes == "shared":
            return "all"
        if self.classes == "op":
            return SUBCLASSES.get(cls, cls)
        return cls

    def phase_group(self, phase: str) -> str:
        """The group whose coefficients price ``phase``."""
        if self.update_features and phase == "update":
            return "update"
        if self.phases == "shared":
            return "all"
        if self.phases == "forward-backward":
            return "forward" if phase == "forward" else "backward"
        return phase

    def tying(self) -> np.ndarray:
        """The 0/1 matrix (full coefficients × parameters) that spreads the form's parameters
        over every (cost class, phase, feature) of the full model, in :func:`call_rows`'s
        column order."""
        index: dict[tuple[str, str, str], int] = {}
        cells = []
        for cls in COST_CLASSES:
            for phase in PHASES:
                group = self.phase_group(phase)
                shared = bool(self.update_features) and group == "update"
                for feature in FEATURES:
                    if feature not in (self.update_features if shared else self.features) or (
                        cls in EAGER_CLASSES and not self.eager
                    ):
                        cells.append(None)
                        continue
                    key = ("all" if shared else self.class_group(cls), group, feature)
                    cells.append(index.setdefault(key, len(index)))
        tying = np.zeros((len(cells), len(index)))
        for row, col in enumerate(cells):
            if col is not None:
                tying[row, col] = 1.0
        return tying

    @property
    def n_params(self) -> int:
        """The number of coefficients the form fits."""
        return self.tying().shape[1]

    def describe(self) -> str:
        """The form in words: ``40 coefficients: a set per op class and phase of macs,
        constant``."""
        classes = {"cost": "cost class", "op": "op class", "shared": ""}[self.classes]
        phases = {"each": "phase", "forward-backward": "forward/backward", "shared": ""}[
            self.phases
        ]
        per = " and ".join(p for p in (classes, phases) if p)
        text = f"{self.n_params} coefficients: " + (f"a set per {per}" if per else "one set")
        text += f" of {', '.join(self.features)}"
        if self.update_features:
            text += f"; the update one set for every class, of {', '.join(self.update_features)}"
        if self.eager:  # terms of their own; with one set for every class, priced alike
            text += "; activations, scales and bias gradients " + (
                "priced alike" if self.classes == "shared" else "apart"
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        """The form as a JSON object (its fields, tuples as lists)."""
        return {
            "classes": self.classes,
            "phases": self.phases,
            "features": list(self.features),
            "update_features": list(self.update_features),
            "eager": self.eager,
        }


FULL_FORM = ModelForm()
"""Every (cost class, phase, feature) its own coefficient: what many varied measurements
determine."""


@dataclass(frozen=True)
class FitSystem:
    """The rows a latency fit solves, each divided by its network's measured step.

    Attributes:
        a: design rows (rows × full coefficients, :func:`call_rows`'s column order).
        b: seconds of each row over its network's step (1 for a whole step).
        network: the index of the network each row belongs to.
        step: True for a whole step's row, False for a timed call's or op's.
    """

    a: np.ndarray
    b: np.ndarray
    network: np.ndarray
    step: np.ndarray


def fit_system(
    graphs: Sequence[Graph],
    seconds: Sequence[float],
    bytes_per_element: int = 4,
    calls: Sequence[Sequence[tuple[str, str, float]]] | None = None,
    forward: Sequence[Mapping[str, float]] | None = None,
    backward: Sequence[Mapping[str, float]] | None = None,
) -> FitSystem:
    """The rows of a fit: each network's whole step, then its timed kernel calls
    (:func:`call_rows`) or, where it has none, its ops' timed forward and backward passes
    (:func:`op_rows`); all divided by the network's step time, so that the fit minimises
    relative error and a part's error weighs as its share of the step.

    Raises:
        ConfigError: no network, a non-positive time, shapes that differ, or times so far
            from the features' scale that the scaled system is not finite.
    """
    if not graphs or len(graphs) != len(seconds):
        raise ConfigError(
            f"need one measured time per network and at least one, got {len(graphs)} networks "
            f"and {len(seconds)} times"
        )
    y = np.asarray(seconds, dtype=float)
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ConfigError("measured times must be finite and > 0 seconds")
    for what, given in (
        ("calls", calls),
        ("forward times", forward),
        ("backward times", backward),
    ):
        if given is not None and len(given) != len(graphs):
            raise ConfigError(f"need one list of {what} per network, got {len(given)}")
    blocks_a, blocks_b, owner, step = [], [], [], []
    # overflow is checked below rather than warned about on stderr
    with np.errstate(over="ignore", invalid="ignore"):
        for i, (graph, t) in enumerate(zip(graphs, y, strict=True)):
            rows = _design_row(graph, bytes_per_element)[None, :]
            secs = np.ones(1) * t
            timed = calls[i] if calls is not None else ()
            if timed:
                parts = call_rows(graph, timed, bytes_per_element)
            else:
                found = [
                    op_rows(graph, by_op[i], phases, bytes_per_element)
                    for by_op, phases in ((forward, ("forward",)), (backward, BACKWARD_TIMED))
                    if by_op is not None and by_op[i]
                ]
                parts = (
                    np.vstack([rows[:0], *(f[0] for f in found)]),
                    np.concatenate([np.zeros(0), *(f[1] for f in found)]),
                )
            blocks_a += [rows / t, parts[0] / t]
            blocks_b += [secs / t, parts[1] / t]
            owner += [i] * (1 + len(parts[1]))
            step += [True] + [False] * len(parts[1])
        a, b = np.vstack(blocks_a), np.concatenate(blocks_b)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ConfigError(
            "the measured times are too far from the networks' sizes to fit (a feature per "
            "second overflows): are the times in seconds?"
        )
    return FitSystem(a, b, np.asarray(owner), np.asarray(step))


def solve(
    system: FitSystem, form: ModelForm = FULL_FORM, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative least squares of ``system`` (its ``rows`` only, a boolean mask, if
    given) in ``form``: the full coefficient vector, and which of its entries the rows
    determine (those of a parameter with a column that is not 0).

    Columns are scaled to unit norm before the solve.

    Raises:
        ConfigError: the scaled system is not finite, or every column is 0.
    """
    from scipy.optimize import nnls

    a, b = (system.a, system.b) if rows is None else (system.a[rows], system.b[rows])
    tying = form.tying()
    with np.errstate(over="ignore", invalid="ignore"):
        tied = a @ tying
        norms = np.linalg.norm(tied, axis=0)
    if not np.isfinite(norms).all():
        raise ConfigError(
            "the measured times are too far from the networks' sizes to fit (a feature per "
            "second overflows): are the times in seconds?"
        )
    used = norms > 0
    if not used.any():  # scipy's nnls aborts the process on a system without columns
        raise ConfigError(
            "the networks' features vanish against the measured times (every column is 0): "
            "are the times in seconds?"
        )
    scaled = tied[:, used] / norms[used]
    theta = np.zeros(tying.shape[1])
    theta[used] = nnls(scaled, b, maxiter=50 * scaled.shape[1])[0] / norms[used]
    return tying @ theta, (tying[:, used].sum(axis=1) > 0)


def coefficients_from_vector(
    x: np.ndarray, determined: np.ndarray, form: ModelForm = FULL_FORM
) -> LatencyCoefficients:
    """The coefficients of a solved vector (:func:`solve`): every (cost class, phase) with a
    determined entry; a few-pixel class is left to fall back on its op class where the form
    shares them."""
    values: dict[str, dict[str, tuple[float, float, float, float]]] = {}
    k = len(FEATURES)
    for c, cls in enumerate(COST_CLASSES):
        if cls in SUBCLASSES and form.class_group(cls) != cls:
            continue
        for p, phase in enumerate(PHASES):
            start = (c * len(PHASES) + p) * k
            if determined[start : start + k].any():
                values.setdefault(cls, {})[phase] = tuple(float(v) for v in x[start : start + k])  # type: ignore[assignment]
    return LatencyCoefficients(values)


def fit_coefficients(
    graphs: Sequence[Graph],
    seconds: Sequence[float],
    bytes_per_element: int = 4,
    calls: Sequence[Sequence[tuple[str, str, float]]] | None = None,
    forward: Sequence[Mapping[str, float]] | None = None,
    backward: Sequence[Mapping[str, float]] | None = None,
    form: ModelForm = FULL_FORM,
) -> LatencyCoefficients:
    """Fit coefficients to measured training-step times by non-negative least squares.

    Rows are divided by the measured time, so the fit minimises relative error
    (:func:`fit_system`). ``calls``, one sequence per network (empty where the calls were not
    timed), adds each network's :func:`call_rows`; ``forward`` and ``backward``, one mapping
    of op names to seconds per network each, add the :func:`op_rows` of those without timed
    calls. A part's error weighs as its share of the step. ``form`` says which coefficients
    are shared.

    Raises:
        ConfigError: fewer measurements than one, a non-positive time, shapes that differ, or
            times so far from the features' scale that the scaled system is not finite.
    """
    system = fit_system(graphs, seconds, bytes_per_element, calls, forward, backward)
    x, determined = solve(system, form)
    return coefficients_from_vector(x, determined, form)
