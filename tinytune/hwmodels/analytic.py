"""MCUNetV3's analytic "extra memory" of a sparse update, for comparing budgets with the paper.

tiny-training ``algorithm/core/utils/partial_backward.py::nelem_saved_for_backward`` counts, per
sample, for every convolution whose bias is updated: a 1-bit mask per output element and the
32-bit bias; for one whose weight is also updated, the 8-bit input channels that the weight
gradient reads and the 8-bit updated weights (depthwise: the updated channels of input and
weight); and the 8-bit input of the classifier (whose fp32 weights count 0 bits). It leaves out
the forward working set, gradient buffers and frozen weights, so it is far below the real peak;
the MCUNet budgets "49 KB … 148 KB" of tiny-training are this number.
"""

from __future__ import annotations

import math

from tinytune.ir import Graph

__all__ = ["mcunetv3_extra_bytes"]


def mcunetv3_extra_bytes(graph: Graph) -> int:
    """The analytic extra memory in bytes (per sample) of the graph's update scheme."""
    n = graph.batch_size
    bits = 0
    for op in graph.ops:
        prm = op.params
        if op.kind == "conv" and op.conv_index is not None and prm.bias_trained:
            out = graph.tensors[op.output]
            c_out, h_out, w_out = out.shape[1:]
            bits += c_out * h_out * w_out + c_out * 32  # mask + bias
            if prm.trained_weight:
                x = graph.tensors[op.inputs[0]]
                k = prm.trained_in_channels
                kh, kw = prm.weight_shape[2:]
                h_in, w_in = x.shape[2:]
                if op.attrs["groups"] > 1:  # depthwise: k channels of input and weight
                    bits += h_in * w_in * k * 8 + k * kh * kw * 8
                else:
                    bits += h_in * w_in * k * 8 + c_out * k * kh * kw * 8
        elif op.kind == "linear":
            bits += math.prod(graph.tensors[op.inputs[0]].shape) // n * 8
    return math.ceil(bits / 8)
