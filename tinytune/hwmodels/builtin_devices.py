"""The built-in devices, read from the package's table ``data/devices.json``.

Two kinds: profiles fitted on published whole-model measurements (:func:`builtin_profiles`,
each fitted by :func:`~tinytune.hwmodels.anchor_fit.fit_profile` on the anchors its clauses
select), and boards known from their datasheets alone (:func:`builtin_boards`), the base that
their bundle profiles are fitted on. Look a device up by name with
:func:`tinytune.hwmodels.registry.get_device`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from tinytune.hwmodels.anchor_fit import PRIOR_CYCLES_PER_MAC, fit_profile
from tinytune.hwmodels.anchors import ANCHORS, MLPERF_TINY_COMMITS, Anchor
from tinytune.hwmodels.latency import LatencyCoefficients
from tinytune.hwmodels.profile import DeviceProfile

__all__ = ["builtin_boards", "builtin_profiles"]

_FACTS = ("name", "description", "core", "clock_hz", "sram_bytes", "flash_bytes", "precision")


@functools.cache
def _table() -> dict[str, Any]:
    text = resources.files("tinytune.hwmodels").joinpath("data/devices.json").read_text()
    return json.loads(text)


def _text(template: str) -> str:
    """A source or a note of the table with its shared texts filled in."""
    texts = _table()["texts"]
    submitted = ", ".join(MLPERF_TINY_COMMITS[r] for r in ("v0.7", "v1.0", "v1.1"))
    return template.format(
        mlperf="MLPerf Tiny closed", submitted=submitted, commits=MLPERF_TINY_COMMITS, **texts
    )


def _selects(clauses: Sequence[Mapping[str, Any]], anchor: Anchor) -> bool:
    """Whether one clause matches ``anchor``: each of its keys equal to the anchor's field, or
    the field one of a list's values."""
    return any(
        all(
            getattr(anchor, key) in want
            if isinstance(want, list)
            else getattr(anchor, key) == want
            for key, want in clause.items()
        )
        for clause in clauses
    )


def _fitted(row: Mapping[str, Any]) -> DeviceProfile:
    anchors = [a for a in ANCHORS if _selects(row["anchors"], a)]
    assert anchors and all(a.precision == row["precision"] for a in anchors), row["name"]
    fit = fit_profile(anchors, PRIOR_CYCLES_PER_MAC, row["clock_hz"])
    return DeviceProfile(
        **{f: row[f] for f in _FACTS},
        coefficients=fit.coefficients,
        source=_text(row["source"]),
        calibration=fit.calibration,
        loo_median_error=fit.loo_median_error,
        loo_within_10=fit.loo_within_10,
        notes=_text(row["notes"]),
    )


@functools.cache
def _builtin() -> tuple[DeviceProfile, ...]:
    return tuple(_fitted(row) for row in _table()["fitted"])


def builtin_profiles() -> dict[str, DeviceProfile]:
    """The profiles fitted on published measurements, by name (computed once, on first use)."""
    return {p.name: p for p in _builtin()}


def builtin_boards() -> dict[str, DeviceProfile]:
    """The devices known from their datasheets alone, by name: no latency of them is
    published, so they have no ``published`` profile. Each is its facts (clock, SRAM, flash)
    as a profile of the ``bundle`` engine without coefficients: the base that its bundle
    profile is fitted on (:mod:`tinytune.hwmodels.bundle_engine` holds the fitted ones)."""
    return {
        row["name"]: DeviceProfile(
            **{f: row[f] for f in _FACTS},
            coefficients=LatencyCoefficients(),
            engine=row["engine"],
            source=row["source"],
            notes=row["notes"],
        )
        for row in _table()["boards"]
    }
