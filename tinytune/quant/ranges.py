"""Activation ranges of a network, observed on training images.

Every tensor of the traced graph (the network input and every op output but the classifier's
float logits) gets a range [lo, hi] from running the float network on calibration images:

* ``minmax`` (the default): the smallest and largest value seen. Nothing seen on the
  calibration images is clipped; with a few dozen images this is what tiny-training's int8
  models and TFLite's default post-training quantization use.
* ``percentile``: the ``q``-th and (100 − q)-th percentiles of the values seen, which trades a
  little clipping of outliers for a finer scale.

The range is widened to contain 0, so that zero (the padding value) is exact. A convolution
followed by h-swish or h-sigmoid also gets the range of its pre-activation (the int8 value that
the device's activation table reads).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tinytune.ir import TABLE_ACTIVATIONS, Graph
from tinytune.quant.errors import QuantizationError

__all__ = ["CALIBRATION_METHODS", "Ranges", "observe", "observe_ranges"]

CALIBRATION_METHODS = ("minmax", "percentile")


@dataclass(frozen=True)
class Ranges:
    """Observed ranges: per tensor id, and per op name the pre-activation of each convolution
    with a table activation (h-swish, h-sigmoid)."""

    tensors: dict[int, tuple[float, float]]
    pre_activations: dict[str, tuple[float, float]]


def observe_ranges(
    net: nn.Module,
    graph: Graph,
    batches: Iterable[Tensor],
    *,
    method: str = "minmax",
    percentile: float = 99.99,
) -> dict[int, tuple[float, float]]:
    """Tensor id → (lo, hi) over ``batches`` of images (N, 3, R, R); see the module docstring.

    ``net`` is the module that ``graph`` was traced from; it is not modified.
    """
    return observe(net, graph, batches, method=method, percentile=percentile).tensors


def observe(
    net: nn.Module,
    graph: Graph,
    batches: Iterable[Tensor],
    *,
    method: str = "minmax",
    percentile: float = 99.99,
) -> Ranges:
    """The ranges of every tensor and of every table activation's input; see
    :func:`observe_ranges`."""
    if method not in CALIBRATION_METHODS:
        raise QuantizationError(
            f"unknown calibration method {method!r}; allowed: {list(CALIBRATION_METHODS)}"
        )
    if not 50.0 < percentile <= 100.0:
        raise QuantizationError(f"percentile must lie in (50, 100], got {percentile}")
    outputs = {op.name: op.output for op in graph.ops if op.kind != "linear"}
    tabled = [op.name for op in graph.ops if op.kind == "conv" and op.act in TABLE_ACTIVATIONS]
    seen: dict[int, list[Tensor]] = {t: [] for t in (graph.input, *outputs.values())}
    seen_pre: dict[str, list[Tensor]] = {name: [] for name in tabled}

    def keep(parts: list[Tensor], value: Tensor) -> None:
        flat = value.detach().reshape(-1).double()
        parts.append(torch.stack([flat.min(), flat.max()]) if method == "minmax" else flat)

    handles = []
    for name, t in outputs.items():
        module = net.get_submodule(name)
        handles.append(module.register_forward_hook(lambda _m, _a, y, t=t: keep(seen[t], y)))
    for name in tabled:  # the convolution once more, without its activation
        module = net.get_submodule(name)
        handles.append(
            module.register_forward_hook(
                lambda m, a, _y, name=name: keep(seen_pre[name], m.pre_activation(a[0]))
            )
        )
    n_batches = 0
    try:
        with torch.no_grad():
            for x in batches:
                keep(seen[graph.input], x)
                net(x)
                n_batches += 1
    finally:
        for h in handles:
            h.remove()
    if not n_batches:
        raise QuantizationError("calibration needs at least one batch of images")

    def range_of(parts: list[Tensor]) -> tuple[float, float]:
        values = torch.cat(parts)
        if method == "minmax":
            lo, hi = float(values.min()), float(values.max())
        else:
            q = torch.tensor([1.0 - percentile / 100.0, percentile / 100.0], dtype=values.dtype)
            lo, hi = (float(v) for v in _quantiles(values, q))
        return min(lo, 0.0), max(hi, 0.0)

    return Ranges(
        {t: range_of(parts) for t, parts in seen.items()},
        {name: range_of(parts) for name, parts in seen_pre.items()},
    )


def _quantiles(values: Tensor, q: Tensor) -> Tensor:
    """Quantiles by sorting (``torch.quantile`` refuses inputs above 2^24 elements)."""
    ordered = values.sort().values
    pos = (q * (ordered.numel() - 1)).round().long()
    return ordered[pos]
