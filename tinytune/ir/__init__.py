"""The network description shared by the hardware models and the exporter."""

from __future__ import annotations

from tinytune.ir.graph import OP_KINDS, TABLE_ACTIVATIONS, Graph, Op, ParamInfo, TensorInfo
from tinytune.ir.trace import trace

__all__ = ["OP_KINDS", "TABLE_ACTIVATIONS", "Graph", "Op", "ParamInfo", "TensorInfo", "trace"]
