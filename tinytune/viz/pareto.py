"""Figures of a study's progress: the measured Pareto front and its hypervolume over time.

:func:`pareto_figure` writes a PNG (matplotlib): on top, measured accuracy against predicted
peak training SRAM for every measured candidate, the Pareto front coloured by predicted
training-step latency and labelled with each point's update scheme; below, the normalised
hypervolume of the front after each measured evaluation under the latest run's budgets.
:func:`hypervolume_history_figure` is the same history as a plotly figure, which the search
saves into the study so that optuna-dashboard shows it on the study page.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinytune.db import EvaluationRecord

__all__ = ["FRONT_LABELS", "hypervolume_history_figure", "pareto_figure"]

FRONT_LABELS = 12
"""Fronts of at most this many points have each point labelled with its update scheme; on
larger ones the labels would cover each other."""


def pareto_figure(
    evaluations: Sequence[EvaluationRecord],
    front: Sequence[dict[str, Any]],
    history: Sequence[tuple[int, float]],
    path: Path,
    *,
    title: str,
    sram_budget_bytes: int | None = None,
) -> Path:
    """Write the front and hypervolume PNG to ``path`` (whose folder must exist) and return it.

    Args:
        evaluations: the study's successful measured evaluations (drawn in grey).
        front: the latest snapshot's Pareto points (dicts with ``val_accuracy``,
            ``memory_bytes``, ``latency_s``, ``scheme``).
        history: ``(measured evaluations, hypervolume)`` after each snapshot, oldest first
            (:func:`tinytune.search.front.recording.hypervolume_history`).
        path: the PNG to write.
        title: the figure's title.
        sram_budget_bytes: drawn as a vertical line when given.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_hv) = plt.subplots(
        2, 1, figsize=(9, 8.5), gridspec_kw={"height_ratios": [3, 2]}, squeeze=True
    )
    measured = [
        e for e in evaluations if e.val_accuracy is not None and e.memory_bytes is not None
    ]
    ax.scatter(
        [e.memory_bytes / 1024 for e in measured],  # type: ignore[operator]
        [100 * e.val_accuracy for e in measured],  # type: ignore[operator]
        s=18,
        color="0.75",
        label=f"measured ({len(measured)})",
        zorder=1,
    )
    points = sorted(front, key=lambda p: (p["memory_bytes"], -p["val_accuracy"]))
    if points:
        x = [p["memory_bytes"] / 1024 for p in points]
        y = [100 * p["val_accuracy"] for p in points]
        latency = [1000 * (p.get("latency_s") or 0.0) for p in points]
        # the staircase of the accuracy–SRAM projection; points off it are on the front
        # because of their latency
        stairs: list[tuple[float, float]] = []
        for a, b in zip(x, y, strict=True):
            if not stairs or b > stairs[-1][1]:
                stairs.append((a, b))
        ax.step(*zip(*stairs, strict=True), where="post", color="0.3", lw=1, zorder=2)
        dots = ax.scatter(
            x,
            y,
            c=latency,
            cmap="viridis",
            s=60,
            edgecolors="black",
            linewidths=0.6,
            label=f"Pareto front ({len(points)})",
            zorder=3,
        )
        fig.colorbar(dots, ax=ax, label="predicted training step (ms)")
        if len(points) <= FRONT_LABELS:
            for a, b, p in zip(x, y, points, strict=True):
                ax.annotate(
                    str(p.get("scheme") or "?"),
                    (a, b),
                    xytext=(7, -11),
                    textcoords="offset points",
                    fontsize=8,
                    zorder=4,
                )
    if sram_budget_bytes:
        ax.axvline(sram_budget_bytes / 1024, color="red", ls=":", lw=1.2, label="SRAM budget")
    ax.set_xlabel("predicted peak training SRAM (KB)")
    ax.set_ylabel("measured validation accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if history:
        n, hv = zip(*history, strict=True)
        ax_hv.step(n, hv, where="post", color="tab:blue")
        ax_hv.plot(n, hv, "o", color="tab:blue", ms=3)
        ax_hv.set_title(
            f"hypervolume after each measured evaluation, under the latest run's budgets "
            f"(last {hv[-1]:.4f})"
        )
    else:
        ax_hv.text(0.5, 0.5, "no hypervolume yet", ha="center", va="center")
        ax_hv.set_title("hypervolume after each measured evaluation, under the latest budgets")
    ax_hv.set_xlabel("measured evaluations in the study")
    ax_hv.set_ylabel("hypervolume (one reference\nfor the whole history)")
    ax_hv.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def hypervolume_history_figure(history: Sequence[tuple[int, float]], title: str = "") -> Any:
    """The hypervolume history as a ``plotly.graph_objects.Figure``.

    Args:
        history: ``(measured evaluations, hypervolume)`` after each snapshot, oldest first
            (:func:`tinytune.search.front.recording.hypervolume_history`).
        title: the study's name, added to the figure's title when given.
    """
    import plotly.graph_objects as go

    figure = go.Figure(
        go.Scatter(
            x=[n for n, _ in history],
            y=[hv for _, hv in history],
            mode="lines+markers",
            line={"shape": "hv"},
            name="hypervolume",
        )
    )
    figure.update_layout(
        title=f"Hypervolume of the measured Pareto front{f' ({title})' if title else ''}",
        xaxis_title="measured evaluations in the study",
        yaxis_title="hypervolume under the latest run's budgets (accuracy, SRAM, latency; "
        "one reference for the history)",
    )
    return figure
