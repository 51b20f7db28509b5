"""Figures: per-step memory and per-op latency of a candidate, Pareto fronts over time."""

from __future__ import annotations

from tinytune.viz.pareto import hypervolume_history_figure, pareto_figure
from tinytune.viz.report import report_figure

__all__ = ["hypervolume_history_figure", "pareto_figure", "report_figure"]
