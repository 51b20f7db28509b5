"""A contribution table: the accuracy gains of a scheme's parts on one sub-network, built from
the entries a contribution analysis stored (:mod:`tinytune.search.ladder.contribution`), and read
by the additive proxy (:mod:`tinytune.search.ladder.proxy`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tinytune.db import ContributionRecord
from tinytune.spaces import SubnetConfig, SupernetSpec, conv_kinds

__all__ = ["ContributionTable", "build_table", "interpolate"]


@dataclass(frozen=True)
class ContributionTable:
    """Measured accuracy gains (fractions) of the parts of a scheme on one sub-network.

    Attributes:
        key: The table key.
        subnet: The sub-network analysed.
        kinds: Its convolution kinds, in the update-scheme numbering.
        base: Classifier-only validation accuracy.
        bias: ``(k, Δacc_b[:k])`` sorted by k, starting with ``(0, 0.0)``.
        weights: ``(layer, ratio) → Δacc_W`` against the bias tail the layer needs.
        lite: ``block → Δacc`` of a lite residual branch on that block.
        norm: gain of also updating the scales of all convolutions, or None.
        tasks: fine-tunes this run spent building the table (0 when it was reused).
        task_time_s: seconds those fine-tunes took, summed over workers.
    """

    key: str
    subnet: SubnetConfig
    kinds: tuple[str, ...]
    base: float
    bias: tuple[tuple[int, float], ...]
    weights: dict[tuple[int, float], float] = field(default_factory=dict)
    lite: dict[int, float] = field(default_factory=dict)
    norm: float | None = None
    tasks: int = 0
    task_time_s: float = 0.0

    @property
    def n_convs(self) -> int:
        return len(self.kinds)

    @property
    def n_blocks(self) -> int:
        return self.subnet.n_blocks

    def bias_accuracy(self, k: int) -> float:
        """Validation accuracy with the biases of the last k convolutions, interpolated
        linearly between measured tails."""
        return self.base + interpolate(self.bias, k)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (for logs, reports and the dashboard)."""
        return {
            "key": self.key,
            "base": self.base,
            "bias": [[k, d] for k, d in self.bias],
            "weights": [[i, r, d] for (i, r), d in sorted(self.weights.items())],
            "lite": [[b, d] for b, d in sorted(self.lite.items())],
            "norm": self.norm,
        }


def interpolate(points: tuple[tuple[int, float], ...], x: float) -> float:
    """Piecewise-linear interpolation through sorted ``(x, y)`` points, constant beyond them."""
    if not points:
        return 0.0
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def build_table(
    key: str, spec: SupernetSpec, subnet: SubnetConfig, records: Iterable[ContributionRecord]
) -> ContributionTable | None:
    """The table of gains from stored entries, or None when its base is not measured.

    Entries that failed are left out: the proxy then interpolates or borrows from a neighbour.
    """
    acc = {r.entry: r.accuracy for r in records if r.status == "ok" and r.accuracy is not None}
    if "base" not in acc:
        return None
    base = acc["base"]
    kinds = conv_kinds(spec, subnet)
    n = len(kinds)
    bias = {0: 0.0}
    for name, value in acc.items():
        if name.startswith("bias:"):
            bias[int(name.split(":")[1])] = value - base
    bias_points = tuple(sorted(bias.items()))
    weights: dict[tuple[int, float], float] = {}
    lite: dict[int, float] = {}
    for name, value in acc.items():
        part, _, rest = name.partition(":")
        if part == "weight":
            layer, ratio = rest.split(":")
            i = int(layer)
            weights[(i, float(ratio))] = value - (base + interpolate(bias_points, n - i))
        elif part == "lite":
            lite[int(rest)] = value - base
    norm = acc["norm"] - (base + interpolate(bias_points, n)) if "norm" in acc else None
    return ContributionTable(key, subnet, kinds, base, bias_points, weights, lite, norm)
