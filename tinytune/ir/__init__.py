"""The network description shared by the hardware models and the exporter, and the
schedule of a frozen prefix patch by patch."""

from __future__ import annotations

from tinytune.ir.graph import OP_KINDS, TABLE_ACTIVATIONS, Graph, Op, ParamInfo, TensorInfo
from tinytune.ir.patches import (
    PatchPlan,
    Region,
    block_end,
    patch_blocks,
    patch_op,
    patched_op,
    plan_patches,
    unrolled,
)
from tinytune.ir.trace import trace

__all__ = [
    "OP_KINDS",
    "TABLE_ACTIVATIONS",
    "Graph",
    "Op",
    "ParamInfo",
    "PatchPlan",
    "Region",
    "TensorInfo",
    "block_end",
    "patch_blocks",
    "patch_op",
    "patched_op",
    "plan_patches",
    "trace",
    "unrolled",
]
