"""Proxy fidelity: a candidate's accuracy estimated without training it (MCUNetV3 Eq. 5).

    estimate = base(sub-network) + Δacc_b[:k] + Σ_(i,r) Δacc_W(i, r) + Σ_blocks Δacc_lite + Δnorm

``base`` is the measured classifier-only validation accuracy of the candidate's own
sub-network; the gains come from a :class:`~tinytune.search.ladder.contribution.ContributionTable`
measured on a reference sub-network and are assumed additive, as in MCUNetV3. When the
candidate's sub-network is not the reference one, its parts are mapped onto the reference by
position from the output, where the networks agree (the last blocks and the head):

* bias tail k: Δacc_b interpolated linearly between the measured tails, at the same k counted
  from the output (capped at the reference's convolutions);
* weight (i, r): the analysed layer of the same kind (pw1, dw, pw2, head, …) whose distance from
  the output is nearest to i's (any kind when none matches), at the same ratio (nearest
  measured ratio when that entry failed);
* lite residual on block b: interpolated over the analysed blocks by distance from the last
  block (the branch shape is ignored);
* scales (``norm``): the gain measured for the whole tail, times the fraction of the network
  that the candidate's tail covers.

The estimate is clipped to [0, 1]. It estimates validation accuracy; the rank correlation with
measured validation accuracy is what says whether it can be trusted (:func:`rank_correlation`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tinytune.db import Store
from tinytune.search.ladder.contribution_table import ContributionTable, interpolate
from tinytune.spaces import Candidate

__all__ = ["ProxyEstimate", "RankCorrelation", "estimate", "kendall_tau", "rank_correlation"]


@dataclass(frozen=True)
class ProxyEstimate:
    """An estimated accuracy and the terms it adds up (fractions)."""

    accuracy: float
    base: float
    bias: float
    weights: float
    lite: float
    norm: float

    @property
    def delta(self) -> float:
        """The gain of the scheme over classifier only (what ranks schemes of one
        sub-network; the base cancels)."""
        return self.bias + self.weights + self.lite + self.norm

    def to_dict(self) -> dict[str, float]:
        return {
            "accuracy": self.accuracy,
            "base": self.base,
            "bias": self.bias,
            "weights": self.weights,
            "lite": self.lite,
            "norm": self.norm,
        }


def _weight_delta(table: ContributionTable, kind: str, offset: int, ratio: float) -> float:
    layers = sorted({i for i, _ in table.weights})
    if not layers:
        return 0.0
    n = table.n_convs
    same = [i for i in layers if table.kinds[i] == kind] or layers
    # nearest distance from the output; on a tie, the layer nearer the output
    layer = min(same, key=lambda i: (abs((n - 1 - i) - offset), n - 1 - i))
    ratios = sorted(r for i, r in table.weights if i == layer)
    nearest = min(ratios, key=lambda r: (abs(math.log2(r / ratio)), -r))
    return table.weights[(layer, nearest)]


def _lite_delta(table: ContributionTable, offset: int) -> float:
    points = tuple(sorted((table.n_blocks - 1 - b, d) for b, d in table.lite.items()))
    return interpolate(points, offset)


def estimate(candidate: Candidate, table: ContributionTable, base: float) -> ProxyEstimate:
    """The proxy accuracy of ``candidate`` given its sub-network's classifier-only accuracy
    ``base`` (see the module docstring for how the parts are mapped)."""
    kinds = candidate.conv_kinds
    n = len(kinds)
    update = candidate.update
    bias = interpolate(table.bias, min(update.bias_last_k, table.n_convs))
    weights = sum(_weight_delta(table, kinds[i], n - 1 - i, r) for i, r in update.weights)
    n_blocks = candidate.subnet.n_blocks
    lite = sum(_lite_delta(table, n_blocks - 1 - b) for b in candidate.lite_residual.blocks)
    norm = (table.norm or 0.0) * update.bias_last_k / n if update.norm else 0.0
    total = base + bias + weights + lite + norm
    return ProxyEstimate(min(1.0, max(0.0, total)), base, bias, weights, lite, norm)


@dataclass(frozen=True)
class RankCorrelation:
    """Kendall's τ between two score lists, its two-sided p-value, and the number of pairs."""

    tau: float | None
    p_value: float | None
    n: int


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> RankCorrelation:
    """Kendall's τ-b of ``x`` and ``y`` (``scipy.stats.kendalltau``); None below 3 pairs or
    when either side is constant."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 3:
        return RankCorrelation(None, None, len(x))
    from scipy.stats import kendalltau

    res = kendalltau(x, y)
    tau, p = float(res.statistic), float(res.pvalue)
    if math.isnan(tau):
        return RankCorrelation(None, None, len(x))
    return RankCorrelation(tau, p, len(x))


def rank_correlation(store: Store, study_name: str, fidelity: str = "proxy") -> RankCorrelation:
    """Kendall's τ between a low fidelity's accuracy (``proxy``: the estimate; ``short``: the
    short fine-tune's validation accuracy) and the measured validation accuracy of the study's
    candidates that have both (the latest of each)."""
    low = {
        e.candidate_key: e.val_accuracy if fidelity == "short" else e.accuracy
        for e in store.evaluations(study_name, fidelity=fidelity, status="ok")
    }
    measured = {
        e.candidate_key: e.val_accuracy
        for e in store.evaluations(study_name, fidelity="measured", status="ok")
        if e.val_accuracy is not None
    }
    both = sorted(k for k in set(low) & set(measured) if low[k] is not None)
    return kendall_tau([low[k] for k in both], [measured[k] for k in both])  # type: ignore[misc]
