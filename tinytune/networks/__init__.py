"""A user's network as an op graph, read from a ``torch.export`` archive or an ONNX file
without running any of its code (:func:`read_network`)."""

from __future__ import annotations

from tinytune.networks.files import NETWORK_SUFFIXES, is_network_file, read_network
from tinytune.networks.graph import (
    ACTIVATION_OPS,
    OPS,
    SUPPORTED,
    NetworkGraph,
    Node,
    check_supported,
    conv_roles,
    dense_as_conv,
    fold_pads,
    same_padded,
    takes_other_sizes,
    total_stride,
)
from tinytune.networks.steps import Plan, Step, body, plan

__all__ = [
    "ACTIVATION_OPS",
    "NETWORK_SUFFIXES",
    "OPS",
    "SUPPORTED",
    "NetworkGraph",
    "Node",
    "Plan",
    "Step",
    "body",
    "check_supported",
    "conv_roles",
    "dense_as_conv",
    "fold_pads",
    "is_network_file",
    "plan",
    "read_network",
    "same_padded",
    "takes_other_sizes",
    "total_stride",
]
