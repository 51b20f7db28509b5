"""Figures of a study's progress: the measured Pareto front and its hypervolume over time.

:func:`pareto_figure` writes a PNG (matplotlib): on top, measured accuracy against predicted
peak training SRAM for every measured candidate, the Pareto front coloured by predicted
training-step latency, shaped by its update scheme and labelled with its trial number; below,
the normalised hypervolume of the front after each measured evaluation under the latest run's
budgets, ending on the hypervolume stored with the latest front.
:func:`hypervolume_history_figure` is the same history as a plotly figure, which the search
saves into the study so that optuna-dashboard shows it on the study page.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinytune.db import EvaluationRecord

__all__ = ["SCHEME_MARKERS", "hypervolume_history_figure", "pareto_figure"]

SCHEME_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
"""The marker of each update scheme on the front, in the order the schemes first appear."""


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
            ``memory_bytes``, ``latency_s``, ``scheme``, ``trial``; a schedule twin's
            ``fine_tune`` names the fine-tune it shares, which is labelled once).
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
        label=_measured_label(measured),
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
        _draw_front(fig, ax, x, y, latency, points)
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
    ax_hv.set_xlabel("measured evaluations in the study (fine-tunes and schedule twins)")
    ax_hv.set_ylabel("hypervolume (one reference\nfor the whole history)")
    ax_hv.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def _measured_label(measured: Sequence[EvaluationRecord]) -> str:
    """The legend's words for the measured points: fine-tunes and their schedule twins."""
    from tinytune.db import TWIN_OF

    twins = sum(1 for e in measured if TWIN_OF in (e.details or {}))
    words = f"measured: {len(measured) - twins} fine-tunes"
    return words + (f" and {twins} schedule twins" if twins else "")


def _draw_front(
    fig: Any,
    ax: Any,
    x: list[float],
    y: list[float],
    latency: list[float],
    points: list[dict[str, Any]],
) -> None:
    """The front's points: coloured by their step, shaped by their update scheme (in the
    legend), each fine-tune labelled with its trials (``tinytune export TRIAL`` takes one)."""
    from matplotlib.colors import Normalize

    norm = Normalize(min(latency), max(latency) if max(latency) > min(latency) else None)
    schemes = list(dict.fromkeys(str(p.get("scheme") or "?") for p in points))
    dots = None
    for i, scheme in enumerate(schemes):
        mine = [k for k, p in enumerate(points) if str(p.get("scheme") or "?") == scheme]
        dots = ax.scatter(
            [x[k] for k in mine],
            [y[k] for k in mine],
            c=[latency[k] for k in mine],
            cmap="viridis",
            norm=norm,
            marker=SCHEME_MARKERS[i % len(SCHEME_MARKERS)],
            s=60,
            edgecolors="black",
            linewidths=0.6,
            label=f"front: {scheme} ({len(mine)})",
            zorder=3,
        )
    fig.colorbar(dots, ax=ax, label="predicted training step (ms)")
    # one label per fine-tune, at its point of least SRAM: its trials in order of SRAM (its
    # schedule twins, as the table lists them)
    groups: dict[str, list[int]] = {}
    for k, p in enumerate(points):
        groups.setdefault(str(p.get("fine_tune") or p.get("candidate_key") or k), []).append(k)
    for members in groups.values():
        trials = [str(points[k]["trial"]) for k in members if points[k].get("trial") is not None]
        if trials:
            first = members[0]  # the points come in order of SRAM
            ax.annotate(
                " ".join(trials),
                (x[first], y[first]),
                xytext=(-4, 5),
                textcoords="offset points",
                ha="right",
                fontsize=7,
                zorder=4,
            )


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
