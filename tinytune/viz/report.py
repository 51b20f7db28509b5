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
from tinytune.ir import Graph, patched_op

__all__ = ["CATEGORIES", "op_latencies", "report_figure", "step_breakdown"]

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


def op_latencies(graph: Graph, latency: LatencyReport) -> np.ndarray:
    """Predicted seconds per (phase, op of ``graph``): shape ``(len(PHASES), len(graph.ops))``.
    A frozen prefix run patch by patch is priced once per patch (``conv@0``, ``conv@1``, ...):
    an op's column sums its patches, so that the columns add up to the training step."""
    column = {op.name: i for i, op in enumerate(graph.ops)}
    out = np.zeros((len(PHASES), len(graph.ops)))
    for name, phases in latency.per_op:
        i = column[patched_op(name)]
        for phase, seconds in phases.items():
            out[PHASES.index(phase), i] += seconds
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
        per_op = 1000 * op_latencies(graph, latency)
        bottom = np.zeros(n)
        totals = latency.phase_totals()
        for i, phase in enumerate(PHASES):
            values = per_op[i]
            if values.any():
                label = f"{_PHASE_LABELS[phase]} ({1000 * totals[phase]:.1f} ms)"
                ax.bar(
                    np.arange(n), values, bottom=bottom, width=0.9, color=colors[i], label=label
                )
                bottom += values
        xlabel = "op (execution order)"
        if memory.patches is not None:
            stage = memory.patches.stage_end
            ax.axvspan(-0.5, stage - 0.5, color="grey", alpha=0.12, lw=0)
            xlabel += (
                f"; shaded: ops 0–{stage - 1} run patch by patch, each bar the sum of its "
                f"{len(memory.patches.held)} patches"
            )
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_xlabel(xlabel)
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
