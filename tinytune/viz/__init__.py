"""Figures: per-step memory and per-op latency of a candidate, Pareto fronts over time."""

from __future__ import annotations

from tinytune.viz.report import report_figure

__all__ = ["report_figure"]
