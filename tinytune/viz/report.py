"""The candidate report: where a training step's SRAM and time go.

Top: bytes alive at every step of the training step (forward steps, then backward steps), by
buffer category, with the budget and the arena size — the per-layer bars of the TinyTL and
MCUNetV3 papers, drawn from the planner's timeline. Bottom: the predicted latency of every op on
the device, split into forward, back-propagation to the input, weight gradient and update.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinytune.hwmodels import LatencyReport, MemoryReport
from tinytune.hwmodels.latency import PHASES
from tinytune.ir import Graph

__all__ = ["CATEGORIES", "report_figure", "step_breakdown"]

CATEGORIES = ("activation", "saved", "gradient", "param_gradient", "weights", "optimizer")
_LABELS = {
    "activation": "activations",
    "saved": "kept for backward",
    "gradient": "activation gradients",
    "param_gradient": "parameter gradients",
    "weights": "trained weights",
    "optimizer": "optimizer state",
}
_PHASE_LABELS = {
    "forward": "forward",
    "grad_input": "grad → input",
    "grad_weight": "weight gradient",
    "update": "update",
}


def step_breakdown(memory: MemoryReport) -> np.ndarray:
    """Bytes alive per (category, step): shape ``(len(CATEGORIES), steps)``; each column sums
    to the planner's timeline at that step."""
    steps = len(memory.timeline)
    out = np.zeros((len(CATEGORIES), steps))
    for b in memory.buffers:
        out[CATEGORIES.index(b.category), b.start : b.end + 1] += b.nbytes
    return out


def report_figure(
    graph: Graph,
    memory: MemoryReport,
    latency: LatencyReport | None,
    path: Path,
    *,
    title: str,
    budget_bytes: int | None = None,
    device: str = "",
) -> Path:
    """Write the report PNG to ``path`` and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 2 if latency is not None else 1
    fig, axes = plt.subplots(rows, 1, figsize=(12, 4.2 * rows), squeeze=False)
    ax = axes[0][0]
    data = step_breakdown(memory) / 1024
    n = len(graph.ops)
    x = np.arange(data.shape[1])
    bottom = np.zeros_like(x, dtype=float)
    colors = plt.get_cmap("tab10").colors
    for i, cat in enumerate(CATEGORIES):
        if data[i].any():
            ax.bar(x, data[i], bottom=bottom, width=1.0, color=colors[i], label=_LABELS[cat])
            bottom += data[i]
    ax.axvline(n - 0.5, color="black", lw=0.8)
    ax.axhline(memory.arena_bytes / 1024, color="black", ls="--", lw=1, label="arena")
    if budget_bytes:
        ax.axhline(budget_bytes / 1024, color="red", ls=":", lw=1.2, label="budget")
    ax.set_xlim(-0.5, len(x) - 0.5)
    ax.set_ylabel("SRAM alive (KB)")
    ax.set_xlabel(f"step: forward ops 0–{n - 1}, then their backward in reverse")
    ax.set_title(
        f"{title}\npeak {memory.peak_bytes / 1024:.1f} KB at {memory.peak_phase} of "
        f"{memory.peak_op}; arena {memory.arena_bytes / 1024:.1f} KB ({memory.precision}); "
        f"flash {(memory.flash_bytes + memory.code_bytes) / 1024:.1f} KB"
    )
    ax.legend(loc="upper right", fontsize=8, ncol=2)
    if latency is not None:
        ax = axes[1][0]
        per_op = [dict(p) for _, p in latency.per_op]
        bottom = np.zeros(n)
        totals = latency.phase_totals()
        for i, phase in enumerate(PHASES):
            values = np.array([1000 * p.get(phase, 0.0) for p in per_op])
            if values.any():
                label = f"{_PHASE_LABELS[phase]} ({1000 * totals[phase]:.1f} ms)"
                ax.bar(
                    np.arange(n), values, bottom=bottom, width=0.9, color=colors[i], label=label
                )
                bottom += values
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_xlabel("op (execution order)")
        ax.set_ylabel("predicted time (ms)")
        ax.set_title(
            f"predicted on {device}: training step {1000 * latency.train_step_s:.1f} ms, "
            f"inference {1000 * latency.inference_s:.1f} ms"
        )
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
